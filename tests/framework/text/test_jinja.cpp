// The native chat template renderer (framework/text/jinja.h, chat_native.h): what transformers'
// own Jinja environment renders for gengraph's template set (tests/fixtures/chat/cases.json,
// tools/make_chat_fixtures.py), the same refusals, constructs outside the rendered part named,
// limits that stop a template that does not end, and a model folder's template with its
// tokenizer's special tokens.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "framework/text/chat_native.h"
#include "framework/text/jinja.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using ::testing::HasSubstr;

nlohmann::ordered_json fixture() {
  std::ifstream in(std::string(testing::fixtures_dir()) + "/chat/cases.json");
  std::stringstream s;
  s << in.rdbuf();
  return nlohmann::ordered_json::parse(s.str());
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Jinja, RendersWhatTransformersRendersOnTheFixtureTemplates) {
  const auto doc = fixture();
  int rendered = 0, refused = 0;
  for (const auto& c : doc["cases"]) {
    const std::string name = c["name"].get<std::string>();
    std::string got, error;
    try {
      jinja::Template t(c["template"].get<std::string>(), name);
      got = t.render(c["context"]);
    } catch (const jinja::Unsupported& e) {
      ADD_FAILURE() << name << ": " << e.what();
      continue;
    } catch (const Error& e) {
      error = e.what();
    }
    if (c.contains("error")) {
      EXPECT_FALSE(error.empty()) << name << ": transformers refused it ("
                                  << c["error"].get<std::string>() << "), gengraph rendered "
                                  << got;
      ++refused;
    } else {
      EXPECT_EQ(error, "") << name;
      EXPECT_EQ(got, c["text"].get<std::string>()) << name;
      ++rendered;
    }
  }
  EXPECT_GT(rendered, 400);
  EXPECT_GT(refused, 5);
}

