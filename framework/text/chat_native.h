// Chat templates rendered without Python: a model folder's template (read_chat_template) or a GGUF
// file's (tokenizer.chat_template), evaluated by framework/text/jinja.h with what transformers'
// apply_chat_template gives a template: the messages, add_generation_prompt, and the tokenizer's
// special tokens by name (bos_token, eos_token, unk_token, pad_token, ...). A template that uses
// a construct jinja.h does not render is refused as jinja::Unsupported, naming it; the callers
// then render with transformers (experiments/tools: TextCodec, ChatRenderer) where they can.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "framework/text/chat_template.h"
#include "framework/text/jinja.h"

namespace gengraph {

class NativeChat {
 public:
  // The template of `model` (a folder or GGUF file, for messages) and the context values that go
  // with every render (the special tokens).
  NativeChat(const std::string& model, const ChatTemplate& t, nlohmann::json special_tokens);

  // A model folder's template with tokenizer_config.json's special tokens (a string, or an
  // object with "content"); a GGUF file's with its special tokens' texts by id. nullopt when
  // there is no template. Throws jinja::Unsupported (a construct not rendered natively) or Error.
  static std::optional<NativeChat> for_model(const std::filesystem::path& path);

  // One conversation (checked by check_chat_messages first) rendered, as apply_chat_template(
  // tokenize=False) renders it. Bounded: `seconds` of rendering, and `characters` plus
  // `characters_per_character` per character of the messages' contents (the limits the Python
  // renderer applies). Throws Error in the Python renderer's words: "the chat template of
  // '<model>' ('<file>') ran past 30 s on text 0", "... failed on conversation 2: ...".
  std::string render(const nlohmann::json& messages, bool add_generation_prompt,
                     const std::string& where, int64_t seconds = 30, int64_t characters = 1000000,
                     int64_t characters_per_character = 4) const;

  const std::string& source() const { return source_; }

 private:
  std::string model_, source_;
  std::shared_ptr<const jinja::Template> template_;
  nlohmann::ordered_json special_;
};

// A "messages" list of conversations, each a non-empty list of {"role": "system" | "user" |
// "assistant", "content": string}; refused naming the conversation, the message and the key
// ("messages[0][2]: key 'role': expected 'system', 'user' or 'assistant', found \"tool\""), in the
// words of tools/chat_render.py, which checks what goes to transformers.
void check_chat_messages(const nlohmann::json& conversations);

}  // namespace gengraph
