// The OpenAI request reader and answer builder of gengraph serve (server/openai_protocol.h), and
// the server's small parts (metrics, key comparison), without HTTP.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "framework/text/tokenizer.h"
#include "framework/util/error.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"

namespace gengraph::server {
namespace {

using json = nlohmann::json;

// Ids are letters: id i decodes to kPieces[i]; 0 is a special token (EOS), 7 half a character.
class LetterTokenizer : public Tokenizer {
 public:
  std::vector<int64_t> encode(std::string_view text, bool add_special) const override {
    std::vector<int64_t> ids;
    if (add_special) ids.push_back(9);
    for (char c : text) ids.push_back(c == ' ' ? 1 : 2 + (c % 4));
    return ids;
  }
  std::string decode(const std::vector<int64_t>& ids, bool skip_special) const override {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t id = ids[i];
      if (id == 0 && skip_special) continue;
      if (id == 7) {  // the first byte of "é": whole only when 8 follows
        out += (i + 1 < ids.size() && ids[i + 1] == 8) ? "\xC3\xA9" : "\xEF\xBF\xBD";
        if (i + 1 < ids.size() && ids[i + 1] == 8) ++i;
        continue;
      }
      out += kPieces.at(id);
    }
    return out;
  }
  int64_t vocab_size() const override { return 10; }
  bool is_special(int64_t id) const override { return id == 0 || id == 9; }
  int64_t token_id(const std::string&) const override { return -1; }
  std::string describe() const override { return "letters"; }

 private:
  const std::map<int64_t, std::string> kPieces = {{0, "<eos>"}, {1, " "}, {2, "a"},
                                                  {3, "b"},     {4, "c"}, {5, "d"},
                                                  {6, "\n"},    {8, "?"}, {9, "<s>"}};
};

ProtocolLimits limits() {
  ProtocolLimits l;
  l.model_id = "m";
  l.context_length = 32;
  l.vocab_size = 10;
  l.default_max_tokens = 8;
  return l;
}

ApiRequest completions(const json& body, const Tokenizer* tok = nullptr) {
  return read_request(body.dump(), Endpoint::kCompletions, limits(), tok, {});
}

// The refusal's status and param, or {0, ""} when it was accepted.
std::pair<int, std::string> refusal(const json& body, Endpoint e = Endpoint::kCompletions,
                                    const Tokenizer* tok = nullptr, RenderChat chat = {}) {
  try {
    read_request(body.dump(), e, limits(), tok, chat);
  } catch (const ApiError& err) {
    EXPECT_EQ(err.body()["error"]["message"], err.what());
    return {err.status, err.param};
  }
  return {0, ""};
}

TEST(OpenAIProtocol, MapsOpenAIFieldsOntoGengraphSettings) {
  const ApiRequest greedy =
      completions({{"model", "m"}, {"prompt", {3, 4, 5}}, {"max_tokens", 5}, {"temperature", 0}});
  EXPECT_EQ(greedy.prompts, (std::vector<std::vector<int64_t>>{{3, 4, 5}}));
  EXPECT_EQ(greedy.settings, json({{"max_new_tokens", 5}, {"do_sample", false}}));

  const ApiRequest sampled = completions({{"model", "m"},
                                          {"prompt", {{1, 2}, {3}}},
                                          {"temperature", 0.7},
                                          {"top_p", 0.9},
                                          {"n", 2},
                                          {"seed", 11},
                                          {"presence_penalty", 0.5},
                                          {"logit_bias", {{"3", -100}}},
                                          {"logprobs", 2},
                                          {"gengraph", {{"min_new_tokens", 2}, {"priority", 3}}}});
  EXPECT_EQ(sampled.prompts.size(), 2u);
  EXPECT_EQ(sampled.n, 2);
  EXPECT_EQ(*sampled.seed, 11u);
  EXPECT_EQ(sampled.priority, 3);
  EXPECT_EQ(sampled.settings["do_sample"], true);
  EXPECT_EQ(sampled.settings["temperature"], 0.7);
  EXPECT_EQ(sampled.settings["top_k"], 0);  // OpenAI has no top-k
  EXPECT_EQ(sampled.settings["top_p"], 0.9);
  EXPECT_EQ(sampled.settings["presence_penalty"], 0.5);
  EXPECT_EQ(sampled.settings["logit_bias"], json({{"3", -100.0}}));
  EXPECT_EQ(sampled.settings["output_scores"], true);
  EXPECT_EQ(sampled.settings["top_logprobs"], 2);
  EXPECT_EQ(sampled.settings["min_new_tokens"], 2);
  EXPECT_EQ(sampled.settings["max_new_tokens"], 8);  // the default, within the context
  EXPECT_FALSE(sampled.settings.contains("priority"));
}

TEST(OpenAIProtocol, RefusesEachBadFieldByName) {
  const json ok = {{"model", "m"}, {"prompt", {3, 4}}};
  const auto with = [&](const char* k, json v) {
    json b = ok;
    b[k] = std::move(v);
    return b;
  };
  EXPECT_EQ(refusal(ok), std::make_pair(0, std::string()));
  EXPECT_EQ(refusal(with("frobnicate", 1)), std::make_pair(400, std::string("frobnicate")));
  EXPECT_EQ(refusal(with("model", "other")).first, 404);
  EXPECT_EQ(refusal(with("max_tokens", "3")), std::make_pair(400, std::string("max_tokens")));
  EXPECT_EQ(refusal(with("max_tokens", 31)), std::make_pair(400, std::string("max_tokens")));
  EXPECT_EQ(refusal(with("temperature", 2.5)), std::make_pair(400, std::string("temperature")));
  EXPECT_EQ(refusal(with("n", 0)), std::make_pair(400, std::string("n")));
  EXPECT_EQ(refusal(with("prompt", {3, 10})), std::make_pair(400, std::string("prompt[1]")));
  EXPECT_EQ(refusal(with("prompt", json::array())).first, 400);
  EXPECT_EQ(refusal(with("prompt", "text")).second, "prompt");  // no tokenizer: ids only
  EXPECT_EQ(refusal(with("logit_bias", {{"x", 1}})).second, "logit_bias.x");
  EXPECT_EQ(refusal(with("logit_bias", {{"4", 101}})).second, "logit_bias.4");
  EXPECT_EQ(refusal(with("stream_options", {{"include_usage", true}})).second, "stream_options");
  EXPECT_EQ(refusal(with("gengraph", {{"max_new_tokens", 3}})).second, "gengraph.max_new_tokens");
  EXPECT_EQ(refusal(with("best_of", 3)).second, "best_of");
  EXPECT_EQ(refusal(with("suffix", "x")).second, "suffix");
  json echo = with("echo", true);
  echo["logprobs"] = 1;
  EXPECT_EQ(refusal(echo).second, "echo");
  // The prompt alone past the context, and the numbers named.
  json long_prompt = ok;
  long_prompt["prompt"] = std::vector<int64_t>(32, 3);
  try {
    completions(long_prompt);
    FAIL() << "a prompt of the whole context was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code, "context_length_exceeded");
    EXPECT_NE(std::string(e.what()).find("32 tokens"), std::string::npos) << e.what();
  }
  EXPECT_EQ(refusal(json::array()).first, 400);
  // Nesting past 64 levels stops the parser (json's recursive copies would overflow a stack).
  const std::string deep = "{\"model\": \"m\", \"gengraph\": {\"x\": " + std::string(100000, '[') +
                           std::string(100000, ']') + "}}";
  try {
    read_request(deep, Endpoint::kCompletions, limits(), nullptr, {});
    FAIL() << "a body nested 100,000 deep was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("64 levels"), std::string::npos) << e.what();
  }
  try {
    read_request("{not json", Endpoint::kCompletions, limits(), nullptr, {});
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.body()["error"]["type"], "invalid_request_error");
    EXPECT_TRUE(e.body()["error"]["param"].is_null());
  }
}

