// int8 activations over quantized weights (W8A8, W4A8): the row count from which products quantize
// their activations, the activation blocks, and how each setting is refused by name wherever it
// can be made (the Engine, an experiment's YAML, the loader).
#include <ATen/ATen.h>
#include <gengraph/gengraph.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/model/loader.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using ::testing::HasSubstr;

// What an Engine on gpt2-tiny with these weights and int8 activation settings throws.
std::string engine_error(const std::string& weights, int64_t rows, int64_t block) {
  EngineOptions e;
  e.weights = weights;
  e.int8_activation_rows = rows;
  e.int8_activation_block = block;
  return testing::error_of([&] { Engine("gpt2-tiny", e); });
}

// `gengraph validate` on an experiment with this model mapping: its exit status and stderr.
std::pair<int, std::string> validate_model(const std::string& model) {
  testing::TempDir dir;
  testing::write_file(dir / "x.yaml",
                      "name: x\nmodel: " + model + "\ninputs: {prompts: [[1, 2]]}\n");
  return testing::cli_stderr({"validate", (dir / "x.yaml").string()});
}

// int8 activations (model.int8_activation_rows): products of at least that many rows take the
// W8A8 kernel, fewer stay weight-only; other weight formats, other devices and aoti on GPT-J with
// a scale per row refuse them by name.
TEST(Quantization, Int8ActivationsFromARowCountAndRefusedElsewhere) {
  register_builtin_backends();
  LoadOptions o;
  o.weights.kind = WeightFormat::Kind::kInt8;
  const auto weight_only = testing::test_model("llama-a", 3, o);
  o.weights.int8_activation_rows = 3;
  const auto from3 = testing::test_model("llama-a", 3, o);
  EXPECT_EQ(from3->config().weights.describe(), "int8 (int8 activations from 3 rows)");
  const auto logits = [](const std::shared_ptr<const CausalLM>& m, int64_t rows) {
    auto b = BackendRegistry::instance().create("eager", m, BackendOptions("eager", {}));
    b->prepare(rows, 8);
    const at::Tensor ids = at::arange(5, 5 + rows, at::kLong).unsqueeze(1);
    return b->prefill(StepInputs{ids, at::zeros({rows, 1}, at::kLong), ids.ne(-1), {}});
  };
  // Two rows: weight-only, the same logits bit for bit; four: the activations quantized.
  EXPECT_TRUE(at::equal(logits(weight_only, 2), logits(from3, 2)));
  const at::Tensor a = logits(weight_only, 4), b = logits(from3, 4);
  EXPECT_FALSE(at::equal(a, b));
  EXPECT_LT((a - b).abs().max().item<float>(), 0.05 * a.abs().max().item<float>());

  // aoti exports it (Quantization.AotiRunsInt8ActivationsFromTheirRowCount), except GPT-J's
  // joined projection with a scale per row, which the exported modules run apart.
  LoadOptions j = o;
  j.weights.int8_activation_rows = 1;
  const auto gptj = testing::test_model("gptj-a", 3, j);
  EXPECT_THAT(testing::error_of([&] {
                BackendRegistry::instance().create("aoti", gptj, BackendOptions("aoti", {}));
              }),
              HasSubstr("is not exported for gptj"));
  EXPECT_THAT(engine_error("bfloat16", 1, 0),
              HasSubstr("EngineOptions::int8_activation_rows: expected 0 unless weights is int8 "
                        "or int4 (int8 activations multiply integer weights), found 1 with "
                        "weights 'bfloat16'"));
  const auto [status, err] =
      validate_model("{preset: gpt2-tiny, weights: bfloat16, int8_activation_rows: 2}");
  EXPECT_NE(status, 0);
  EXPECT_THAT(err, HasSubstr("int8_activation_rows"));
  EXPECT_THAT(err, HasSubstr("0 unless weights is int8 or int4"));
}

