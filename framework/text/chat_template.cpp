#include "framework/text/chat_template.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "framework/text/utf8.h"
#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/json_at.h"

namespace gengraph {
namespace {

namespace fs = std::filesystem;

// The offset of the first byte of `text` that is not part of a valid UTF-8 character; npos if none.
size_t first_invalid_byte(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8::valid_sequence_length(text, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::string byte_at(std::string_view text, size_t offset) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(text[offset]));
  return "byte " + std::to_string(offset) + " (" + hex + ")";
}

// A template file transformers reads as UTF-8.
ChatTemplate read_template_file(const fs::path& file) {
  const std::string source = "'" + file.string() + "'";
  ChatTemplate t{source, read_regular_file(file, "chat template " + source, "a Jinja template file",
                                           kMaxChatTemplateBytes)};
  check_chat_template_text(t.text, source);
  return t;
}

}  // namespace

void check_chat_template_text(std::string_view text, const std::string& source) {
  if (text.size() > kMaxChatTemplateBytes) {
    throw Error(source + ": the chat template is " + std::to_string(text.size()) +
                " bytes, more than the " + std::to_string(kMaxChatTemplateBytes) +
                " accepted for one (real templates are a few to some tens of KB)");
  }
  const size_t bad = first_invalid_byte(text);
  if (bad != std::string_view::npos) {
    throw Error(source + ": the chat template is not valid UTF-8: " + byte_at(text, bad) +
                " does not begin or continue a character");
  }
}

std::optional<ChatTemplate> chat_template_from_config(std::string_view config_text,
                                                      const std::string& file) {
  const size_t bad = first_invalid_byte(config_text);
  // A bad byte inside a JSON string arrives in the value as it is: the text with the bad bytes
  // repaired tells whether it lies in the template (U+FFFD there) or elsewhere.
  const std::string text =
      bad == std::string_view::npos ? std::string(config_text) : utf8::repair(config_text);
  const nlohmann::json doc = parse_json_text(text, file);
  const JsonAt root(doc, file);
  root.object("a tokenizer_config.json document (an object)");
  auto not_utf8 = [&](const std::string& key) {
    throw Error(file + ": key '" + key + "': the chat template is not valid UTF-8: " +
                byte_at(config_text, bad) + " of the file does not begin or continue a character");
  };
  auto holds_bad_byte = [&](const std::string& value) {
    return bad != std::string_view::npos && value.find(utf8::kReplacement) != std::string::npos;
  };
  std::optional<ChatTemplate> out;
  if (root.has("chat_template") && !root["chat_template"].json().is_null()) {
    const JsonAt t = root["chat_template"];
    if (t.json().is_string()) {
      const std::string value = t.string();
      if (holds_bad_byte(value)) not_utf8(t.path());
      out = ChatTemplate{file + ", key 'chat_template'", value};
    } else {
      // Named templates: [{"name": "default", "template": "..."}, ...].
      const std::vector<JsonAt> items =
          t.items(1000, "a string, or a list of {\"name\": ..., \"template\": ...}");
      for (const auto& item : items) {
        const std::string name = item["name"].string();
        const std::string value = item["template"].string();
        if (holds_bad_byte(value)) not_utf8(item["template"].path());
        const std::string source = file + ", key '" + item["template"].path() + "'";
        check_chat_template_text(value, source);
        if (!out || name == "default") out = ChatTemplate{source, value};
      }
    }
  }
  if (bad != std::string_view::npos) {
    throw Error(file + " is not valid UTF-8: " + byte_at(config_text, bad) +
                " does not begin or continue a character");
  }
  if (out) check_chat_template_text(out->text, out->source);
  return out;
}

std::optional<ChatTemplate> read_chat_template(const fs::path& folder) {
  std::optional<ChatTemplate> out;
  std::error_code ec;
  // transformers reads every extra template at load: each must be readable.
  const fs::path extra = folder / "additional_chat_templates";
  if (fs::is_directory(extra, ec)) {
    size_t n = 0;
    for (fs::directory_iterator it(extra, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() != ".jinja") continue;
      if (++n > 1000) {
        throw Error("'" + extra.string() + "' holds more than 1000 chat templates");
      }
      ChatTemplate t = read_template_file(it->path());
      if (it->path().stem() == "default") out = std::move(t);
    }
  }
  const fs::path config = folder / "tokenizer_config.json";
  std::optional<ChatTemplate> from_config;
  if (fs::exists(config, ec)) {
    const std::string source = "'" + config.string() + "'";
    from_config = chat_template_from_config(
        read_regular_file(config, "tokenizer config " + source, "a JSON file", kMaxDocumentBytes),
        source);
  }
  if (fs::exists(folder / "chat_template.jinja", ec)) {
    return read_template_file(folder / "chat_template.jinja");  // before the config's
  }
  if (out) return out;
  return from_config;
}

}  // namespace gengraph
