#include "server/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "framework/text/tokenizer.h"
#include "framework/util/error.h"

namespace gengraph::server {
namespace {

using json = nlohmann::json;

constexpr int kMaxNesting = 64;

// A JSON value described for an error, never copied whole.
std::string found(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number()) return v.dump();
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return s.size() > 40 ? "a string of " + std::to_string(s.size()) + " bytes"
                         : "the string " + json(s).dump();
  }
  if (v.is_array()) return "an array of " + std::to_string(v.size()) + " entries";
  return "an object of " + std::to_string(v.size()) + " keys";
}

[[noreturn]] void bad(const std::string& param, const std::string& expected, const json& v) {
  throw ApiError(400, "'" + param + "': expected " + expected + ", found " + found(v), param);
}

int64_t integer_in(const json& v, const std::string& param, int64_t lo, int64_t hi) {
  if (!v.is_number_integer() &&
      !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
        std::abs(v.get<double>()) < 1e15)) {
    bad(param, "an integer from " + std::to_string(lo) + " to " + std::to_string(hi), v);
  }
  const double d = v.get<double>();
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
    bad(param, "an integer from " + std::to_string(lo) + " to " + std::to_string(hi), v);
  return static_cast<int64_t>(d);
}

double number_in(const json& v, const std::string& param, double lo, double hi) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo ||
      v.get<double>() > hi) {
    bad(param, "a number from " + json(lo).dump() + " to " + json(hi).dump(), v);
  }
  return v.get<double>();
}

bool boolean(const json& v, const std::string& param) {
  if (!v.is_boolean()) bad(param, "true or false", v);
  return v.get<bool>();
}

// A prompt of token ids: every id an integer in the vocabulary.
std::vector<int64_t> id_prompt(const json& v, const std::string& param, int64_t vocab) {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < v.size(); ++i) {
    ids.push_back(integer_in(v[i], param + "[" + std::to_string(i) + "]", 0, vocab - 1));
  }
  if (ids.empty()) throw ApiError(400, "'" + param + "': expected a non-empty prompt", param);
  return ids;
}

std::vector<int64_t> encode_text(const std::string& text, const std::string& param,
                                 const Tokenizer* tokenizer, bool add_special) {
  if (tokenizer == nullptr) {
    throw ApiError(
        400, "'" + param + "': the served model has no tokenizer; send the prompt as token ids",
        param);
  }
  std::vector<int64_t> ids = tokenizer->encode(text, add_special);
  if (ids.empty()) throw ApiError(400, "'" + param + "': the text encodes to no tokens", param);
  return ids;
}

// OpenAI's fields this server reads, per endpoint; anything else is refused by name. `user` and
// `service_tier`-like metadata are accepted and ignored.
const std::set<std::string> kCommon = {
    "model", "max_tokens", "temperature",      "top_p",
    "n",     "stream",     "stream_options",   "stop",
    "seed",  "logprobs",   "presence_penalty", "frequency_penalty",
    "user",  "logit_bias", "gengraph"};
const std::set<std::string> kCompletionOnly = {"prompt", "echo", "best_of", "suffix"};
const std::set<std::string> kChatOnly = {"messages", "top_logprobs", "max_completion_tokens",
                                         "response_format"};
// gengraph's keys under the extension besides generation settings.
const std::set<std::string> kServerKeys = {"skip_special_tokens", "priority"};
// Generation keys the OpenAI fields set: under `gengraph` they would say it twice.
const std::set<std::string> kMapped = {
    "max_new_tokens",    "do_sample",  "temperature",   "top_p",        "presence_penalty",
    "frequency_penalty", "logit_bias", "output_scores", "top_logprobs", "num_return_sequences"};

