#include "experiments/experiment/yaml_input.h"

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include "framework/text/chat_native.h"
#include "framework/util/error.h"
#include "framework/util/strings.h"

namespace gengraph {
namespace {

// "file:line:col: " for a node (yaml-cpp marks are 0-based).
// Nodes that came from KEY=VALUE overrides (--set, sweep points), by identity, with their text:
// their marks are positions in that text, not in the file, so errors name the override instead.
thread_local std::vector<std::pair<YAML::Node, std::string>>* override_nodes = nullptr;

void remember_override(const YAML::Node& n, const std::string& spec) {
  if (!override_nodes) return;
  override_nodes->emplace_back(n, spec);
  if (n.IsSequence() || n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it) {
      if (n.IsMap()) {
        remember_override(it->first, spec);
        remember_override(it->second, spec);
      } else {
        remember_override(*it, spec);
      }
    }
  }
}

// The position (1-based line and column) of the first byte that is not part of valid UTF-8, if any.
std::optional<std::pair<size_t, size_t>> first_invalid_utf8(const std::string& text) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > text.size()) return std::make_pair(line, col);
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) >> 6) != 0x2) return std::make_pair(line, col);
    }
    if (c == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
    i += n;
  }
  return std::nullopt;
}

// The first control character YAML does not allow (any below 0x20 but tab, newline and carriage
// return, and DEL): its line, column and byte. yaml-cpp 0.7 can loop without end on some inputs
// holding them (found by fuzzing: a 72-byte file with NUL bytes).
struct ControlCharacter {
  size_t line, col;
  unsigned byte;
};
std::optional<ControlCharacter> first_control_character(const std::string& text) {
  size_t line = 1, col = 1;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F)
      return ControlCharacter{line, col, c};
    if (c == '\n') {
      ++line;
      col = 1;
    } else if ((c & 0xC0) != 0x80) {  // count characters, not UTF-8 continuation bytes
      ++col;
    }
  }
  return std::nullopt;
}

std::string byte_text(unsigned b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", b);
  return buf;
}

// yaml-cpp 0.7 can loop without end on some malformed inputs, building nodes until memory runs
// out (fuzzing found several, 43 to 72 bytes long, e.g. an unclosed flow collection after an
// unknown alias). A dry run of the parser that only counts its events stops any such loop: a
// document has at most a few events per byte, so a budget proportional to the text is never
// reached by one the parser can finish.
class EventBudget : public YAML::EventHandler {
 public:
  EventBudget(std::string source, size_t budget) : source_(std::move(source)), left_(budget) {}
  void OnDocumentStart(const YAML::Mark&) override { spend(); }
  void OnDocumentEnd() override { spend(); }
  void OnNull(const YAML::Mark&, YAML::anchor_t) override { spend(); }
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {
    spend();
    ++aliases_;
  }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {
    spend();
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    spend();
  }
  void OnSequenceEnd() override { spend(); }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    spend();
  }
  void OnMapEnd() override { spend(); }
  size_t aliases() const { return aliases_; }

 private:
  void spend() {
    if (left_-- == 0) {
      throw Error(source_ +
                  ": malformed YAML: the parser does not come to an end on this text (yaml-cpp "
                  "0.7 loops on some malformed flow collections; check brackets and aliases)");
    }
  }
  std::string source_;
  size_t left_;
  size_t aliases_ = 0;
};

// Runs the parser over `text` within its event budget; returns how many aliases (*name) it holds.
size_t dry_run_parser(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  EventBudget budget(source, 4 * text.size() + 1000);
  while (parser.HandleNextDocument(budget)) {
  }
  return budget.aliases();
}

// Limits on a document's structure as it expands: an alias makes a node appear again wherever it
// is referred to, so a small file can stand for a huge or an endless tree ("billion laughs", or
// `a: &x [*x]`, which refers to itself). Far above any real experiment.
constexpr int kMaxYamlDepth = 64;
constexpr int64_t kMaxYamlNodes = 200000;