// int4 with int8 activations (W4A8): activation blocks of 32, and only those, wherever the
// setting can be made; the quantized products change the logits a little from int4's.
TEST(Quantization, Int4ActivationsTakeBlocksOf32AndAreCheckedByName) {
  register_builtin_backends();
  LoadOptions o;
  o.weights.kind = WeightFormat::Kind::kInt4;
  o.weights.int8_head = false;  // the head int4 too, until the int8 head is compared below
  const auto weight_only = testing::test_model("preset:llama-tiny", 3, o);
  o.weights.int8_activation_rows = 1;
  o.weights.int8_activation_block = 32;
  const auto w4a8 = testing::test_model("preset:llama-tiny", 3, o);
  EXPECT_EQ(w4a8->config().weights.describe(),
            "int4 (groups of 32) (int8 activations from 1 row, blocks of 32), output head int4");
  const auto logits = [](const std::shared_ptr<const CausalLM>& m) {
    auto b = BackendRegistry::instance().create("eager", m, BackendOptions("eager", {}));
    b->prepare(2, 8);
    const at::Tensor ids = at::tensor({5, 9}, at::kLong).unsqueeze(1);
    return b->prefill(StepInputs{ids, at::zeros({2, 1}, at::kLong), ids.ne(-1), {}});
  };
  const at::Tensor a = logits(weight_only), b = logits(w4a8);
  EXPECT_FALSE(at::equal(a, b));
  EXPECT_LT((a - b).abs().max().item<float>(), 0.05 * a.abs().max().item<float>());
  for (const int64_t block : {0, 64}) {
    o.weights.int8_activation_block = block;
    EXPECT_THAT(testing::error_of([&] { testing::test_model("preset:llama-tiny", 3, o); }),
                HasSubstr("model.int8_activation_block: expected 32 with weights int4 and "
                          "int8_activation_rows (the W4A8 kernel quantizes activations in blocks "
                          "of 32 channels), found " +
                          std::to_string(block)));
    EXPECT_THAT(engine_error("int4", 1, block),
                HasSubstr("EngineOptions::int8_activation_block: expected 32 with weights int4"));
  }
  // int8_head: the head of an int4 model in int8 (the default), and refused elsewhere by name.
  o.weights.int8_activation_block = 32;
  o.weights.int8_head = true;
  EXPECT_EQ(o.weights, [&] {
    WeightFormat d;  // int8_head not set: int4's default
    d.kind = WeightFormat::Kind::kInt4;
    d.int8_activation_rows = 1;
    d.int8_activation_block = 32;
    return d;
  }());
  const auto h8 = testing::test_model("preset:llama-tiny", 3, o);
  EXPECT_EQ(h8->config().weights.describe(),
            "int4 (groups of 32) (int8 activations from 1 row, blocks of 32), output head int8");
  // Against the same body with the head as loaded: the int8 head's logits far nearer than the
  // int4 head's.
  o.weights.lm_head = false;
  o.weights.int8_head = false;  // a head as loaded has no int8 form (refused with it)
  const at::Tensor f = logits(testing::test_model("preset:llama-tiny", 3, o)), c = logits(h8);
  o.weights.lm_head = true;
  o.weights.int8_head = true;
  EXPECT_LT((c - f).abs().mean().item<float>(), 0.3 * (b - f).abs().mean().item<float>());
  EXPECT_GT(h8->decode_weight_bytes(), w4a8->decode_weight_bytes());
  EngineOptions e;
  e.weights = "int8";
  e.int8_head = true;
  EXPECT_THAT(testing::error_of([&] { Engine("gpt2-tiny", e); }),
              HasSubstr("EngineOptions::int8_head: expected false unless weights is int4"));
  const auto [h_status, h_err] =
      validate_model("{preset: gpt2-tiny, weights: int8, int8_head: true}");
  EXPECT_NE(h_status, 0);
  EXPECT_THAT(h_err, HasSubstr("int8_head"));
  EXPECT_THAT(h_err, HasSubstr("false unless weights is int4"));

  const auto [status, err] = validate_model(
      "{preset: gpt2-tiny, weights: int4, int8_activation_rows: 1, int8_activation_block: 64}");
  EXPECT_NE(status, 0);
  EXPECT_THAT(err, HasSubstr("int8_activation_block"));
  EXPECT_THAT(err, HasSubstr("32 with weights int4"));
  EXPECT_EQ(validate_model("{preset: gpt2-tiny, weights: int4, int8_activation_rows: 1, "
                           "int8_activation_block: 32}")
                .first,
            0);
}

