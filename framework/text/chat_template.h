// A model folder's chat template, read and checked before it goes to the Jinja renderer
// (tools/hf_tokenizer.py, through transformers' apply_chat_template). The template is found where
// transformers 5 finds it: chat_template.jinja, else tokenizer_config.json's "chat_template" (a
// string, or a list of {"name", "template"} whose "default" entry is used). Every template file
// transformers reads when it loads the tokenizer (additional_chat_templates/*.jinja too) is
// checked, since one bad file there fails the load:
//   - valid UTF-8, else "'<file>' is not valid UTF-8: byte N (0xFF) ..." (for
//   tokenizer_config.json,
//     "key 'chat_template' is not valid UTF-8" when the bad byte is in the template);
//   - at most kMaxChatTemplateBytes (real templates are a few to some tens of KB).
// Rendering is bounded in tools/hf_tokenizer.py (time, characters and memory).
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace gengraph {

inline constexpr size_t kMaxChatTemplateBytes = 1u << 20;

struct ChatTemplate {
  // Where it came from, for messages: "'<folder>/chat_template.jinja'" or
  // "'<folder>/tokenizer_config.json', key 'chat_template'".
  std::string source;
  std::string text;
};

// The template transformers would use for `folder`, checked (as above); nullopt when the folder
// has none. Errors name the file, the key and what is wrong.
std::optional<ChatTemplate> read_chat_template(const std::filesystem::path& folder);

// The checks on one template's text, `source` naming it: valid UTF-8 (naming the first bad byte's
// offset), no larger than kMaxChatTemplateBytes.
void check_chat_template_text(std::string_view text, const std::string& source);

// The template in the text of a tokenizer_config.json (`file` names it in errors); nullopt when it
// has no "chat_template". The whole file must be valid UTF-8 and JSON.
std::optional<ChatTemplate> chat_template_from_config(std::string_view config_text,
                                                      const std::string& file);

}  // namespace gengraph