// The one walk over a document before anything reads it: keys must be plain scalars, once per
// mapping (yaml-cpp itself keeps duplicates silently); no node may contain itself; the expanded
// tree stays within kMaxYamlDepth levels and kMaxYamlNodes nodes. Every later walk is then bounded.
class StructureCheck {
 public:
  // `aliases`: how many aliases the text holds (a document without any cannot expand).
  StructureCheck(std::string source, size_t aliases)
      : source_(std::move(source)), aliases_(aliases) {}
  void run(const YAML::Node& n) {
    if (++nodes_ > kMaxYamlNodes) {
      if (aliases_ > 0) {
        throw Error(where(source_, n) + "the document expands to more than " +
                    std::to_string(kMaxYamlNodes) + " nodes, the most accepted: its " +
                    std::to_string(aliases_) +
                    " alias(es) (*name) repeat anchored (&name) parts; write them out or use "
                    "fewer");
      }
      throw Error(where(source_, n) + "the document has more than " +
                  std::to_string(kMaxYamlNodes) +
                  " nodes (values, lists and mappings), the most accepted in an experiment; "
                  "for long prompts use inputs.synthetic or inputs.texts instead of token-id "
                  "lists");
    }
    if (!n.IsSequence() && !n.IsMap()) return;
    for (const auto& ancestor : path_) {
      if (ancestor.is(n)) {
        throw Error(where(source_, n) +
                    "an alias refers to a node that contains it (an endless document)");
      }
    }
    if (static_cast<int>(path_.size()) >= kMaxYamlDepth) {
      throw Error(where(source_, n) + "nested more than " + std::to_string(kMaxYamlDepth) +
                  " levels deep");
    }
    path_.push_back(n);
    if (n.IsSequence()) {
      for (const auto& item : n) run(item);
    } else {
      std::set<std::string> seen;
      for (auto it = n.begin(); it != n.end(); ++it) {
        if (!it->first.IsScalar()) {
          throw Error(where(source_, it->first) + "expected a plain key name, found " +
                      describe(it->first));
        }
        if (!seen.insert(it->first.Scalar()).second) {
          throw Error(where(source_, it->first) + "duplicate key '" + it->first.Scalar() +
                      "' (each key may appear once in a mapping)");
        }
        run(it->second);
      }
    }
    path_.pop_back();
  }

 private:
  std::string source_;
  size_t aliases_;
  std::vector<YAML::Node> path_;
  int64_t nodes_ = 0;
};

void check_keys(const YAML::Node& n, const std::string& source, size_t aliases) {
  StructureCheck(source, aliases).run(n);
}

}  // namespace

OverrideScope::OverrideScope() : outer_(override_nodes) { override_nodes = &nodes_; }
OverrideScope::~OverrideScope() { override_nodes = outer_; }

std::string where(const std::string& file, const YAML::Node& node) {
  if (override_nodes) {
    for (const auto& [n, spec] : *override_nodes) {
      if (n.is(node)) return "override '" + spec + "': ";
    }
  }
  const YAML::Mark m = node.Mark();
  if (m.line < 0) return file + ": ";
  return file + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1) + ": ";
}

std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing";
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  return "a mapping";
}

// Applies "a.b.c=value" onto the document, creating mappings on the way.
void apply_override(YAML::Node& root, const std::string& spec) {
  const auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw Error("--set '" + spec + "': expected KEY=VALUE, e.g. generation.max_new_tokens=16");
  }
  const std::string key = spec.substr(0, eq);
  if (first_invalid_utf8(spec)) throw Error("--set '" + spec + "': expected UTF-8 text");
  if (const auto cc = first_control_character(spec)) {
    throw Error("--set: expected printable text, found the control character " +
                byte_text(cc->byte) + " at character " + std::to_string(cc->col));
  }
  if (spec.find_first_not_of(" \t", eq + 1) == std::string::npos) {
    throw Error("--set '" + spec +
                "': expected a value after '=' (write KEY=null for an explicit null)");
  }
  YAML::Node value;
  size_t aliases = 0;
  try {
    aliases = dry_run_parser(spec.substr(eq + 1), "--set '" + spec + "'");
    const auto docs = YAML::LoadAll(spec.substr(eq + 1));
    if (docs.size() > 1) {
      throw Error("--set '" + spec + "': expected one YAML value, found " +
                  std::to_string(docs.size()) + " documents (separated by '---')");
    }
    if (!docs.empty()) value = docs[0];
  } catch (const YAML::Exception& e) {
    throw Error("--set '" + spec + "': value is not valid YAML: " + e.msg);
  }
  check_keys(value, "--set '" + spec + "'", aliases);
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string p; std::getline(ss, p, '.');) {
    if (p.empty()) throw Error("--set '" + spec + "': empty key component");
    parts.push_back(p);
  }
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = chain.back()[parts[i]];
    if (next.IsDefined() && !next.IsNull() && !next.IsMap()) {
      throw Error("--set '" + spec + "': '" + parts[i] + "' is not a mapping");
    }
    if (!next.IsDefined() || next.IsNull()) {
      chain.back()[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next = chain.back()[parts[i]];
    }
    chain.push_back(next);
  }
  chain.back()[parts.back()] = value;
  remember_override(value, spec);
}