json read_messages(const json& v) {
  if (!v.is_array() || v.empty()) bad("messages", "a non-empty array of messages", v);
  json out = json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    const json& m = v[i];
    if (!m.is_object()) bad(at, "an object with role and content", m);
    for (const auto& [k, _] : m.items()) {
      if (k != "role" && k != "content" && k != "name") {
        throw ApiError(400,
                       "'" + at + "." + k + "': unknown field; a message has role, content, name",
                       at + "." + k);
      }
    }
    if (!m.contains("role")) bad(at + ".role", "system, user or assistant", json());
    const json& role = m["role"];
    if (!role.is_string() ||
        (role != "system" && role != "user" && role != "assistant" && role != "developer")) {
      bad(at + ".role", "system, developer, user or assistant", role);
    }
    if (!m.contains("content")) bad(at + ".content", "a string", json());
    std::string content;
    const json& c = m["content"];
    if (c.is_string()) {
      content = c.get<std::string>();
    } else if (c.is_array()) {  // OpenAI's content parts: text parts only
      for (size_t j = 0; j < c.size(); ++j) {
        const std::string pat = at + ".content[" + std::to_string(j) + "]";
        if (!c[j].is_object() || c[j].value("type", "") != "text" || !c[j].contains("text") ||
            !c[j]["text"].is_string()) {
          bad(pat, "a text part {\"type\": \"text\", \"text\": ...}", c[j]);
        }
        content += c[j]["text"].get<std::string>();
      }
    } else {
      bad(at + ".content", "a string or an array of text parts", c);
    }
    // The template knows system, user and assistant; OpenAI's developer role is the system one.
    out.push_back(
        {{"role", role == "developer" ? "system" : role.get<std::string>()}, {"content", content}});
  }
  return out;
}

}  // namespace

ApiError::ApiError(int s, std::string message, std::string p, std::string t, std::string c)
    : std::runtime_error(std::move(message)),
      status(s),
      param(std::move(p)),
      type(std::move(t)),
      code(std::move(c)) {}

json ApiError::body() const {
  return {{"error",
           {{"message", what()},
            {"type", type},
            {"param", param.empty() ? json() : json(param)},
            {"code", code.empty() ? json() : json(code)}}}};
}

