// GGUF files as models: the small files llama.cpp's converter and quantizer wrote
// (tests/fixtures/gguf/models, tools/make_gguf_model_fixtures.py) load and give the logits the
// pinned transformers computes on the same files (its own GGUF reading, dequantized, float32).
#include <ATen/ATen.h>
#include <gengraph/ext/cache.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "framework/model/gguf.h"
#include "framework/model/gguf_model.h"
#include "framework/model/loader.h"
#include "framework/model/safetensors.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

std::filesystem::path fixtures() {
  return std::filesystem::path(testing::fixtures_dir()) / "gguf" / "models";
}

// Logits after each prefix of `ids`, one prefill per prefix: [T, vocab].
at::Tensor prefix_logits(const CausalLM& m, const at::Tensor& ids) {
  std::vector<at::Tensor> out;
  for (int64_t t = 1; t <= ids.size(0); ++t) {
    GrowingCache cache(m.config().num_layers);
    out.push_back(run_forward_step(m, cache, ids.slice(0, 0, t).unsqueeze(0),
                                   at::arange(t, at::kLong).unsqueeze(0), at::arange(t, at::kLong),
                                   at::ones({1, t}, at::kBool)));
  }
  return at::cat(out);
}

class GgufModel : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufModel, GivesTransformersLogitsOnTheSameFile) {
  const std::string name = GetParam();
  const auto expected = SafetensorsFile::open(fixtures() / "expected.safetensors");
  ModelSource src;
  src.path = fixtures() / (name + ".gguf");
  const LoadedModel loaded = load_model(src);
  EXPECT_EQ(loaded.source, src.path.string());
  const at::Tensor want = expected->view(name).to(at::kFloat)[0];
  const at::Tensor got = prefix_logits(*loaded.model, expected->view("prompt").to(at::kLong));
  ASSERT_EQ(got.sizes(), want.sizes());
  // Both dequantize the same bits to the same floats; the sums differ only in their order.
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-4))
      << name << ": largest difference " << (got - want).abs().max().item<float>();
  // The configuration alone, without the weights, is the same.
  EXPECT_EQ(model_config_of(src).num_layers, loaded.model->config().num_layers);
}

// With model.weights int4 (groups of 32), Q4_0 and Q4_1 blocks are taken as int4 levels as they
// are: the logits stay transformers' on the same file (quantizing the dequantized floats again
// would move Q4_0's, whose grid is symmetric about 0, onto another grid).
class GgufQ4Model : public GgufModel {};
TEST_P(GgufQ4Model, Int4TakesQ4BlocksAsTheyAre) {
  const std::string name = GetParam();
  const auto expected = SafetensorsFile::open(fixtures() / "expected.safetensors");
  ModelSource src;
  src.path = fixtures() / (name + ".gguf");
  src.load.weights.kind = WeightFormat::Kind::kInt4;
  src.load.weights.lm_head = false;  // the head (Q8_0 or F32 here) as loaded
  const LoadedModel loaded = load_model(src);
  const at::Tensor want = expected->view(name).to(at::kFloat)[0];
  const at::Tensor got = prefix_logits(*loaded.model, expected->view("prompt").to(at::kLong));
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-4))
      << name << ": largest difference " << (got - want).abs().max().item<float>();
}

// With int8 in blocks of 32, Q8_0 blocks are taken as they are (Q8_0 is that format: a float16
// scale per 32 int8 levels; quantizing its values again happens to give the same levels, so this
// checks the mapping's layout and rows rather than telling the two apart).
class GgufQ8Model : public GgufModel {};
TEST_P(GgufQ8Model, Int8BlocksTakeQ8_0BlocksAsTheyAre) {
  const std::string name = GetParam();
  const auto expected = SafetensorsFile::open(fixtures() / "expected.safetensors");
  ModelSource src;
  src.path = fixtures() / (name + ".gguf");
  src.load.weights.kind = WeightFormat::Kind::kInt8;
  src.load.weights.group_size = 32;  // the head too: a tied Q8_0 embedding's blocks as they are
  const LoadedModel loaded = load_model(src);
  const at::Tensor want = expected->view(name).to(at::kFloat)[0];
  const at::Tensor got = prefix_logits(*loaded.model, expected->view("prompt").to(at::kLong));
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-4))
      << name << ": largest difference " << (got - want).abs().max().item<float>();
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s) c = c == '-' ? '_' : c;
  return s;
}

INSTANTIATE_TEST_SUITE_P(Files, GgufModel,
                         ::testing::Values("llama-f32", "llama-q8_0", "llama-q4_0", "llama-q4_1",
                                           "qwen2-f32", "qwen2-q8_0", "qwen2-q4_0", "qwen2-q4_1",
                                           "gpt2-f32", "gpt2-q8_0", "gpt2-q4_0", "gpt2-q4_1",
                                           "gemma3-f32", "gemma3-q8_0", "gemma3-q4_0",
                                           "gemma3-q4_1"),
                         test_name);
INSTANTIATE_TEST_SUITE_P(Files, GgufQ4Model,
                         ::testing::Values("llama-q4_0", "llama-q4_1", "qwen2-q4_0", "qwen2-q4_1",
                                           "gpt2-q4_0", "gpt2-q4_1", "gemma3-q4_0", "gemma3-q4_1"),
                         test_name);
INSTANTIATE_TEST_SUITE_P(Files, GgufQ8Model,
                         ::testing::Values("llama-q8_0", "qwen2-q8_0", "gpt2-q8_0", "gemma3-q8_0"),
                         test_name);