// model.int8_activation_block: the W8A8 products' activation scales per block of channels; a
// block that does not divide a projection's width, or one without int8_activation_rows, is
// refused by name wherever it can be set.
TEST(Quantization, Int8ActivationBlocksAreTheirOwnScalesAndCheckedByName) {
  register_builtin_backends();
  LoadOptions o;
  o.weights.kind = WeightFormat::Kind::kInt8;
  o.weights.int8_activation_rows = 1;
  const auto per_row = testing::test_model("preset:llama-tiny", 3, o);
  o.weights.int8_activation_block = 32;
  const auto blocks = testing::test_model("preset:llama-tiny", 3, o);
  EXPECT_EQ(blocks->config().weights.describe(),
            "int8 (int8 activations from 1 row, blocks of 32)");
  const auto logits = [](const std::shared_ptr<const CausalLM>& m) {
    auto b = BackendRegistry::instance().create("eager", m, BackendOptions("eager", {}));
    b->prepare(2, 8);
    const at::Tensor ids = at::tensor({5, 9}, at::kLong).unsqueeze(1);
    return b->prefill(StepInputs{ids, at::zeros({2, 1}, at::kLong), ids.ne(-1), {}});
  };
  const at::Tensor a = logits(per_row), b = logits(blocks);
  EXPECT_FALSE(at::equal(a, b));
  EXPECT_LT((a - b).abs().max().item<float>(), 0.05 * a.abs().max().item<float>());

  o.weights.int8_activation_block = 96;
  EXPECT_THAT(testing::error_of([&] { testing::test_model("preset:llama-tiny", 3, o); }),
              HasSubstr("model.int8_activation_block: expected 0, or a multiple of 32 dividing "
                        "every projection's input channels; found 96 for a projection of 64 "
                        "input channels"));
  o.weights.int8_activation_block = 48;
  EXPECT_THAT(testing::error_of([&] { testing::test_model("preset:llama-tiny", 3, o); }),
              HasSubstr("model.int8_activation_block: expected 0 (a scale per row) or a multiple "
                        "of 32 (a scale per block of that many channels of the products that "
                        "int8_activation_rows quantizes), found 48"));
  // Without int8_activation_rows no product quantizes its activations: the block has no effect
  // (so that a sweep can cross the two), and 48 still does not pass for one.
  o.weights.int8_activation_rows = 0;
  EXPECT_THAT(testing::error_of([&] { testing::test_model("preset:llama-tiny", 3, o); }),
              HasSubstr("model.int8_activation_block: expected 0 (a scale per row) or a "
                        "multiple of 32"));
  o.weights.int8_activation_block = 64;
  EXPECT_EQ(testing::test_model("preset:llama-tiny", 3, o)->config().weights.describe(), "int8");
  EXPECT_THAT(engine_error("int8", 0, 40),
              HasSubstr("EngineOptions::int8_activation_block: expected 0 (a scale per row) or a "
                        "multiple of 32 (a scale per block of that many channels of the products "
                        "that int8_activation_rows quantizes), found 40"));
  const auto [status, err] = validate_model(
      "{preset: gpt2-tiny, weights: int8, int8_activation_rows: 1, int8_activation_block: 40}");
  EXPECT_NE(status, 0);
  EXPECT_THAT(err, HasSubstr("int8_activation_block"));
  EXPECT_THAT(err, HasSubstr("0 (a scale per row) or a multiple of 32"));
}

// W8A8 with blocks of 32 gives every path's floats to the bit (WeightOnlyKernels), so on CPU a
// batch's rows are each row's alone: eight prompts prefilled and decoded together give each
// prompt's logits alone, to the bit, at the prefill (24 rows at once against 3: AMX tiles against
// the VNNI tile where the CPU has them) and at two decode steps (8 rows, two blocks to a tile
// product, against 1). Per row too (exact int32 sums, float(sum) * row scale * channel scale on
// every path).
TEST(Quantization, IntegerActivationRowsInABatchAreEachRowAlone) {
  register_builtin_backends();
  // int8 weights with blocks of 32 and per row, then int4 weights (W4A8, blocks of 32).
  for (const int64_t block : {32, 0, -32}) {
    SCOPED_TRACE("int8_activation_block " + std::to_string(block));
    LoadOptions o;
    o.weights.kind = block < 0 ? WeightFormat::Kind::kInt4 : WeightFormat::Kind::kInt8;
    o.weights.int8_activation_rows = 1;
    o.weights.int8_activation_block = block < 0 ? -block : block;
    const auto model = testing::test_model("preset:llama-tiny", 7, o);
    constexpr int64_t kRows = 8, kPrompt = 3;
    const at::Tensor prompts = at::randint(1, 200, {kRows, kPrompt}, at::kLong);
    // The logits of the prefill and of two greedy decode steps, [rows, 3, vocabulary].
    const auto run = [&](const at::Tensor& ids) {
      const int64_t rows = ids.size(0);
      auto b = BackendRegistry::instance().create("eager", model, BackendOptions("eager", {}));
      b->prepare(rows, kPrompt + 2);
      const at::Tensor pos = at::arange(kPrompt, at::kLong).expand({rows, kPrompt}).contiguous();
      std::vector<at::Tensor> out{b->prefill(StepInputs{ids, pos, ids.ne(-1), {}})};
      for (int64_t step = 0; step < 2; ++step) {
        const at::Tensor next = out.back().argmax(-1).view({rows, 1});
        const at::Tensor p = at::full({rows, 1}, kPrompt + step, at::kLong);
        out.push_back(b->decode(StepInputs{next, p, at::ones({rows, 1}, at::kBool), {}}));
      }
      return at::stack(out, 1);
    };
    const at::Tensor together = run(prompts);
    for (int64_t r = 0; r < kRows; ++r) {
      EXPECT_TRUE(at::equal(run(prompts.narrow(0, r, 1)), together.narrow(0, r, 1))) << "row " << r;
    }
  }
}

}  // namespace
}  // namespace gengraph
