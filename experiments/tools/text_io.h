// Text in and out for experiments and the CLI: the native tokenizer (framework/text/tokenizer.h) by
// default, tools/hf_tokenizer.py (transformers' own tokenizer, in a Python process) as the
// fallback, and the chat template through that tool.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gengraph {

class Tokenizer;

// inputs.tokenizer / --tokenizer: "auto" (native, else Python when the native reader refuses the
// file's kind, saying why), "native" (an error instead of the fallback) or "python".
enum class TokenizerChoice { Auto, Native, Python };
TokenizerChoice parse_tokenizer_choice(const std::string& value, const std::string& where);
const char* tokenizer_choice_name(TokenizerChoice choice);

class TextCodec {
 public:
  // The tokenizer of model folder `folder`; notes (the fallback and its reason) go to `log`.
  TextCodec(const std::string& folder, TokenizerChoice choice, std::ostream& log);
  ~TextCodec();

  // Token ids per text (what tokenizer(text) gives; with add_special_tokens false, nothing
  // added). A text that encodes to no tokens is refused, naming `what` and its index.
  std::vector<std::vector<int64_t>> encode(const std::vector<std::string>& texts,
                                           bool add_special_tokens, const std::string& what) const;
  // The text of each token list: special tokens kept, or left out with skip_special_tokens. The
  // native tokenizer ends each at its last whole character (Tokenizer::decode_whole), counting in
  // `cut_bytes` (when given) the bytes of a character the tokens left incomplete.
  std::vector<std::string> decode(const std::vector<std::vector<int64_t>>& ids,
                                  bool skip_special_tokens = false,
                                  std::vector<size_t>* cut_bytes = nullptr) const;
  // Each text as one user message in the model's chat template, ready to encode without special
  // tokens (through tools/hf_tokenizer.py: the template is Jinja).
  std::vector<std::string> chat_prompts(const std::vector<std::string>& texts) const;
  // The same for whole conversations, each a JSON list of {"role", "content"} messages, with the
  // template's generation prompt.
  std::vector<std::string> chat_conversations(
      const std::vector<nlohmann::json>& conversations) const;

  // "native: byte-level BPE, 49152 tokens, '<folder>/tokenizer.json'" or "python: ... (why)".
  const std::string& description() const { return description_; }
  // The native tokenizer, or null on the Python path.
  const Tokenizer* native() const { return native_.get(); }

 private:
  // chat_prompts and chat_conversations: the tool's "chat" or "messages" request.
  std::vector<std::string> render_chat(const char* form, const nlohmann::json& items,
                                       size_t count) const;
  std::string folder_;
  std::unique_ptr<Tokenizer> native_;
  std::string description_;
  std::ostream& log_;
};

// The seconds a chat template may take per text or conversation: GENGRAPH_CHAT_TEMPLATE_SECONDS
// (a whole number from 1 to 86400), default 30; an Error naming the variable when it is not one.
int64_t chat_template_seconds();

// Adds "text" to every generated sequence of every row of a results document's `runs`, and
// "text_cut_bytes" where the length limit cut a last character (left out of the text).
void decode_outputs(nlohmann::json& runs, const TextCodec& codec, bool skip_special_tokens = false);

}  // namespace gengraph
