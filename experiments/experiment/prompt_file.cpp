#include "experiments/experiment/prompt_file.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <set>
#include <string_view>

#include "framework/decoding/resolved_settings.h"
#include "framework/text/utf8.h"
#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/json_at.h"
#include "framework/util/strings.h"

namespace gengraph {
namespace {

// Far above any prompt set that fits in memory as token ids; a file past it is refused unread.
constexpr std::uintmax_t kMaxPromptFileBytes = 1ull << 30;

std::string found(const nlohmann::json& v) { return JsonAt::describe(v); }

class LineReader {
 public:
  LineReader(const std::string& path, int64_t line) : path_(path), line_(line) {}
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("'" + path_ + "' line " + std::to_string(line_) + ": " + what);
  }
  [[noreturn]] void fail(const std::string& key, const std::string& expected,
                         const nlohmann::json& value) const {
    fail("key '" + key + "': expected " + expected + ", found " + found(value));
  }
  std::string where() const { return "'" + path_ + "' line " + std::to_string(line_); }

 private:
  const std::string& path_;
  int64_t line_;
};

std::vector<int64_t> token_ids(const LineReader& r, const nlohmann::json& v) {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < v.size(); ++i) {
    const nlohmann::json& t = v[i];
    if (!t.is_number_integer() ||
        (t.is_number_integer() && !t.is_number_unsigned() && t.get<int64_t>() < 0)) {
      r.fail("key 'prompt': item " + std::to_string(i) +
             ": expected a non-negative integer token id, found " + found(t));
    }
    if (t.is_number_unsigned() &&
        t.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      r.fail("key 'prompt': item " + std::to_string(i) + ": a token id too large, found " +
             found(t));
    }
    ids.push_back(t.get<int64_t>());
  }
  return ids;
}

void read_messages(const LineReader& r, const nlohmann::json& v, PromptLine& p) {
  if (!v.is_array() || v.empty()) {
    r.fail("messages", "a non-empty list of {\"role\", \"content\"} objects", v);
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    const nlohmann::json& m = v[i];
    if (!m.is_object()) r.fail(at, "an object with \"role\" and \"content\"", m);
    for (const auto& [k, x] : m.items()) {
      if (k != "role" && k != "content") {
        r.fail("key '" + at + "." + k + "': unknown; a message holds role and content");
      }
    }
    if (!m.contains("role") || !m["role"].is_string() ||
        (m["role"] != "system" && m["role"] != "user" && m["role"] != "assistant")) {
      r.fail(at + ".role", "'system', 'user' or 'assistant'",
             m.contains("role") ? m["role"] : nlohmann::json());
    }
    if (!m.contains("content") || !m["content"].is_string()) {
      r.fail(at + ".content", "a string", m.contains("content") ? m["content"] : nlohmann::json());
    }
  }
  p.messages = v;
}