TEST(Jinja, ConstructsOutsideTheRenderedPartAreNamedWithTheirLine) {
  const auto unsupported = [](const std::string& text) {
    try {
      jinja::Template t(text, "'t.jinja'");
    } catch (const jinja::Unsupported& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(unsupported("a\n{{ x | wordwrap }}"),
            "'t.jinja': filter 'wordwrap' (line 2) is not rendered natively");
  EXPECT_THAT(unsupported("{% macro m() %}{% endmacro %}"), HasSubstr("statement 'macro'"));
  EXPECT_THAT(unsupported("{{ cycler(1) }}"), HasSubstr("function 'cycler'"));
  EXPECT_THAT(unsupported("{{ x.zfill(3) }}"), HasSubstr("method 'zfill'"));
  EXPECT_THAT(unsupported("{{ x is escaped }}"), HasSubstr("test 'escaped'"));
  EXPECT_THAT(unsupported("{% set a, b = 1, 2 %}"), HasSubstr("several targets"));
  // A syntax error is an Error with the line, not Unsupported.
  EXPECT_THAT(error_of([] { jinja::Template("x\n\n{% if %}", "'t'"); }), HasSubstr("line 3"));
  EXPECT_THAT(error_of([] { jinja::Template("{% if x %}", "'t'"); }),
              HasSubstr("ends inside a block"));
  EXPECT_THAT(error_of([] { jinja::Template("{{ 'x }}", "'t'"); }), HasSubstr("never closed"));
}

TEST(Jinja, ATemplateThatDoesNotEndIsStoppedByItsLimits) {
  const jinja::Template spin(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "'spin'");
  jinja::Limits steps;
  steps.max_steps = 1000000;
  EXPECT_THAT(error_of([&] { spin.render(nlohmann::json::object(), steps); }),
              HasSubstr("passed 1000000 steps"));
  jinja::Limits seconds;
  seconds.seconds = 1;
  seconds.max_steps = int64_t{1} << 60;
  EXPECT_THAT(error_of([&] { spin.render(nlohmann::json::object(), seconds); }),
              HasSubstr("ran past 1 s"));
  jinja::Limits chars;
  chars.max_output = 1000;
  const jinja::Template grow("{% for i in range(10000) %}abc{% endfor %}", "'grow'");
  EXPECT_THAT(error_of([&] { grow.render(nlohmann::json::object(), chars); }),
              HasSubstr("rendered more than 1000 characters (the template's output)"));
  EXPECT_THAT(error_of([&] { grow.render(nlohmann::json::array()); }), HasSubstr("not an object"));
}

TEST(NativeChat, RendersAFoldersTemplateWithItsTokenizersSpecialTokens) {
  testing::TempDir dir;
  const auto folder = dir / "model";
  std::filesystem::create_directories(folder);
  testing::write_file(folder / "tokenizer_config.json",
                      R"({"bos_token": {"content": "<B>", "special": true}, "eos_token": "<E>",
                          "pad_token": null})");
  testing::write_file(folder / "chat_template.jinja",
                      "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ "
                      "eos_token }}{% endfor %}{{ pad_token is defined }}{{ tools is none }}{% if "
                      "add_generation_prompt %}[assistant]{% endif %}\n");
  const auto chat = NativeChat::for_model(folder);
  ASSERT_TRUE(chat);
  const nlohmann::json messages = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(chat->render(messages, true, "conversation 0"), "<B>[user]hi<E>FalseTrue[assistant]");
  EXPECT_EQ(chat->render(messages, false, "conversation 0"), "<B>[user]hi<E>FalseTrue");
  // The Python renderer's limits: characters per character of the contents.
  testing::write_file(folder / "chat_template.jinja",
                      "{% for i in range(1000) %}{{ messages[0].content }}{% endfor %}");
  EXPECT_THAT(error_of([&] {
                NativeChat::for_model(folder)->render(messages, true, "conversation 7", 30, 100, 4);
              }),
              "the chat template of '" + folder.string() + "' ('" +
                  (folder / "chat_template.jinja").string() +
                  "') rendered more than 108 characters (the template's output) on conversation 7");
  // jinja2's sandbox refuses ranges past 100,000 items; the native renderer too, in its words.
  testing::write_file(folder / "chat_template.jinja", "{% for i in range(100001) %}{% endfor %}");
  EXPECT_THAT(error_of([&] { NativeChat::for_model(folder)->render(messages, true, "text 0"); }),
              HasSubstr("') failed on text 0: "));
  EXPECT_FALSE(NativeChat::for_model(dir / "none"));
}

// A GGUF file with only metadata: its architecture, a vocabulary and a BOS id.
std::string gguf_with_vocabulary(const std::string& arch, const std::vector<std::string>& tokens) {
  std::string b;
  const auto u32 = [&](uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
  const auto u64 = [&](uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); };
  const auto str = [&](const std::string& s) {
    u64(s.size());
    b += s;
  };
  u32(0x46554747);  // "GGUF"
  u32(3);
  u64(0);  // tensors
  u64(3);  // keys
  str("general.architecture");
  u32(8);
  str(arch);
  str("tokenizer.ggml.tokens");
  u32(9);  // an array of strings
  u32(8);
  u64(tokens.size());
  for (const auto& t : tokens) str(t);
  str("tokenizer.ggml.bos_token_id");
  u32(4);
  u32(1);
  return b;
}

// A Gemma file without tokenizer.chat_template (as gemma-3-270m-q4_k_m.gguf) is rendered in
// Gemma's turn format, the one llama.cpp applies to such files: BOS, the system message folded
// into the first user turn, contents trimmed, the model's turn opened. Another architecture's file
// without a template has none.
TEST(NativeChat, AGemmaFileWithoutATemplateUsesGemmasTurnFormat) {
  testing::TempDir dir;
  testing::write_file(dir / "gemma.gguf", gguf_with_vocabulary("gemma3", {"<pad>", "<bos>"}));
  const auto chat = NativeChat::for_model(dir / "gemma.gguf");
  ASSERT_TRUE(chat);
  EXPECT_THAT(chat->source(), HasSubstr("Gemma turn format"));
  const auto messages = nlohmann::json::parse(R"([{"role": "system", "content": " Be brief. "},
    {"role": "user", "content": "Hi\n"}, {"role": "assistant", "content": "Hello"},
    {"role": "user", "content": "Bye"}])");
  EXPECT_EQ(chat->render(messages, true, "conversation 0"),
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello"
            "<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  testing::write_file(dir / "llama.gguf", gguf_with_vocabulary("llama", {"<unk>", "<s>"}));
  EXPECT_FALSE(NativeChat::for_model(dir / "llama.gguf"));
}

TEST(NativeChat, MessagesAreCheckedAsThePythonRendererChecksThem) {
  using nlohmann::json;
  EXPECT_EQ(error_of([] { check_chat_messages(json::object()); }),
            "messages: expected an array of conversations, found an object");
  EXPECT_EQ(error_of([] { check_chat_messages(json::array({json::array()})); }),
            "messages[0]: expected at least one message, found none");
  EXPECT_EQ(error_of([] {
              check_chat_messages(json::parse(R"([[{"role": "user", "content": "a"},
                                                   {"role": "tool", "content": "b"}]])"));
            }),
            "messages[0][1]: key 'role': expected 'system', 'user' or 'assistant', found \"tool\"");
  EXPECT_EQ(error_of([] { check_chat_messages(json::parse(R"([[{"role": "user"}]])")); }),
            "messages[0][0]: key 'content' is missing");
  EXPECT_EQ(error_of([] {
              check_chat_messages(json::parse(R"([[{"role": "user", "content": 1, "x": 2}]])"));
            }),
            "messages[0][0]: key 'x' is not accepted (a message has 'role' and 'content')");
  EXPECT_EQ(
      error_of([] { check_chat_messages(json::parse(R"([[{"role": "user", "content": [1]}]])")); }),
      "messages[0][0]: key 'content': expected a string, found an array");
}

}  // namespace
}  // namespace gengraph
