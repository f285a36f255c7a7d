// The OpenAI HTTP API's request and response bodies (docs/serving.md#the-server): a request body
// read into what the scheduler runs (token-id prompts, gengraph generation settings, one entry per
// choice), and the JSON the endpoints answer with — whole completions, stream chunks, errors.
// No HTTP here: server/http_server.cpp carries these bodies; tests read and build them directly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace gengraph {

class Tokenizer;
class TextStream;

namespace server {

// An answer other than 200, as OpenAI's error object: {"error": {"message", "type", "param",
// "code"}}. `param` names the request field at fault ("max_tokens", "messages[2].role"), empty
// when none is.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = "",
           std::string type = "invalid_request_error", std::string code = "");
  int status;
  std::string param, type, code;
  nlohmann::json body() const;
};

enum class Endpoint { kCompletions, kChat };

// What reading a request needs of the model and the server.
struct ProtocolLimits {
  std::string model_id;             // the served model's name; a request naming another: 404
  int64_t context_length = 0;       // the model's context (prompt + max_tokens at most)
  int64_t vocab_size = 0;           // token ids in prompts and logit_bias keys below this
  int64_t default_max_tokens = 16;  // max_tokens when a request gives none
  int64_t max_n = 16;               // choices per prompt
  int64_t max_prompts = 64;         // prompts per /v1/completions request
  int64_t max_top_logprobs = 20;
};

// Renders a chat (OpenAI's messages, checked: roles system/user/assistant, string content) through
// the model's own template with add_generation_prompt; throws gengraph::Error when it cannot.
using RenderChat = std::function<std::string(const nlohmann::json& messages)>;

// One request read and checked: every prompt as token ids, the settings every choice shares
// (gengraph generation keys), and what shapes the answer.
struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::vector<std::vector<int64_t>> prompts;  // token ids, one per prompt
  std::vector<std::string> prompt_texts;      // each prompt's text (echo), "" for id prompts
  nlohmann::json settings = nlohmann::json::object();  // for the scheduler (max_new_tokens, ...)
  int64_t n = 1;
  int64_t max_tokens = 0;
  std::optional<uint64_t> seed;   // choice i of a prompt samples with seed + i
  std::vector<std::string> stop;  // text that ends a choice (not included in its text)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with usage
  bool echo = false;           // completions: the prompt's text before the completion's
  int64_t logprobs = -1;       // completions: top alternatives per token (-1: no log-probs)
  bool chat_logprobs = false;  // chat: logprobs true
  int64_t top_logprobs = 0;    // chat: alternatives per token
  bool skip_special_tokens = true;
  int64_t priority = 0;

  bool wants_logprobs() const { return logprobs >= 0 || chat_logprobs; }
  int64_t alternatives() const { return endpoint == Endpoint::kChat ? top_logprobs : logprobs; }
};

// Reads a request body. `tokenizer` may be null (a model without one): text prompts and chat are
// then refused naming why. Throws ApiError (400 with the field named, 404 for another model).
ApiRequest read_request(const std::string& body, Endpoint endpoint, const ProtocolLimits& limits,
                        const Tokenizer* tokenizer, const RenderChat& chat);

// One generated token as the answer reports it.
struct TokenOut {
  int64_t id = 0;
  double logprob = 0;
  std::vector<std::pair<int64_t, double>> top;  // best first
};

// The text and tokens of one choice, built up token by token on the scheduler's thread: the
// detokenised text (special tokens skipped or not), stop strings found in it (the text ends
// before the first one), and which of the tokens the answer covers.
class ChoiceText {
 public:
  ChoiceText(const Tokenizer* tokenizer, bool skip_special_tokens, std::vector<std::string> stop);
  ~ChoiceText();
  // Adds a generated token; returns whether generation should go on (false: a stop string ended
  // the text).
  bool push(const TokenOut& token);
  // The end of generation: any text held back is released (a stop string cannot match any more).
  void finish();
  // Text that became final since the last call (held back: a possible stop string's beginning,
  // an incomplete UTF-8 character).
  std::string take_new_text();
  const std::string& text() const { return text_; }
  const std::vector<TokenOut>& tokens() const { return tokens_; }
  bool stopped_by_string() const { return stopped_; }

 private:
  void append(const std::string& piece);
  std::unique_ptr<TextStream> stream_;  // the detokeniser (null without a tokenizer)
  std::vector<std::string> stop_;
  size_t longest_stop_ = 0;
  std::vector<TokenOut> tokens_;
  std::string text_;  // what the answer holds: the text up to a stop string
  size_t shown_ = 0;  // bytes of text_ handed out by take_new_text
  size_t held_ = 0;   // bytes at the end of text_ held back (a stop string may start there)
  bool stopped_ = false, finished_ = false;
};

// The text of one token for log-probs (its own decode, special tokens kept).
std::string token_text(const Tokenizer* tokenizer, int64_t id);

// The answer bodies. `id`: "cmpl-..." / "chatcmpl-...", `created`: Unix seconds.
struct ChoiceResult {
  int64_t index = 0;
  std::string text;
  std::string finish_reason;  // "stop" or "length"
  std::vector<TokenOut> tokens;
};
struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  nlohmann::json body() const;
};

nlohmann::json completion_body(const ApiRequest& r, const std::string& id, int64_t created,
                               const std::vector<ChoiceResult>& choices, const Usage& usage,
                               const Tokenizer* tokenizer);
// A stream chunk of one choice: new text, the log-probs of the tokens it covers, and
// finish_reason (empty: null). Chat's first chunk of a choice carries the role (`first`).
nlohmann::json chunk_body(const ApiRequest& r, const std::string& id, int64_t created,
                          int64_t index, const std::string& text,
                          const std::vector<TokenOut>& tokens, const std::string& finish_reason,
                          bool first, const Tokenizer* tokenizer);
// The last chunk with stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk_body(const ApiRequest& r, const std::string& id, int64_t created,
                                const Usage& usage);

nlohmann::json models_body(const std::string& model_id, int64_t created, int64_t context_length);

}  // namespace server
}  // namespace gengraph