// One JSON Lines object: the prompt, its id, seed and settings.
PromptLine read_object(const std::string& path, int64_t number, const std::string& text) {
  const LineReader r(path, number);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    std::string why = e.what();
    // nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 5: ..." said
    // as "column 5: ...".
    if (const auto end = why.find("] "); end != std::string::npos) why = why.substr(end + 2);
    const std::string line_one = "parse error at line 1, ";
    if (why.rfind(line_one, 0) == 0) why = why.substr(line_one.size());
    r.fail("expected a JSON object (JSON Lines: one per line), found text that is not JSON (" +
           why + ")");
  }
  if (!doc.is_object())
    r.fail("expected a JSON object (JSON Lines: one per line), found " + found(doc));
  PromptLine p;
  p.line = number;
  if (doc.contains("prompt") == doc.contains("messages")) {
    r.fail(std::string("expected exactly one of 'prompt' (a text or token ids) and 'messages' (a "
                       "conversation), found ") +
           (doc.contains("prompt") ? "both" : "neither"));
  }
  ResolvedSettings probe;
  for (const auto& [key, v] : doc.items()) {
    if (key == "prompt") {
      if (v.is_string() && !v.get<std::string>().empty()) {
        p.text = v.get<std::string>();
      } else if (v.is_array() && !v.empty()) {
        p.ids = token_ids(r, v);
      } else {
        r.fail("prompt", "a non-empty text or a non-empty list of token ids", v);
      }
    } else if (key == "messages") {
      read_messages(r, v, p);
    } else if (key == "id") {
      if (!v.is_string() && !v.is_number_integer()) r.fail("id", "a string or an integer", v);
      p.id = v;
    } else if (key == "seed") {
      if (!v.is_number_unsigned()) r.fail("seed", "a non-negative integer", v);
      p.seed = v.get<uint64_t>();
    } else if (key == "skip_special_tokens") {
      if (!v.is_boolean()) r.fail("skip_special_tokens", "true or false", v);
      p.skip_special_tokens = v.get<bool>();
    } else {
      const auto& keys = generation_keys();
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        std::vector<std::string> all = prompt_line_keys();
        all.insert(all.end(), keys.begin(), keys.end());
        r.fail("unknown key '" + key + "'" + did_you_mean(key, all) +
               "; a line holds prompt or messages, and optionally id, seed, "
               "skip_special_tokens and generation settings (max_new_tokens, temperature, ...: "
               "docs/decoding.md)");
      }
      apply_generation_key(probe, key, v, r.where());  // the value checked as YAML's would be
      p.settings[key] = v;
    }
  }
  return p;
}

bool looks_like_jsonl(const std::string& path, std::string_view first_line) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".jsonl") return true;
  if (ext == ".txt") return false;
  if (first_line.empty() || first_line.front() != '{') return false;
  try {
    return nlohmann::json::parse(first_line).is_object();
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace

const std::vector<std::string>& prompt_line_keys() {
  static const std::vector<std::string> keys = {"prompt", "messages", "id", "seed",
                                                "skip_special_tokens"};
  return keys;
}

nlohmann::json PromptLine::prompt() const {
  if (!messages.is_null()) return messages;
  if (!ids.empty()) return ids;
  return text;
}

PromptFile read_prompt_file(const std::string& path) {
  const std::string bytes =
      read_regular_file(path, "prompt file '" + path + "'",
                        "a text file (one prompt per line) or JSON Lines", kMaxPromptFileBytes);
  PromptFile f;
  f.path = path;
  // The lines, without their line breaks ("\n" or "\r\n"); blank ones skipped.
  std::vector<std::pair<int64_t, std::string_view>> lines;
  int64_t number = 0;
  for (size_t at = 0; at < bytes.size();) {
    size_t end = bytes.find('\n', at);
    if (end == std::string::npos) end = bytes.size();
    std::string_view line(bytes.data() + at, end - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++number;
    if (line.find_first_not_of(" \t") != std::string_view::npos) lines.emplace_back(number, line);
    at = end + 1;
  }
  if (lines.empty()) {
    throw Error("prompt file '" + path + "': expected at least one prompt, found " +
                (bytes.empty() ? "an empty file" : "only blank lines"));
  }
  f.jsonl = looks_like_jsonl(path, lines.front().second);
  std::set<std::string> ids;
  for (const auto& [n, line] : lines) {
    if (!utf8::is_valid(line)) {
      throw Error("'" + path + "' line " + std::to_string(n) +
                  ": expected UTF-8 text, found bytes that are not valid UTF-8");
    }
    if (!f.jsonl) {
      PromptLine p;
      p.line = n;
      p.text = std::string(line);
      f.lines.push_back(std::move(p));
      continue;
    }
    f.lines.push_back(read_object(path, n, std::string(line)));
    const nlohmann::json& id = f.lines.back().id;
    if (!id.is_null() && !ids.insert(id.dump()).second) {
      throw Error("'" + path + "' line " + std::to_string(n) +
                  ": key 'id': expected an id of its " + "own, found " + id.dump() +
                  ", the id of an earlier line");
    }
  }
  return f;
}

}  // namespace gengraph