TEST(GgufModelConfig, MetadataBecomesTheArchitecturesConfig) {
  const auto f = GgufFile::open(fixtures() / "llama-q4_1.gguf");
  const nlohmann::json doc = gguf_config_document(*f);
  EXPECT_EQ(doc["model_type"], "llama");
  EXPECT_EQ(doc["hidden_size"], 64);
  EXPECT_EQ(doc["num_key_value_heads"], 2);
  EXPECT_EQ(doc["tie_word_embeddings"], true);  // no output.weight
  EXPECT_EQ(gguf_summary(*f), "llama: 20 tensors (F32 5, Q4_1 14, Q8_0 1)");
  const auto g = GgufFile::open(fixtures() / "gpt2-f32.gguf");
  EXPECT_EQ(gguf_config_document(*g)["n_inner"], 256);
}

// A gemma3 file's metadata becomes Gemma3TextConfig's keys as llama.cpp reads the file: five
// sliding layers of six, the local layers' rope base 10000, the attention scaled by the head size,
// and generation ending at <end_of_turn> as well as EOS where the vocabulary has it.
TEST(GgufModelConfig, Gemma3MetadataBecomesGemma3TextsConfig) {
  const auto f = GgufFile::open(fixtures() / "gemma3-q8_0.gguf");
  const nlohmann::json doc = gguf_config_document(*f);
  EXPECT_EQ(doc["model_type"], "gemma3_text");
  EXPECT_EQ(doc["head_dim"], 256);
  EXPECT_EQ(doc["query_pre_attn_scalar"], 256);
  EXPECT_EQ(doc["sliding_window"], 4);
  EXPECT_EQ(doc["layer_types"],
            nlohmann::json({"sliding_attention", "sliding_attention", "sliding_attention",
                            "sliding_attention", "sliding_attention", "full_attention"}));
  EXPECT_EQ(doc["rope_parameters"]["sliding_attention"]["rope_theta"], 10000.0);
  EXPECT_EQ(doc["rope_parameters"]["full_attention"]["rope_theta"], 1000000.0);
  EXPECT_EQ(doc["hidden_activation"], "gelu_pytorch_tanh");
  EXPECT_FALSE(doc.contains("rope_theta"));
  // Converted without a vocabulary: no special token ids, so no <end_of_turn> either.
  EXPECT_FALSE(doc.contains("eos_token_id"));
}

// A GGUF whose tensors do not fit its metadata is refused naming the tensor.
TEST(GgufModelConfig, RefusesWhatDoesNotFitByName) {
  // The file's bytes with one tensor renamed (same length): the model lacks it, and has one
  // no spec takes.
  std::ifstream in(fixtures() / "llama-f32.gguf", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "blk.1.ffn_up.weight", to = "blk.1.ffn_UP.weight";
  const size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, from.size(), to);
  testing::TempDir dir;
  testing::write_file(dir / "renamed.gguf", bytes);
  ModelSource src;
  src.path = dir / "renamed.gguf";
  const std::string e = error_of([&] { load_model(src); });
  EXPECT_THAT(e, HasSubstr("renamed.gguf': no tensor blk.1.ffn_up.weight "
                           "(model.layers.1.mlp.up_proj.weight, expected shape [128, 64])"));
}

// The entry points: model.gguf (and model.path) in an experiment, --model in the CLI.
TEST(GgufModelEntryPoints, ExperimentsAndTheCliTakeAGgufFile) {
  testing::TempDir dir;
  const std::string file = (fixtures() / "llama-q8_0.gguf").string();
  const std::string rest =
      "backends: [eager, trace]\ninputs: {prompts: [[1, 5, 9], [7]]}\n"
      "generation: {max_new_tokens: 4, min_new_tokens: 4}\nrun: {warmup: 0, repeats: 1}\n";
  testing::write_file(dir / "g.yaml", "model: {gguf: '" + file + "'}\n" + rest);
  ASSERT_EQ(testing::run_quietly(dir / "g.yaml", dir / "g.json"), 0);
  const auto doc = nlohmann::json::parse(testing::read_file(dir / "g.json"));
  EXPECT_TRUE(doc["runs"][1]["tokens_match_first_row"].get<bool>()) << doc["runs"][1].dump();
  EXPECT_EQ(doc["runs"][0]["outputs"][0]["sequences"][0]["tokens"].size(), 4u);
  testing::write_file(dir / "p.yaml", "model: {path: '" + file + "'}\n" + rest);
  EXPECT_EQ(testing::run_quietly(dir / "p.yaml", dir / "p.json"), 0);
  // model.gguf must be a GGUF file.
  testing::write_file(
      dir / "bad.yaml",
      "model: {gguf: '" + (fixtures() / "expected.safetensors").string() + "'}\n" + rest);
  const auto [rc, err] = testing::cli_stderr({"run", (dir / "bad.yaml").string()});
  EXPECT_NE(rc, 0);
  EXPECT_THAT(err, HasSubstr("model.gguf: expected a GGUF file"));
  // Text needs a vocabulary, which this file was written without; the Python tokenizer does not
  // read GGUF files. Both are refused saying so.
  const auto [text_rc, text_err] =
      testing::cli_stderr({"generate", "--model", file, "--text", "hi"});
  EXPECT_NE(text_rc, 0);
  EXPECT_THAT(text_err, HasSubstr("tokenizer.ggml.model is 'none' (a file written without a "
                                  "vocabulary: prompts are token ids)"));
  const auto [py_rc, py_err] =
      testing::cli_stderr({"generate", "--model", file, "--text", "hi", "--tokenizer", "python"});
  EXPECT_NE(py_rc, 0);
  EXPECT_THAT(py_err, HasSubstr("is a GGUF file, which the Python tokenizer (transformers) does "
                                "not read here"));
  EXPECT_EQ(
      testing::cli({"generate", "--model", file, "--prompt", "1,2,3", "--max-new-tokens", "3"}), 0);
}

}  // namespace
}  // namespace gengraph
