#include "framework/text/chat_native.h"

#include <climits>

#include "framework/model/gguf.h"
#include "framework/text/utf8.h"
#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/json_at.h"

namespace gengraph {
namespace {

namespace fs = std::filesystem;

// transformers' named special tokens (SPECIAL_TOKENS_ATTRIBUTES), which apply_chat_template passes
// to the template by name.
const char* const kSpecialNames[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                     "pad_token", "cls_token", "mask_token"};

// tokenizer_config.json's special tokens, then special_tokens_map.json's for those it lacks; each a
// string or an object whose "content" is one.
nlohmann::json folder_special_tokens(const fs::path& folder) {
  nlohmann::json out = nlohmann::json::object();
  for (const char* file : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const fs::path path = folder / file;
    std::error_code ec;
    if (!fs::exists(path, ec)) continue;
    const std::string source = "'" + path.string() + "'";
    const nlohmann::json doc = parse_json_text(
        read_regular_file(path, "tokenizer config " + source, "a JSON file", kMaxDocumentBytes),
        source);
    if (!doc.is_object()) continue;
    for (const char* name : kSpecialNames) {
      if (out.contains(name) || !doc.contains(name)) continue;
      const nlohmann::json& v = doc[name];
      if (v.is_string()) {
        out[name] = v;
      } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
        out[name] = v["content"];
      } else if (!v.is_null()) {
        throw Error(source + ": key '" + name + "': expected a string or an object with " +
                    "\"content\", found " + v.dump().substr(0, 80));
      }
    }
  }
  return out;
}

// Gemma's turn format, for a Gemma file that carries no template (gemma-3-270m-q4_k_m.gguf has
// none): BOS, then <start_of_turn>user / model turns with the contents trimmed, a system message
// folded into the first user turn, and the model's turn opened for the generation prompt. This is
// the format llama.cpp applies to Gemma files by name ("gemma").
constexpr const char* kGemmaTurns = R"({{- bos_token -}}
{%- set ns = namespace(system='') -%}
{%- for m in messages -%}
  {%- if m['role'] == 'system' -%}
    {%- set ns.system = ns.system + m['content'] | trim -%}
  {%- else -%}
    {{- '<start_of_turn>' + ('model' if m['role'] == 'assistant' else 'user') + '
' -}}
    {%- if ns.system and m['role'] != 'assistant' -%}
      {{- ns.system + '

' -}}
      {%- set ns.system = '' -%}
    {%- endif -%}
    {{- m['content'] | trim + '<end_of_turn>
' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model
' -}}{%- endif -%})";

// A GGUF file's template and its special tokens' texts (tokenizer.ggml.<name>_token_id); for a
// Gemma file without one, Gemma's turn format.
std::optional<NativeChat> gguf_chat(const fs::path& file) {
  const auto f = GgufFile::open(file);
  const std::string key = "tokenizer.chat_template";
  const std::string arch = f->has("general.architecture") ? f->string("general.architecture") : "";
  const bool gemma = arch == "gemma" || arch == "gemma2" || arch == "gemma3";
  if (!f->has(key) && !gemma) return std::nullopt;
  const ChatTemplate t =
      f->has(key) ? ChatTemplate{"'" + file.string() + "', key '" + key + "'", f->string(key)}
                  : ChatTemplate{
                        "gengraph's Gemma turn format ('" + file.string() + "' has no " + key + ")",
                        kGemmaTurns};
  check_chat_template_text(t.text, t.source);
  nlohmann::json special = nlohmann::json::object();
  if (f->has("tokenizer.ggml.tokens")) {
    const auto& tokens = f->strings("tokenizer.ggml.tokens");
    for (const auto& [gguf, name] : {std::pair<const char*, const char*>{"bos", "bos_token"},
                                     {"eos", "eos_token"},
                                     {"unknown", "unk_token"},
                                     {"seperator", "sep_token"},
                                     {"padding", "pad_token"},
                                     {"cls", "cls_token"},
                                     {"mask", "mask_token"}}) {
      const std::string k = std::string("tokenizer.ggml.") + gguf + "_token_id";
      if (!f->has(k)) continue;
      const int64_t id = f->integer(k);
      if (id >= 0 && id < static_cast<int64_t>(tokens.size())) special[name] = tokens[id];
    }
  }
  return NativeChat(file.string(), t, std::move(special));
}

std::string json_kind(const nlohmann::json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

}  // namespace

NativeChat::NativeChat(const std::string& model, const ChatTemplate& t,
                       nlohmann::json special_tokens)
    : model_(model),
      source_(t.source),
      template_(std::make_shared<jinja::Template>(t.text, t.source)),
      special_(nlohmann::ordered_json::parse(special_tokens.dump())) {}

std::optional<NativeChat> NativeChat::for_model(const fs::path& path) {
  if (is_gguf_file(path)) return gguf_chat(path);
  const auto t = read_chat_template(path);
  if (!t) return std::nullopt;
  return NativeChat(path.string(), *t, folder_special_tokens(path));
}

std::string NativeChat::render(const nlohmann::json& messages, bool add_generation_prompt,
                               const std::string& where, int64_t seconds, int64_t characters,
                               int64_t characters_per_character) const {
  check_chat_messages(nlohmann::json::array({messages}));
  int64_t contents = 0;
  for (const auto& m : messages) {
    const std::string& text = m["content"].get_ref<const std::string&>();
    for (size_t i = 0; i < text.size(); ++contents) utf8::next(text, i);  // Python's len()
  }
  jinja::Limits limits;
  limits.seconds = seconds;
  limits.max_steps = INT64_MAX;  // the seconds bound it, as they bound the Python renderer
  limits.max_output = static_cast<size_t>(characters + characters_per_character * contents);
  // apply_chat_template's context: the special tokens, the messages in their keys' order (role,
  // then content, as the request gave them), no tools or documents.
  nlohmann::ordered_json context = special_;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& m : messages) {
    list.push_back({{"role", m["role"]}, {"content", m["content"]}});
  }
  context["messages"] = std::move(list);
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  // The Python renderer's words (tools/chat_render.py), so a refusal reads the same either way.
  const std::string name = "the chat template of '" + model_ + "' (" + source_ + ")";
  try {
    return template_->render(context, limits);
  } catch (const jinja::LimitPassed& e) {
    throw Error(name + " " + e.reason() + " on " + where);
  } catch (const Error& e) {
    throw Error(name + " failed on " + where + ": " + e.what());
  }
}

void check_chat_messages(const nlohmann::json& conversations) {
  auto fail = [](const std::string& what) { throw Error(what); };
  if (!conversations.is_array()) {
    fail("messages: expected an array of conversations, found " + json_kind(conversations));
  }
  for (size_t i = 0; i < conversations.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const nlohmann::json& c = conversations[i];
    if (!c.is_array()) fail(where + ": expected an array of messages, found " + json_kind(c));
    if (c.empty()) fail(where + ": expected at least one message, found none");
    for (size_t j = 0; j < c.size(); ++j) {
      const std::string at = where + "[" + std::to_string(j) + "]";
      const nlohmann::json& m = c[j];
      if (!m.is_object()) {
        fail(at + ": expected an object with 'role' and 'content', found " + json_kind(m));
      }
      for (auto it = m.begin(); it != m.end(); ++it) {
        if (it.key() != "role" && it.key() != "content") {
          fail(at + ": key '" + it.key() +
               "' is not accepted (a message has 'role' and 'content')");
        }
      }
      for (const char* key : {"role", "content"}) {
        if (!m.contains(key)) fail(at + ": key '" + key + "' is missing");
      }
      const nlohmann::json& role = m["role"];
      if (role != "system" && role != "user" && role != "assistant") {
        fail(at + ": key 'role': expected 'system', 'user' or 'assistant', found " +
             (role.is_string() ? role.dump() : json_kind(role)));
      }
      if (!m["content"].is_string()) {
        fail(at + ": key 'content': expected a string, found " + json_kind(m["content"]));
      }
    }
  }
}

}  // namespace gengraph