ApiRequest read_request(const std::string& body, Endpoint endpoint, const ProtocolLimits& limits,
                        const Tokenizer* tokenizer, const RenderChat& chat) {
  json doc;
  try {
    // Nesting is bounded while parsing: a value nested a million deep would otherwise overflow
    // the stack of whatever copies or destroys it (json's own recursion), within the body limit.
    doc = json::parse(body, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxNesting) {
        throw ApiError(
            400, "the request body nests deeper than " + std::to_string(kMaxNesting) + " levels");
      }
      return true;
    });
  } catch (const json::parse_error& e) {
    throw ApiError(400, std::string("the request body is not JSON: ") + e.what());
  }
  if (!doc.is_object())
    throw ApiError(400, "the request body: expected a JSON object, found " + found(doc));
  const bool is_chat = endpoint == Endpoint::kChat;
  for (const auto& [k, _] : doc.items()) {
    if (kCommon.count(k) || (is_chat ? kChatOnly : kCompletionOnly).count(k)) continue;
    throw ApiError(400,
                   "unknown field '" + k + "' for " +
                       (is_chat ? "/v1/chat/completions" : "/v1/completions") +
                       " (gengraph's own settings go under the extension key 'gengraph')",
                   k);
  }
  ApiRequest r;
  r.endpoint = endpoint;
  if (!doc.contains("model") || !doc["model"].is_string())
    bad("model", "the model's name", doc.value("model", json()));
  r.model = doc["model"].get<std::string>();
  if (r.model != limits.model_id) {
    throw ApiError(404,
                   "the model '" + r.model + "' is not served here; this server serves '" +
                       limits.model_id + "'",
                   "model", "invalid_request_error", "model_not_found");
  }
  json& s = r.settings;
  // Prompts.
  if (is_chat) {
    if (!doc.contains("messages")) bad("messages", "a non-empty array of messages", json());
    const json messages = read_messages(doc["messages"]);
    if (tokenizer == nullptr || !chat) {
      throw ApiError(400, "'messages': the served model has no tokenizer or chat template",
                     "messages");
    }
    std::string text;
    try {
      text = chat(messages);
    } catch (const Error& e) {
      throw ApiError(400, std::string("'messages': the chat template refused them: ") + e.what(),
                     "messages");
    }
    // The template writes the special tokens itself (apply_chat_template(tokenize=True) adds none).
    r.prompts.push_back(encode_text(text, "messages", tokenizer, false));
    r.prompt_texts.push_back(text);
  } else {
    if (!doc.contains("prompt"))
      bad("prompt", "a string, an array of strings or token ids", json());
    const json& p = doc["prompt"];
    if (p.is_string()) {
      r.prompts.push_back(encode_text(p.get<std::string>(), "prompt", tokenizer, true));
      r.prompt_texts.push_back(p.get<std::string>());
    } else if (p.is_array() && !p.empty() && p[0].is_number()) {
      r.prompts.push_back(id_prompt(p, "prompt", limits.vocab_size));
      r.prompt_texts.emplace_back();
    } else if (p.is_array() && !p.empty()) {
      if (static_cast<int64_t>(p.size()) > limits.max_prompts) {
        bad("prompt", "at most " + std::to_string(limits.max_prompts) + " prompts", p);
      }
      for (size_t i = 0; i < p.size(); ++i) {
        const std::string at = "prompt[" + std::to_string(i) + "]";
        if (p[i].is_string()) {
          r.prompts.push_back(encode_text(p[i].get<std::string>(), at, tokenizer, true));
          r.prompt_texts.push_back(p[i].get<std::string>());
        } else if (p[i].is_array()) {
          r.prompts.push_back(id_prompt(p[i], at, limits.vocab_size));
          r.prompt_texts.emplace_back();
        } else {
          bad(at, "a string or an array of token ids", p[i]);
        }
      }
    } else {
      bad("prompt", "a string, an array of strings or token ids", p);
    }
  }
  // Lengths against the context.
  const char* max_key =
      is_chat && doc.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  size_t longest = 0;
  for (const auto& p : r.prompts) longest = std::max(longest, p.size());
  const auto prompt_len = static_cast<int64_t>(longest);
  if (prompt_len >= limits.context_length) {
    throw ApiError(400,
                   "the prompt has " + std::to_string(prompt_len) +
                       " tokens; the model's context is " + std::to_string(limits.context_length) +
                       " tokens, so at most " + std::to_string(limits.context_length - 1) +
                       " prompt tokens leave room for one new token",
                   is_chat ? "messages" : "prompt", "invalid_request_error",
                   "context_length_exceeded");
  }
  if (doc.contains(max_key) && !doc[max_key].is_null()) {
    r.max_tokens = integer_in(doc[max_key], max_key, 1, 1'000'000'000);
    if (prompt_len + r.max_tokens > limits.context_length) {
      throw ApiError(400,
                     "'" + std::string(max_key) + "' " + std::to_string(r.max_tokens) +
                         " plus the prompt's " + std::to_string(prompt_len) + " tokens is " +
                         std::to_string(prompt_len + r.max_tokens) +
                         " tokens, past the model's context of " +
                         std::to_string(limits.context_length),
                     max_key, "invalid_request_error", "context_length_exceeded");
    }
  } else {
    r.max_tokens = std::min(limits.default_max_tokens, limits.context_length - prompt_len);
  }
  s["max_new_tokens"] = r.max_tokens;
  // Sampling: OpenAI's temperature defaults to 1 and 0 means greedy; there is no top_k.
  const double temperature = doc.contains("temperature") && !doc["temperature"].is_null()
                                 ? number_in(doc["temperature"], "temperature", 0, 2)
                                 : 1.0;
  if (temperature == 0) {
    s["do_sample"] = false;
  } else {
    s["do_sample"] = true;
    s["temperature"] = temperature;
    s["top_k"] = 0;
    if (doc.contains("top_p") && !doc["top_p"].is_null()) {
      const double top_p = number_in(doc["top_p"], "top_p", 0, 1);
      if (top_p <= 0) bad("top_p", "a number above 0 and at most 1", doc["top_p"]);
      s["top_p"] = top_p;
    }
  }
  for (const char* k : {"presence_penalty", "frequency_penalty"}) {
    if (doc.contains(k) && !doc[k].is_null()) {
      const double v = number_in(doc[k], k, -2, 2);
      if (v != 0) s[k] = v;
    }
  }
  if (doc.contains("logit_bias") && !doc["logit_bias"].is_null()) {
    const json& b = doc["logit_bias"];
    if (!b.is_object()) bad("logit_bias", "an object of token id: bias", b);
    json bias = json::object();
    for (const auto& [k, v] : b.items()) {
      const std::string at = "logit_bias." + k;
      if (k.empty() || k.size() > 12 || k.find_first_not_of("0123456789") != std::string::npos ||
          std::stoll(k) >= limits.vocab_size) {
        throw ApiError(
            400, "'" + at + "': expected a token id below " + std::to_string(limits.vocab_size),
            at);
      }
      bias[k] = number_in(v, at, -100, 100);
    }
    if (!bias.empty()) s["logit_bias"] = bias;
  }
  if (doc.contains("n") && !doc["n"].is_null()) r.n = integer_in(doc["n"], "n", 1, limits.max_n);
  if (doc.contains("best_of") && !doc["best_of"].is_null() &&
      integer_in(doc["best_of"], "best_of", 1, limits.max_n) != r.n) {
    throw ApiError(400, "'best_of': only best_of equal to n is served (no server-side ranking)",
                   "best_of");
  }
  if (doc.contains("suffix") && !doc["suffix"].is_null()) {
    throw ApiError(400, "'suffix': insertion (a suffix after the completion) is not served",
                   "suffix");
  }
  if (doc.contains("seed") && !doc["seed"].is_null()) {
    r.seed = static_cast<uint64_t>(integer_in(doc["seed"], "seed", 0, (int64_t{1} << 53) - 1));
  }
  if (doc.contains("stop") && !doc["stop"].is_null()) {
    const json& st = doc["stop"];
    if (st.is_string()) {
      r.stop.push_back(st.get<std::string>());
    } else if (st.is_array() && st.size() <= 16) {
      for (size_t i = 0; i < st.size(); ++i) {
        if (!st[i].is_string()) bad("stop[" + std::to_string(i) + "]", "a string", st[i]);
        r.stop.push_back(st[i].get<std::string>());
      }
    } else {
      bad("stop", "a string or an array of at most 16 strings", st);
    }
    for (size_t i = 0; i < r.stop.size(); ++i) {
      if (r.stop[i].empty()) bad("stop", "non-empty strings", st);
    }
    if (!r.stop.empty() && tokenizer == nullptr) {
      throw ApiError(400, "'stop': the served model has no tokenizer to match text with", "stop");
    }
  }
  if (doc.contains("stream") && !doc["stream"].is_null())
    r.stream = boolean(doc["stream"], "stream");
  if (doc.contains("stream_options") && !doc["stream_options"].is_null()) {
    const json& so = doc["stream_options"];
    if (!so.is_object()) bad("stream_options", "an object", so);
    if (!r.stream) bad("stream_options", "nothing unless stream is true", so);
    for (const auto& [k, v] : so.items()) {
      if (k != "include_usage") {
        throw ApiError(400, "'stream_options." + k + "': unknown field; expected include_usage",
                       "stream_options." + k);
      }
      r.include_usage = boolean(v, "stream_options.include_usage");
    }
  }
  if (doc.contains("logprobs") && !doc["logprobs"].is_null()) {
    if (is_chat) {
      r.chat_logprobs = boolean(doc["logprobs"], "logprobs");
    } else {
      r.logprobs = integer_in(doc["logprobs"], "logprobs", 0, limits.max_top_logprobs);
    }
  }
  if (is_chat && doc.contains("top_logprobs") && !doc["top_logprobs"].is_null()) {
    r.top_logprobs = integer_in(doc["top_logprobs"], "top_logprobs", 0, limits.max_top_logprobs);
    if (!r.chat_logprobs) bad("top_logprobs", "logprobs true beside it", doc["top_logprobs"]);
  }
  if (!is_chat && doc.contains("echo") && !doc["echo"].is_null()) {
    r.echo = boolean(doc["echo"], "echo");
    if (r.echo && r.logprobs >= 0) {
      throw ApiError(400, "'echo' with 'logprobs': the prompt's log-probabilities are not served",
                     "echo");
    }
  }
  if (is_chat && doc.contains("response_format") && !doc["response_format"].is_null()) {
    const json& f = doc["response_format"];
    if (!f.is_object() || f.value("type", "") != "text" || f.size() != 1) {
      bad("response_format", "{\"type\": \"text\"} (structured output is not served)", f);
    }
  }
  if (doc.contains("user") && !doc["user"].is_null() && !doc["user"].is_string())
    bad("user", "a string", doc["user"]);
  if (r.wants_logprobs()) {
    s["output_scores"] = true;
    if (r.alternatives() > 0) s["top_logprobs"] = r.alternatives();
  }
  // The extension: gengraph's generation keys (checked by the scheduler's planning, which names
  // them) and the server's own few.
  if (doc.contains("gengraph") && !doc["gengraph"].is_null()) {
    const json& g = doc["gengraph"];
    if (!g.is_object()) bad("gengraph", "an object of gengraph settings", g);
    for (const auto& [k, v] : g.items()) {
      const std::string at = "gengraph." + k;
      if (k == "skip_special_tokens") {
        r.skip_special_tokens = boolean(v, at);
      } else if (k == "priority") {
        r.priority = integer_in(v, at, -1'000'000, 1'000'000);
      } else if (kMapped.count(k)) {
        throw ApiError(400, "'" + at + "': set by OpenAI's own field; give it there", at);
      } else {
        s[k] = v;
      }
    }
  }
  return r;
}