YAML::Node load_yaml(const std::string& text, const std::string& source) {
  if (const auto bad = first_invalid_utf8(text)) {
    throw Error(source + ":" + std::to_string(bad->first) + ":" + std::to_string(bad->second) +
                ": expected UTF-8 text, found a byte that is not valid UTF-8");
  }
  if (const auto cc = first_control_character(text)) {
    throw Error(source + ":" + std::to_string(cc->line) + ":" + std::to_string(cc->col) +
                ": expected printable YAML text, found the control character " +
                byte_text(cc->byte) + " (YAML allows only tab, newline and carriage return)");
  }
  std::vector<YAML::Node> docs;
  size_t aliases = 0;
  try {
    aliases = dry_run_parser(text, source);
    docs = YAML::LoadAll(text);
  } catch (const YAML::ParserException& e) {
    throw Error(source + ":" + std::to_string(e.mark.line + 1) + ":" +
                std::to_string(e.mark.column + 1) + ": malformed YAML: " + e.msg);
  }
  if (docs.size() > 1) {
    throw Error(source + ": expected one YAML document, found " + std::to_string(docs.size()) +
                " (separated by '---')");
  }
  YAML::Node root = docs.empty() ? YAML::Node() : docs[0];
  check_keys(root, source, aliases);
  return root;
}

namespace {

// Whether `n` is a decimal integer ([+-]digits) too large for 64 bits (int64_t, or uint64_t when
// not `is_signed`): it is then "too large", not "not an integer".
bool digits_past_64_bits(const YAML::Node& n, bool is_signed) {
  if (!n.IsScalar()) return false;
  const std::string& s = n.Scalar();
  const size_t first = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (first == s.size() || s.find_first_not_of("0123456789", first) != std::string::npos)
    return false;
  if (s[0] == '-' && !is_signed) return false;  // negative: not a seed, said as before
  errno = 0;
  if (is_signed) {
    (void)std::strtoll(s.c_str(), nullptr, 10);
  } else {
    (void)std::strtoull(s.c_str(), nullptr, 10);
  }
  return errno == ERANGE;
}

}  // namespace

MapReader::MapReader(YAML::Node node, std::string path, std::string file)
    : node_(std::move(node)), path_(std::move(path)), file_(std::move(file)) {
  if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap()) {
    throw Error(where(file_, node_) + path_ + ": expected a mapping, found " + describe(node_));
  }
}

bool MapReader::has(const std::string& key) {
  known_.insert(key);
  return node_.IsMap() && node_[key].IsDefined() && !node_[key].IsNull();
}

YAML::Node MapReader::child(const std::string& key) {
  known_.insert(key);
  return node_.IsMap() ? node_[key] : YAML::Node();
}

std::string MapReader::located(const std::string& key) {
  const YAML::Node n = child(key);
  return where(file_, n.IsDefined() ? n : node_) + key_path(key);
}

void MapReader::fail(const std::string& key, const std::string& expected) {
  throw Error(located(key) + ": expected " + expected + ", found " + describe(child(key)));
}

void MapReader::too_large(const std::string& key, const std::string& most) {
  const YAML::Node n = child(key);
  throw Error(where(file_, n) + key_path(key) + ": too large (the most is " + most + "), found " +
              describe(n));
}

int64_t MapReader::integer(const std::string& key, int64_t fallback, int64_t min, int64_t max) {
  const std::string expected =
      "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (has(key) && digits_past_64_bits(child(key), /*is_signed=*/true)) {
    if (child(key).Scalar()[0] == '-') fail(key, expected);
    too_large(key, std::to_string(max));
  }
  const int64_t v = scalar<int64_t>(key, fallback, expected);
  if (v > max) too_large(key, std::to_string(max));
  if (v < min) fail(key, expected);
  return v;
}

