#include "experiments/tools/text_io.h"

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string_view>

#include "experiments/tools/python_tools.h"
#include "framework/model/gguf.h"
#include "framework/text/chat_native.h"
#include "framework/text/chat_template.h"
#include "framework/text/tokenizer.h"
#include "framework/util/error.h"
#include "framework/util/json_at.h"

namespace gengraph {

TokenizerChoice parse_tokenizer_choice(const std::string& value, const std::string& where) {
  if (value == "auto") return TokenizerChoice::Auto;
  if (value == "native") return TokenizerChoice::Native;
  if (value == "python") return TokenizerChoice::Python;
  throw Error(where + ": expected auto, native or python, found '" + value + "'");
}

const char* tokenizer_choice_name(TokenizerChoice choice) {
  switch (choice) {
    case TokenizerChoice::Auto:
      return "auto";
    case TokenizerChoice::Native:
      return "native";
    case TokenizerChoice::Python:
      return "python";
  }
  return "?";
}

TextCodec::TextCodec(const std::string& folder, TokenizerChoice choice, std::ostream& log)
    : folder_(folder), log_(log) {
  // transformers reads model folders: a GGUF file's tokenizer is gengraph's own or none.
  const bool gguf = is_gguf_file(folder);
  if (gguf && choice == TokenizerChoice::Python) {
    throw Error("tokenizer python: '" + folder +
                "' is a GGUF file, which the Python tokenizer (transformers) does not read here; "
                "its tokenizer is native (--tokenizer auto or native)");
  }
  if (choice == TokenizerChoice::Python) {
    description_ = "python: tools/hf_tokenizer.py (transformers) on '" + folder + "' (as asked)";
    return;
  }
  try {
    native_ = load_tokenizer(folder);
    description_ = "native: " + native_->describe();
  } catch (const Error& e) {
    const std::string why = e.what();
    const bool unsupported = why.rfind(std::string(kUnsupportedTokenizer), 0) == 0;
    // Only a kind the native reader does not handle falls back; a damaged file is an error either
    // way (the Python tokenizer would refuse it too, less clearly).
    if (choice == TokenizerChoice::Native || !unsupported || gguf) throw;
    description_ =
        "python: tools/hf_tokenizer.py (transformers) on '" + folder +
        "' (the native tokenizer refused it: " + why.substr(kUnsupportedTokenizer.size()) + ")";
    log_ << "note: " << description_ << "\n";
  }
}

TextCodec::~TextCodec() = default;

std::vector<std::vector<int64_t>> TextCodec::encode(const std::vector<std::string>& texts,
                                                    bool add_special_tokens,
                                                    const std::string& what) const {
  std::vector<std::vector<int64_t>> out;
  if (native_) {
    for (size_t i = 0; i < texts.size(); ++i) {
      out.push_back(native_->encode(texts[i], add_special_tokens));
      if (out.back().empty()) {
        throw Error(what + "[" + std::to_string(i) + "] encodes to no tokens with " +
                    native_->describe());
      }
    }
    return out;
  }
  // tools/hf_tokenizer.py refuses an empty encoding itself.
  nlohmann::json request = {
      {"model", folder_}, {"encode", texts}, {"add_special_tokens", add_special_tokens}};
  return tokenizer_request(folder_, request, "ids", texts.size(), log_)
      .get<std::vector<std::vector<int64_t>>>();
}

std::vector<std::string> TextCodec::decode(const std::vector<std::vector<int64_t>>& ids,
                                           bool skip_special_tokens,
                                           std::vector<size_t>* cut_bytes) const {
  if (cut_bytes != nullptr) cut_bytes->assign(ids.size(), 0);
  if (native_) {
    std::vector<std::string> out;
    for (size_t i = 0; i < ids.size(); ++i) {
      size_t cut = 0;
      out.push_back(native_->decode_whole(ids[i], skip_special_tokens, cut));
      if (cut_bytes != nullptr) (*cut_bytes)[i] = cut;
    }
    return out;
  }
  // transformers' decode, each text ending at its last whole character as the native one's does
  // (tools/hf_tokenizer.py's "whole").
  nlohmann::json request = {{"model", folder_},
                            {"decode", ids},
                            {"skip_special_tokens", skip_special_tokens},
                            {"whole", true}};
  nlohmann::json output;
  auto texts = tokenizer_request(folder_, request, "texts", ids.size(), log_, 0, &output)
                   .get<std::vector<std::string>>();
  if (cut_bytes != nullptr) {
    const JsonAt cuts(output, "the output of tools/hf_tokenizer.py (decode)");
    const std::vector<JsonAt> items = cuts["cut_bytes"].items(ids.size(), "one count a sequence");
    if (items.size() != ids.size()) cuts["cut_bytes"].fail("one count a sequence");
    for (size_t i = 0; i < items.size(); ++i)
      (*cut_bytes)[i] = static_cast<size_t>(items[i].integer_in(0, 3, "0 to 3 bytes"));
  }
  return texts;
}

// The chat template's rendering limits (tools/hf_tokenizer.py enforces them): seconds per text
// (GENGRAPH_CHAT_TEMPLATE_SECONDS, default 30), and characters: 4 per character of the text plus
// a million (a prompt of a million characters is some 250,000 tokens, past the context of any
// model gengraph runs).
int64_t chat_template_seconds() {
  const char* env = std::getenv("GENGRAPH_CHAT_TEMPLATE_SECONDS");
  if (env == nullptr || *env == '\0') return 30;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  if (*end != '\0' || v < 1 || v > 86400) {
    throw Error(
        "GENGRAPH_CHAT_TEMPLATE_SECONDS: expected a whole number of seconds from 1 to "
        "86400, found '" +
        std::string(env) + "'");
  }
  return v;
}

std::vector<std::string> TextCodec::chat_prompts(const std::vector<std::string>& texts) const {
  return render_chat("chat", nlohmann::json(texts), texts.size());
}

std::vector<std::string> TextCodec::chat_conversations(
    const std::vector<nlohmann::json>& conversations) const {
  return render_chat("messages", nlohmann::json(conversations), conversations.size());
}

std::vector<std::string> TextCodec::render_chat(const char* form, const nlohmann::json& items,
                                                size_t count) const {
  const int64_t seconds = chat_template_seconds();
  const bool texts = std::string_view(form) == "chat";
  // Natively where the template allows (framework/text/chat_native.h): no Python process. A
  // template using what the native renderer does not render goes to transformers, by name.
  std::optional<NativeChat> native;
  try {
    native = NativeChat::for_model(folder_);
  } catch (const jinja::Unsupported& e) {
    if (is_gguf_file(folder_)) {
      throw Error("chat: " + std::string(e.what()) +
                  ", and a GGUF file's template has no other renderer (transformers reads model "
                  "folders)");
    }
    log_ << "note: " << e.what() << ": it is rendered by transformers\n";
  }
  if (native) {
    if (!texts) check_chat_messages(items);  // named by conversation and message
    std::vector<std::string> out;
    for (size_t i = 0; i < items.size(); ++i) {
      const nlohmann::json messages =
          texts ? nlohmann::json::array({{{"role", "user"}, {"content", items[i]}}}) : items[i];
      out.push_back(native->render(messages, /*add_generation_prompt=*/true,
                                   (texts ? "text " : "conversation ") + std::to_string(i),
                                   seconds));
    }
    return out;
  }
  if (is_gguf_file(folder_)) {
    throw Error("chat: '" + folder_ +
                "' is a GGUF file without a chat template (tokenizer.chat_template): give the "
                "prompts as texts with the template written out");
  }
  // The template is checked here first (UTF-8, size), naming its file and key; a folder without
  // one is left to the tool, which says so.
  const auto chat_template = read_chat_template(folder_);
  nlohmann::json request = {
      {"model", folder_},
      {form, items},
      {"limits", {{"seconds", seconds}, {"characters_per_character", 4}, {"characters", 1000000}}}};
  if (chat_template) request["template_source"] = chat_template->source;
  // The tool bounds each rendering itself; the process's limit is the backstop (Python's start
  // and the tokenizer's load take some seconds more).
  const int64_t process_limit = seconds * static_cast<int64_t>(count) + 300;
  return tokenizer_request(folder_, request, "texts", count, log_, process_limit)
      .get<std::vector<std::string>>();
}

void decode_outputs(nlohmann::json& runs, const TextCodec& codec, bool skip_special_tokens) {
  // Read through JsonAt: a peer's row was checked when it came, gengraph's are its own.
  const JsonAt all(runs, "the results");
  std::vector<std::vector<int64_t>> seqs;
  for (const auto& run : all.items()) {
    if (!run.has("outputs")) continue;
    for (const auto& in : run["outputs"].items()) {
      for (const auto& s : in["sequences"].items()) {
        std::vector<int64_t> ids;
        for (const auto& id : s["tokens"].items()) ids.push_back(id.integer());
        seqs.push_back(std::move(ids));
      }
    }
  }
  if (seqs.empty()) return;
  std::vector<size_t> cut;
  const std::vector<std::string> texts = codec.decode(seqs, skip_special_tokens, &cut);
  size_t k = 0;
  for (auto& run : runs) {
    if (!run.contains("outputs")) continue;
    for (auto& in : run["outputs"]) {
      for (auto& s : in["sequences"]) {
        if (cut[k] > 0) s["text_cut_bytes"] = cut[k];
        s["text"] = texts[k++];
      }
    }
  }
}

}  // namespace gengraph