TEST(OpenAIProtocol, ChatMessagesAreCheckedThenRendered) {
  const LetterTokenizer tok;
  json seen;
  const RenderChat chat = [&](const json& m) {
    seen = m;
    return std::string("ab");
  };
  const ApiRequest r =
      read_request(json({{"model", "m"},
                         {"messages",
                          {{{"role", "developer"}, {"content", "c"}},
                           {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "d"}}}}}}},
                         {"logprobs", true},
                         {"top_logprobs", 3}})
                       .dump(),
                   Endpoint::kChat, limits(), &tok, chat);
  EXPECT_EQ(seen,
            json({{{"role", "system"}, {"content", "c"}}, {{"role", "user"}, {"content", "d"}}}));
  EXPECT_EQ(r.prompts[0], (std::vector<int64_t>{3, 4}));  // no special tokens added
  EXPECT_EQ(r.settings["top_logprobs"], 3);
  const json bad_role = {{"model", "m"}, {"messages", {{{"role", "tool"}, {"content", "x"}}}}};
  EXPECT_EQ(refusal(bad_role, Endpoint::kChat, &tok, chat).second, "messages[0].role");
  const json no_content = {{"model", "m"}, {"messages", {{{"role", "user"}}}}};
  EXPECT_EQ(refusal(no_content, Endpoint::kChat, &tok, chat).second, "messages[0].content");
  const json ok = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}};
  EXPECT_EQ(refusal(ok, Endpoint::kChat, &tok, {}).second, "messages");  // no template
  const RenderChat refusing = [](const json&) -> std::string { throw Error("no template"); };
  EXPECT_EQ(refusal(ok, Endpoint::kChat, &tok, refusing).first, 400);
  json top_alone = ok;
  top_alone["top_logprobs"] = 2;
  EXPECT_EQ(refusal(top_alone, Endpoint::kChat, &tok, chat).second, "top_logprobs");
}

