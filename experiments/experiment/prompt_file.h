// Prompts from a file (gengraph generate --prompts FILE, an experiment's inputs: {file: FILE}):
// plain text, one prompt per line, or JSON Lines (a .jsonl file, or one whose first non-blank line
// is a JSON object), one object per line with a prompt (`prompt`: a text or a list of token ids,
// or `messages`: a conversation for the chat template) and, optionally, an `id`, a `seed` and
// generation settings of its own. Blank lines are skipped. The whole file is read and checked
// before anything runs: a bad line is refused naming the file, the line, what was expected and
// what was found.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace gengraph {

struct PromptLine {
  int64_t line = 0;          // where it is in the file, from 1
  nlohmann::json id;         // the line's "id" (a string or an integer), null when none
  std::string text;          // a text prompt, or
  std::vector<int64_t> ids;  // token ids, or
  nlohmann::json messages;   // a conversation ([{role, content}, ...]), null when none
  // The line's own settings: generation keys (checked as a generation: block's are) and
  // skip_special_tokens; `seed` seeds the generator for this prompt.
  nlohmann::json settings = nlohmann::json::object();
  std::optional<uint64_t> seed;
  std::optional<bool> skip_special_tokens;

  bool is_text() const { return ids.empty() && messages.is_null(); }
  // The prompt as the file gave it (a text, the ids, or the messages), for the output lines.
  nlohmann::json prompt() const;
  // Whether the line sets anything besides its prompt and id.
  bool has_settings() const {
    return !settings.empty() || seed.has_value() || skip_special_tokens.has_value();
  }
};

struct PromptFile {
  std::string path;
  bool jsonl = false;
  std::vector<PromptLine> lines;  // the prompts in file order (blank lines skipped)
};

// Reads and checks `path` as above. Errors: "'FILE' line N: ..." naming the key, what was expected
// and what was found; a file without any prompt is refused too.
PromptFile read_prompt_file(const std::string& path);

// The keys a JSONL line may hold besides the generation settings.
const std::vector<std::string>& prompt_line_keys();

}  // namespace gengraph