// --- text of a choice ---------------------------------------------------------------------------

ChoiceText::ChoiceText(const Tokenizer* tokenizer, bool skip_special, std::vector<std::string> stop)
    : stream_(tokenizer != nullptr ? std::make_unique<TextStream>(*tokenizer, skip_special)
                                   : nullptr),
      stop_(std::move(stop)) {
  for (const auto& s : stop_) longest_stop_ = std::max(longest_stop_, s.size());
}

ChoiceText::~ChoiceText() = default;

std::string token_text(const Tokenizer* tokenizer, int64_t id) {
  return tokenizer != nullptr ? tokenizer->decode({id}, false) : std::string();
}

bool ChoiceText::push(const TokenOut& token) {
  if (stopped_ || finished_) return false;
  tokens_.push_back(token);
  if (stream_) append(stream_->push(token.id));
  return !stopped_;
}

void ChoiceText::finish() {
  if (finished_) return;
  finished_ = true;
  // What the stream still held (a character never completed) is final now; so is the end.
  if (stream_ && !stopped_) append(stream_->finish());
  held_ = 0;
}

void ChoiceText::append(const std::string& piece) {
  // The detokenised text grows by whole characters (TextStream); a stop string is looked for only
  // where it could end in the new piece, and the end that may begin one is held back.
  if (stopped_ || piece.empty()) return;
  const size_t from = text_.size() > longest_stop_ ? text_.size() - longest_stop_ + 1 : 0;
  text_ += piece;
  size_t cut = std::string::npos;
  for (const auto& s : stop_) cut = std::min(cut, text_.find(s, from));
  if (cut != std::string::npos) {
    text_.resize(cut);
    stopped_ = true;
    held_ = 0;
    return;
  }
  held_ = 0;
  if (finished_) return;
  for (const auto& s : stop_) {
    for (size_t k = std::min(s.size() - 1, text_.size()); k > held_; --k) {
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        held_ = k;
        break;
      }
    }
  }
}