TEST(OpenAIProtocol, ChoiceTextEndsBeforeAStopStringAndHoldsWhatMayBeginOne) {
  const LetterTokenizer tok;
  ChoiceText t(&tok, true, {"cd", "\n\n"});
  EXPECT_TRUE(t.push({2, -1, {}}));  // "a"
  EXPECT_EQ(t.take_new_text(), "a");
  EXPECT_TRUE(t.push({4, -1, {}}));  // "ac": "c" may begin "cd"
  EXPECT_EQ(t.take_new_text(), "");
  EXPECT_TRUE(t.push({2, -1, {}}));  // "aca": it did not
  EXPECT_EQ(t.take_new_text(), "ca");
  EXPECT_TRUE(t.push({4, -1, {}}));
  EXPECT_FALSE(t.push({5, -1, {}}));  // "acacd": stop
  EXPECT_TRUE(t.stopped_by_string());
  EXPECT_EQ(t.text(), "aca");
  EXPECT_EQ(t.take_new_text(), "");
  EXPECT_EQ(t.tokens().size(), 5u);  // every generated token counts in usage

  // Special tokens skipped; a character split over two tokens is shown once whole.
  ChoiceText u(&tok, true, {});
  u.push({7, -1, {}});
  EXPECT_EQ(u.take_new_text(), "");
  u.push({8, -1, {}});
  EXPECT_EQ(u.take_new_text(), "\xC3\xA9");
  u.push({0, -1, {}});
  u.finish();
  EXPECT_EQ(u.text(), "\xC3\xA9");
  ChoiceText kept(&tok, false, {});
  kept.push({3, -1, {}});
  kept.push({0, -1, {}});
  kept.finish();
  EXPECT_EQ(kept.text(), "b<eos>");
}

TEST(OpenAIProtocol, AnswersCarryExactUsageAndOpenAIShapes) {
  const LetterTokenizer tok;
  ApiRequest r = completions({{"model", "m"}, {"prompt", {3, 4, 5}}, {"logprobs", 1}}, &tok);
  const std::vector<TokenOut> toks = {{2, -0.5, {{2, -0.5}}}, {0, -0.25, {{0, -0.25}}}};
  const json body = completion_body(r, "cmpl-1", 7, {{0, "a", "stop", toks}}, {3, 2}, &tok);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["usage"],
            json({{"prompt_tokens", 3}, {"completion_tokens", 2}, {"total_tokens", 5}}));
  EXPECT_EQ(body["choices"][0]["text"], "a");
  EXPECT_EQ(body["choices"][0]["logprobs"]["tokens"], json({"a", "<eos>"}));
  EXPECT_EQ(body["choices"][0]["logprobs"]["token_logprobs"], json({-0.5, -0.25}));
  EXPECT_EQ(body["choices"][0]["logprobs"]["text_offset"], json({0, 1}));
  EXPECT_EQ(body["choices"][0]["logprobs"]["top_logprobs"][0], json({{"a", -0.5}}));

  r.endpoint = Endpoint::kChat;
  r.chat_logprobs = true;
  r.logprobs = -1;
  r.top_logprobs = 1;
  const json chunk = chunk_body(r, "chatcmpl-1", 7, 0, "a", {toks[0]}, "", true, &tok);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"], json({{"role", "assistant"}, {"content", "a"}}));
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["content"][0]["bytes"], json({97}));
  const json usage = usage_chunk_body(r, "chatcmpl-1", 7, {3, 2});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 5);
  // No tokenizer: the ids travel beside the (empty) text.
  const json ids = completion_body(completions({{"model", "m"}, {"prompt", {3}}}), "c", 7,
                                   {{0, "", "length", toks}}, {1, 2}, nullptr);
  EXPECT_EQ(ids["choices"][0]["token_ids"], json({2, 0}));
}

TEST(ServerParts, KeysCompareWholeAndMetricsAreCumulative) {
  EXPECT_TRUE(keys_equal("Bearer k", "Bearer k"));
  EXPECT_FALSE(keys_equal("Bearer k", "Bearer K"));
  EXPECT_FALSE(keys_equal("Bearer k", "Bearer kk"));
  EXPECT_FALSE(keys_equal("", "Bearer k"));
  Histogram h({0.1, 1});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(5);
  const std::string text = h.text("x");
  EXPECT_NE(text.find("x_bucket{le=\"0.1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_bucket{le=\"1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_count 3\n"), std::string::npos) << text;
  Metrics m;
  m.request("/v1/completions", 200);
  m.request("/v1/completions", 200);
  m.generation(5, 3, 0.2, 0.6);
  const std::string all = m.text({{"running", 1}, {"blocks", {{"in_use", 4}, {"total", 9}}}}, 2);
  EXPECT_NE(all.find("gengraph_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2"),
            std::string::npos);
  EXPECT_NE(all.find("gengraph_kv_blocks_in_use 4\n"), std::string::npos);
  EXPECT_NE(all.find("gengraph_generation_tokens_total 3\n"), std::string::npos);
  EXPECT_NE(all.find("gengraph_time_per_output_token_seconds_sum 0.2\n"), std::string::npos) << all;
}

}  // namespace
}  // namespace gengraph::server