uint64_t MapReader::seed(const std::string& key, uint64_t fallback) {
  if (has(key) && digits_past_64_bits(child(key), /*is_signed=*/false))
    too_large(key, std::to_string(std::numeric_limits<uint64_t>::max()));
  return scalar<uint64_t>(key, fallback, "a non-negative integer seed");
}

std::string MapReader::choice(const std::string& key, const std::string& fallback,
                              const std::vector<std::string>& allowed) {
  const std::string v = scalar<std::string>(key, fallback, "one of " + join(allowed, ", "));
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
    fail(key, "one of " + join(allowed, ", ") + did_you_mean(v, allowed));
  }
  return v;
}

void MapReader::finish() {
  if (!node_.IsMap()) return;
  std::vector<std::string> known(known_.begin(), known_.end());
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const std::string k = it->first.as<std::string>();
    if (!known_.count(k)) {
      throw Error(where(file_, it->first) + "unknown key '" + key_path(k) + "'" +
                  did_you_mean(k, known) + "; valid keys here: " + join(known, ", "));
    }
  }
}

nlohmann::json to_json(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return nullptr;
  if (n.IsSequence()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& x : n) a.push_back(to_json(x));
    return a;
  }
  if (n.IsMap()) {
    nlohmann::json o = nlohmann::json::object();
    for (auto it = n.begin(); it != n.end(); ++it)
      o[it->first.as<std::string>()] = to_json(it->second);
    return o;
  }
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return s;  // quoted: a string whatever it looks like
  int64_t i = 0;
  double d = 0;
  bool b = false;
  if (YAML::convert<int64_t>::decode(n, i)) return i;
  if (YAML::convert<double>::decode(n, d)) return d;
  if (YAML::convert<bool>::decode(n, b)) return b;
  return s;
}

std::vector<nlohmann::json> chat_conversations(const YAML::Node& n, const std::string& path,
                                               const std::string& file) {
  if (!n.IsSequence() || n.size() == 0) {
    throw Error(where(file, n) + path +
                ": expected a non-empty list of conversations (each a list of {role, content} "
                "messages), found " +
                describe(n));
  }
  // As JSON, a message's scalars as text (content: 2 is the text "2"); what is not a list of
  // maps is left as it is for the check to name.
  nlohmann::json all = nlohmann::json::array();
  for (size_t i = 0; i < n.size(); ++i) {
    const YAML::Node conv = n[i];
    if (!conv.IsSequence()) {
      all.push_back(to_json(conv));
      continue;
    }
    nlohmann::json c = nlohmann::json::array();
    for (size_t j = 0; j < conv.size(); ++j) {
      const YAML::Node m = conv[j];
      if (!m.IsMap()) {
        c.push_back(to_json(m));
        continue;
      }
      nlohmann::json o = nlohmann::json::object();
      for (auto it = m.begin(); it != m.end(); ++it) {
        o[it->first.as<std::string>()] =
            it->second.IsScalar() ? nlohmann::json(it->second.Scalar()) : to_json(it->second);
      }
      c.push_back(std::move(o));
    }
    all.push_back(std::move(c));
  }
  try {
    check_chat_messages(all);
  } catch (const Error& e) {
    // "messages[1][0]: ..." at the conversation's line, under `path`.
    const std::string what = e.what();
    const size_t at = what.find('[');
    YAML::Node located = n;
    if (at == std::string("messages").size()) {
      const size_t index = std::strtoull(what.c_str() + at + 1, nullptr, 10);
      if (index < n.size()) located = n[index];
      throw Error(where(file, located) + path + what.substr(at));
    }
    throw Error(where(file, n) + path + ": " + what);
  }
  return all.get<std::vector<nlohmann::json>>();
}

std::vector<int64_t> token_list(const YAML::Node& n, const std::string& path,
                                const std::string& file) {
  if (!n.IsSequence()) {
    throw Error(where(file, n) + path + ": expected a list of token ids, found " + describe(n));
  }
  std::vector<int64_t> out;
  for (size_t j = 0; j < n.size(); ++j) {
    const YAML::Node t = n[j];
    int64_t v = -1;
    if (!t.IsScalar() || !YAML::convert<int64_t>::decode(t, v) || v < 0) {
      throw Error(where(file, t) + path + "[" + std::to_string(j) +
                  "]: expected a non-negative token id, found " + describe(t));
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace gengraph