std::string ChoiceText::take_new_text() {
  const size_t end = text_.size() - held_;
  if (end <= shown_) return {};
  std::string out = text_.substr(shown_, end - shown_);
  shown_ = end;
  return out;
}

// --- answers ------------------------------------------------------------------------------------

json Usage::body() const {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {

// A log-probability JSON can hold: a token the processors removed has -inf, written as -9999 (as
// vLLM writes it; JSON has no infinity and OpenAI's clients expect a number).
double finite(double logprob) { return std::isfinite(logprob) ? logprob : -9999.0; }

json utf8_bytes(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

// OpenAI's legacy completions log-probs ({tokens, token_logprobs, top_logprobs, text_offset}), or
// chat's ({content: [{token, logprob, bytes, top_logprobs}]}).
json logprobs_body(const ApiRequest& r, const std::vector<TokenOut>& tokens, size_t offset,
                   const Tokenizer* tokenizer) {
  if (r.endpoint == Endpoint::kChat) {
    json content = json::array();
    for (const auto& t : tokens) {
      const std::string text = token_text(tokenizer, t.id);
      json top = json::array();
      for (const auto& [id, lp] : t.top) {
        const std::string tt = token_text(tokenizer, id);
        top.push_back({{"token", tt}, {"logprob", finite(lp)}, {"bytes", utf8_bytes(tt)}});
      }
      content.push_back({{"token", text},
                         {"logprob", finite(t.logprob)},
                         {"bytes", utf8_bytes(text)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const auto& t : tokens) {
    const std::string text = token_text(tokenizer, t.id);
    toks.push_back(text);
    lps.push_back(finite(t.logprob));
    offsets.push_back(offset);
    offset += text.size();
    json top = json::object();
    for (const auto& [id, lp] : t.top) top[token_text(tokenizer, id)] = finite(lp);
    tops.push_back(r.logprobs > 0 ? top : json());
  }
  return {
      {"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json token_ids(const std::vector<TokenOut>& tokens) {
  json out = json::array();
  for (const auto& t : tokens) out.push_back(t.id);
  return out;
}

}  // namespace

json completion_body(const ApiRequest& r, const std::string& id, int64_t created,
                     const std::vector<ChoiceResult>& choices, const Usage& usage,
                     const Tokenizer* tokenizer) {
  const bool chat = r.endpoint == Endpoint::kChat;
  json out = {{"id", id},
              {"object", chat ? "chat.completion" : "text_completion"},
              {"created", created},
              {"model", r.model},
              {"system_fingerprint", "gengraph"}};
  json list = json::array();
  for (const auto& c : choices) {
    const std::string prefix = r.echo ? r.prompt_texts[static_cast<size_t>(c.index / r.n)] : "";
    json choice = {{"index", c.index}, {"finish_reason", c.finish_reason}};
    json lp = r.wants_logprobs() ? logprobs_body(r, c.tokens, prefix.size(), tokenizer) : json();
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = prefix + c.text;
    }
    choice["logprobs"] = lp;
    if (tokenizer == nullptr) choice["token_ids"] = token_ids(c.tokens);
    list.push_back(choice);
  }
  out["choices"] = list;
  out["usage"] = usage.body();
  return out;
}

json chunk_body(const ApiRequest& r, const std::string& id, int64_t created, int64_t index,
                const std::string& text, const std::vector<TokenOut>& tokens,
                const std::string& finish_reason, bool first, const Tokenizer* tokenizer) {
  const bool chat = r.endpoint == Endpoint::kChat;
  json choice = {{"index", index}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] =
      r.wants_logprobs() && !tokens.empty() ? logprobs_body(r, tokens, 0, tokenizer) : json();
  if (tokenizer == nullptr) choice["token_ids"] = token_ids(tokens);
  choice["finish_reason"] = finish_reason.empty() ? json() : json(finish_reason);
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", r.model},
          {"system_fingerprint", "gengraph"},
          {"choices", json::array({choice})}};
}

json usage_chunk_body(const ApiRequest& r, const std::string& id, int64_t created,
                      const Usage& usage) {
  const bool chat = r.endpoint == Endpoint::kChat;
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", r.model},
          {"system_fingerprint", "gengraph"},
          {"choices", json::array()},
          {"usage", usage.body()}};
}

json models_body(const std::string& model_id, int64_t created, int64_t context_length) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model_id},
                                 {"object", "model"},
                                 {"created", created},
                                 {"owned_by", "gengraph"},
                                 {"max_model_len", context_length}}})}};
}

}  // namespace gengraph::server
