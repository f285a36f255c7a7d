// Weight-only quantization (model.weights): the formats' arithmetic, the kernels against the
// dequantized weights, every backend giving eager's tokens on a quantized model, and refusals.
#include <ATen/ATen.h>
#include <gengraph/cli.h>
#include <gengraph/gengraph.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "backends/aoti/aoti_step.h"
#include "backends/register_builtin.h"
#include "backends/trace/traced_step.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/model/loader.h"
#include "framework/quant/projection.h"
#include "framework/quant/quantize.h"
#include "framework/util/device.h"
#include "framework/util/error.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

at::Tensor random_weight(int64_t out, int64_t in, uint64_t seed) {
  at::manual_seed(seed);
  return at::randn({out, in}) * 0.05;
}

TEST(Quantization, Int8IsSymmetricPerOutputChannelWithinHalfAStep) {
  at::Tensor w = random_weight(96, 64, 1);
  w[5].zero_();  // a zero row quantizes to zeros
  const Int8Weight q = quantize_int8(w);
  EXPECT_EQ(q.q.scalar_type(), at::kChar);
  EXPECT_EQ(q.scales.sizes(), at::IntArrayRef({96}));
  const at::Tensor err = (dequantize_int8(q) - w).abs();
  const at::Tensor half_step = q.scales.unsqueeze(1) / 2 + 1e-7;
  EXPECT_TRUE(err.le(half_step).all().item<bool>()) << err.max().item<float>();
  EXPECT_TRUE(q.q[5].eq(0).all().item<bool>());
  // The largest magnitude of each row is exactly +-127 steps.
  EXPECT_TRUE(q.q.abs().amax(1).slice(0, 0, 5).eq(127).all().item<bool>());
}

// int4 on CUDA multiplies by the CPU format's levels with a bfloat16 scale and zero per group
// (LibTorch's kernel: value = (q - 8) x scale + zero). That weight is the CPU format's within
// bfloat16's rounding of the two, and not exactly it (so the difference is real, and bounded).
TEST(Quantization, Int4CudaWeightIsTheCpuWeightWithinBfloat16) {
  at::manual_seed(5);
  const at::Tensor w = at::randn({40, 96}) * 0.05 + 0.01;
  const Int4Weight q = quantize_int4(w, 32);
  const at::Tensor cpu = dequantize_int4(q), cuda = dequantize_int4_cuda(q);
  ASSERT_EQ(cuda.sizes(), cpu.sizes());
  const at::Tensor s = q.scales.to(at::kFloat).repeat_interleave(32, 1);
  const at::Tensor z = q.zeros.to(at::kFloat).repeat_interleave(32, 1);
  // bfloat16 keeps 8 significant bits: each of scale and zero + 8 x scale is within 2^-9 of itself.
  const at::Tensor bound = (s * 16 + z.abs()) * std::ldexp(1.0, -8);
  EXPECT_TRUE(((cuda - cpu).abs() <= bound).all().item<bool>())
      << (cuda - cpu).abs().max().item<float>();
  EXPECT_FALSE(at::equal(cuda, cpu));
}

// On a GPU: the kernel's product is the product by that weight (bfloat16 activations), for each
// group size, an output count that is not a multiple of 8 (padded, cut), and a batch of rows. A
// wrong nibble order, tile count or zero would be far outside the bound.
TEST(QuantizationGpu, Int4ProductIsTheProductByItsWeight) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto dev = at::Device(at::kCUDA, 0);
  at::manual_seed(6);
  for (const int64_t group : {32, 64, 128}) {
    for (const int64_t n : {96, 37}) {
      SCOPED_TRACE("group " + std::to_string(group) + ", outputs " + std::to_string(n));
      const at::Tensor w = (at::randn({n, 256}) * 0.05).to(dev);
      const at::Tensor x = at::randn({5, 256}).to(dev);
      WeightFormat f;
      f.kind = WeightFormat::Kind::kInt4;
      f.group_size = group;
      const Projection p(w.contiguous(), at::Tensor(), f);
      const at::Tensor y = p(x).to(at::kFloat).cpu();
      ASSERT_EQ(y.sizes(), (at::IntArrayRef{5, n}));
      const at::Tensor ref_w = dequantize_int4_cuda(quantize_int4(w.cpu(), group));
      const at::Tensor xb = x.cpu().to(at::kBFloat16).to(at::kFloat);
      const at::Tensor want = at::matmul(xb, ref_w.t());
      const at::Tensor bound = at::matmul(xb.abs(), ref_w.abs().t()) * 1e-2 + 1e-3;
      EXPECT_TRUE(((y - want).abs() <= bound).all().item<bool>())
          << (y - want).abs().max().item<float>();
    }
  }
}

TEST(Quantization, Int4GroupsSpanTheirRangeInSixteenLevels) {
  at::Tensor w = random_weight(48, 128, 2);
  w[7].narrow(0, 32, 32).fill_(0.1f);    // a constant group float16 cannot hold
  w[8].narrow(0, 64, 32).fill_(0.125f);  // one it holds: every value the zero, exactly
  w[9].narrow(0, 0, 32).mul_(1e-4);      // a range whose step is a float16 subnormal
  const Int4Weight q = quantize_int4(w, 32);
  EXPECT_EQ(q.scales.sizes(), at::IntArrayRef({48, 4}));
  EXPECT_EQ(q.zeros.sizes(), at::IntArrayRef({48, 4}));
  EXPECT_EQ(q.scales.scalar_type(), at::kHalf);
  EXPECT_EQ(q.zeros.scalar_type(), at::kHalf);
  EXPECT_TRUE(q.q.ge(0).all().item<bool>() && q.q.le(15).all().item<bool>());
  // The levels are the float32 grid's: 15 steps from each group's minimum to its maximum.
  const at::Tensor g = w.reshape({48, 4, 32});
  const at::Tensor lo = g.amin(-1, true), range = g.amax(-1, true) - lo;
  const at::Tensor step32 = at::where(range > 0, range / 15, at::ones_like(range));
  EXPECT_TRUE(
      at::equal(q.q.view({48, 4, 32}), at::round((g - lo) / step32).clamp(0, 15).to(at::kInt)));
  // The stored step and minimum are those values rounded to nearest float16.
  EXPECT_TRUE(at::equal(q.scales, step32.squeeze(-1).to(at::kHalf)));
  EXPECT_TRUE(at::equal(q.zeros, lo.squeeze(-1).to(at::kHalf)));
  // So each weight is within half a step of its value, plus what float16 rounding moves the grid
  // (at most 15 roundings of the step and one of the zero: 2^-11 relative, 2^-25 absolute each).
  const at::Tensor deq = dequantize_int4(q);
  const at::Tensor step = q.scales.to(at::kFloat);  // [48, 4]
  const at::Tensor err = (deq - w).abs().reshape({48, 4, 32}).amax(-1);
  const auto rounding = [](const at::Tensor& v) { return v.abs() * std::ldexp(1.0, -11) + 3e-8; };
  const at::Tensor bound =
      step / 2 + rounding(step) * 15 + rounding(lo.squeeze(-1)) + g.abs().amax(-1) * 1e-6;
  EXPECT_TRUE(err.le(bound).all().item<bool>()) << (err - bound).max().item<float>();
  EXPECT_TRUE(deq[8].narrow(0, 64, 32).eq(0.125f).all().item<bool>());
  // Weights on a float16 grid of 16 levels (a Q4_1 checkpoint's, dequantized) come back exactly.
  const at::Tensor d = (at::rand({48, 4, 1}) * 0.01 + 1e-3).to(at::kHalf).to(at::kFloat);
  const at::Tensor m = (at::randn({48, 4, 1}) * 0.05).to(at::kHalf).to(at::kFloat);
  at::Tensor levels = at::randint(0, 16, {48, 4, 32}).to(at::kFloat);
  levels.select(-1, 0).fill_(0);
  levels.select(-1, 1).fill_(15);
  const at::Tensor grid = (levels * d + m).reshape({48, 128});
  EXPECT_TRUE(at::equal(dequantize_int4(quantize_int4(grid, 32)), grid));
}

TEST(Quantization, Int4RefusesWeightsBeyondFloat16ByName) {
  at::Tensor w = random_weight(4, 64, 3);
  w[2][40] = 1e6f;
  EXPECT_THAT(testing::error_of([&] { quantize_int4(w, 32); }),
              AllOf(HasSubstr("model.weights int4: output channel 2's group 1 holds weights from"),
                    HasSubstr("float16, which holds finite values up to 65504")));
}

// The kernels compute with exactly the weights the quantizers describe.
TEST(Quantization, ProjectionsMultiplyByTheDequantizedWeight) {
  const at::Tensor w = random_weight(96, 128, 3), b = at::randn({96}) * 0.1;
  // 3 and 15 activation rows stream the stored weight; 36 widen it for LibTorch's GEMM.
  for (const int64_t rows : {1, 5, 12}) {
    const at::Tensor x = at::randn({rows, 3, 128});
    WeightFormat f;
    f.kind = WeightFormat::Kind::kInt8;
    const at::Tensor want8 = at::linear(x, dequantize_int8(quantize_int8(w)), b);
    EXPECT_TRUE(at::allclose(Projection(w.clone(), b, f)(x), want8, 1e-4, 1e-4));
    f.kind = WeightFormat::Kind::kInt4;
    const at::Tensor want4 = at::linear(x, dequantize_int4(quantize_int4(w, 32)), b);
    const at::Tensor got4 = Projection(w.clone(), b, f)(x);
    EXPECT_TRUE(at::allclose(got4, want4, 1e-3, 1e-3)) << (got4 - want4).abs().max().item<float>();
    f.kind = WeightFormat::Kind::kBFloat16;
    // bfloat16 weights, float32 activations and sums.
    const at::Tensor wantb = at::linear(x, w.to(at::kBFloat16).to(at::kFloat), b);
    EXPECT_TRUE(at::allclose(Projection(w.clone(), b, f)(x), wantb, 1e-5, 1e-5));
    // add_to is residual + the product.
    f.kind = WeightFormat::Kind::kInt8;
    const at::Tensor r = at::randn({rows, 3, 96});
    EXPECT_TRUE(at::allclose(Projection(w.clone(), b, f).add_to(r, x), r + want8, 1e-4, 1e-4));
  }
}

TEST(Quantization, Int4NamesAGroupThatDoesNotDivideTheInputs) {
  WeightFormat f;
  f.kind = WeightFormat::Kind::kInt4;
  f.group_size = 64;
  EXPECT_THAT(testing::error_of([&] { Projection(random_weight(8, 96, 4), at::Tensor(), f); }),
              HasSubstr("96 input channels are not a multiple of group_size 64"));
}

TEST(Quantization, TheUnfusedFormKeepsItsWeightsAndSaysSo) {
  LoadOptions o;
  o.fused = false;
  o.weights.kind = WeightFormat::Kind::kInt8;
  EXPECT_THAT(
      testing::error_of([&] { testing::test_model("tiny", 1, o); }),
      HasSubstr("model.weights: expected float with fused: false (weights are quantized in the "
                "fused form's projections"));
}

// aoti asks its package builder for a package of the model's weight format, under a cache name
// of its own: the fingerprint is the loaded (float) weights', the same for every format.
TEST(Quantization, AotiBuildsAPackagePerWeightFormat) {
  register_builtin_backends();
  testing::TempDir dir;
  std::vector<std::pair<std::filesystem::path, AotiExportRequest>> asked;
  set_aoti_package_builder(
      [&](const CausalLM&, const AotiExportRequest& r,
          const std::filesystem::path& out) -> AotiBuildReport {
        asked.emplace_back(out, r);
        throw Error("recorded, not built");
      },
      "recording");
  std::vector<WeightFormat> formats(9);
  formats[1].kind = WeightFormat::Kind::kInt8;
  formats[2].kind = WeightFormat::Kind::kInt4;
  formats[3].kind = WeightFormat::Kind::kBFloat16;
  formats[4].kind = WeightFormat::Kind::kInt8;
  formats[4].lm_head = false;
  // int8 activations: each row count and block is a package of its own.
  formats[5].kind = WeightFormat::Kind::kInt8;
  formats[5].int8_activation_rows = 3;
  formats[5].int8_activation_block = 32;
  formats[6].kind = WeightFormat::Kind::kInt8;
  formats[6].int8_activation_rows = 1;
  formats[7].kind = WeightFormat::Kind::kInt4;
  formats[7].int8_activation_rows = 1;
  formats[7].int8_activation_block = 32;
  formats[8] = formats[7];
  formats[7].int8_head = false;  // the head int4 (int8 is int4's default)
  for (const WeightFormat& f : formats) {
    LoadOptions o;
    o.weights = f;
    const auto model = testing::test_model("tiny", 1, o);
    EXPECT_THAT(testing::error_of([&] {
                  BackendRegistry::instance().create(
                      "aoti", model, BackendOptions("aoti", {{"cache_dir", dir.path().string()}}));
                }),
                HasSubstr("recorded, not built"));
  }
  install_aoti_export_tool();
  ASSERT_EQ(asked.size(), formats.size());
  std::set<std::string> names;
  for (size_t i = 0; i < formats.size(); ++i) {
    const auto& [out, request] = asked[i];
    names.insert(out.filename().string());
    EXPECT_EQ(request.weights, formats[i]);
    const std::string tag = aoti_weights_tag(formats[i]);
    if (formats[i].quantized()) {
      EXPECT_THAT(out.filename().string(), HasSubstr("-w" + tag + "-"));
      // The exporter loads this process's operators.
      EXPECT_EQ(std::filesystem::path(request.ops_library).filename(), "libgengraph_core.so");
      EXPECT_TRUE(std::filesystem::is_regular_file(request.ops_library)) << request.ops_library;
    } else {
      EXPECT_THAT(out.filename().string(), ::testing::Not(HasSubstr("-w")));
      EXPECT_EQ(request.ops_library, "");
    }
  }
  EXPECT_EQ(names.size(), formats.size());
  EXPECT_EQ(aoti_weights_tag(formats[2]), "int4-g32-int8-head");  // int4's default head
  EXPECT_EQ(aoti_weights_tag(formats[4]), "int8-float-head");
  EXPECT_EQ(aoti_weights_tag(formats[5]), "int8-a3-b32");
  EXPECT_EQ(aoti_weights_tag(formats[6]), "int8-a1");
  EXPECT_EQ(aoti_weights_tag(formats[7]), "int4-g32-a1-b32");
  EXPECT_EQ(aoti_weights_tag(formats[8]), "int4-g32-int8-head-a1-b32");
}

// An aoti package of a model with int8 activations decides per call, as Projection does: a
// product of fewer rows than int8_activation_rows is weight-only (the int8 package's logits), one
// of more quantizes its activations (eager's W8A8 logits, not the weight-only ones).
TEST(Quantization, AotiRunsInt8ActivationsFromTheirRowCount) {
  if (testing::kAddressSanitizer) {
    GTEST_SKIP() << "a quantized aoti export cannot load an AddressSanitizer library in Python";
  }
  register_builtin_backends();
  install_aoti_export_tool();
  LoadOptions o;
  o.weights.kind = WeightFormat::Kind::kInt8;
  const auto weight_only = testing::test_model("preset:llama-tiny", 11, o);
  o.weights.int8_activation_rows = 4;
  o.weights.int8_activation_block = 32;
  const auto w8a8 = testing::test_model("preset:llama-tiny", 11, o);
  const auto logits = [](ForwardBackend& b, int64_t rows) {
    b.prepare(rows, 8);
    const at::Tensor ids = at::arange(5, 5 + rows, at::kLong).unsqueeze(1);
    return b.prefill(StepInputs{ids, at::zeros({rows, 1}, at::kLong), ids.ne(-1), {}});
  };
  auto eager_int8 =
      BackendRegistry::instance().create("eager", weight_only, BackendOptions("eager", {}));
  auto eager_w8a8 = BackendRegistry::instance().create("eager", w8a8, BackendOptions("eager", {}));
  auto aoti = BackendRegistry::instance().create("aoti", w8a8, BackendOptions("aoti", {}));
  EXPECT_EQ(aoti->report().count("aoti_package_bytes"), 1u);
  // Three rows: below the count, weight-only.
  const at::Tensor few = logits(*aoti, 3);
  EXPECT_TRUE(at::allclose(few, logits(*eager_int8, 3), 1e-4, 1e-5));
  // Six rows: the activations quantized.
  const at::Tensor many = logits(*aoti, 6), want = logits(*eager_w8a8, 6),
                   other = logits(*eager_int8, 6);
  const float to_w8a8 = (many - want).abs().max().item<float>();
  const float to_int8 = (many - other).abs().max().item<float>();
  EXPECT_LT(to_w8a8, 1e-4) << to_int8;
  EXPECT_GT(to_int8, 10 * to_w8a8 + 1e-4) << to_w8a8;
}

// A package holds one weight format: given to a model of another, it is refused by name.
TEST(Quantization, AotiRefusesAPackageOfAnotherWeightFormat) {
  if (testing::kAddressSanitizer) {
    GTEST_SKIP() << "a quantized aoti export cannot load an AddressSanitizer library in Python";
  }
  register_builtin_backends();
  install_aoti_export_tool();
  LoadOptions o;
  o.weights.kind = WeightFormat::Kind::kInt8;
  const auto q8 = testing::test_model("tiny", 11, o);
  // The package the int8 cases below use (built here when missing), found in the cache by name:
  // weights "int8" and nothing after it but the builder's identity, so that a package of int8
  // activations ("-wint8-a1-b...") in the same cache is not taken for it.
  BackendRegistry::instance().create("aoti", q8, BackendOptions("aoti", {}));
  const std::string start = q8->config().model_type + "-" + model_fingerprint(*q8) + "-";
  std::filesystem::path package;
  for (const auto& e : std::filesystem::directory_iterator(default_aoti_cache_dir())) {
    const std::string name = e.path().filename().string();
    if (name.rfind(start, 0) == 0 && e.path().extension() == ".pt2" &&
        name.find("-f" + std::to_string(kAotiExportFormat) + "-") != std::string::npos &&
        (name.find("-wint8-b") != std::string::npos ||
         name.size() > 10 && name.compare(name.size() - 10, 10, "-wint8.pt2") == 0)) {
      package = e.path();
    }
  }
  ASSERT_FALSE(package.empty()) << "no int8 package starting " << start;
  EXPECT_EQ(AotiMeta::read(package).weights, "int8");
  const auto f32 = testing::test_model("tiny", 11, LoadOptions());
  EXPECT_THAT(testing::error_of([&] {
                BackendRegistry::instance().create(
                    "aoti", f32, BackendOptions("aoti", {{"package", package.string()}}));
              }),
              HasSubstr("was made for model.weights 'int8', but this run needs 'float'"));
}

TEST(Quantization, QuantizedWeightsChangeTheLogitsButNotTheirShape) {
  LoadOptions o;
  const auto base = testing::test_model("llama-a", 3, o);
  o.weights.kind = WeightFormat::Kind::kInt8;
  const auto q8 = testing::test_model("llama-a", 3, o);
  EXPECT_EQ(q8->config().weights.name(), "int8");
  register_builtin_backends();
  auto a = BackendRegistry::instance().create("eager", base, BackendOptions("eager", {}));
  auto b = BackendRegistry::instance().create("eager", q8, BackendOptions("eager", {}));
  const auto ids = at::tensor({3, 4, 5}, at::kLong).reshape({1, 3});
  const auto valid = ids.ne(0);
  const auto pos = at::arange(3, at::kLong).reshape({1, 3});
  for (auto* be : {a.get(), b.get()}) be->prepare(1, 8);
  const auto la = a->prefill(StepInputs{ids, pos, valid, {}});
  const auto lb = b->prefill(StepInputs{ids, pos, valid, {}});
  EXPECT_EQ(la.sizes(), lb.sizes());
  EXPECT_FALSE(at::equal(la, lb));                       // quantized: not the same numbers
  EXPECT_LT((la - lb).abs().max().item<float>(), 0.5f);  // but close (random weights, 0.05)
}

// The bandwidth report's bytes: quantized projections at their stored size. With bfloat16 every
// projection weight is exactly half (llama-a: untied head, so the embedding stays float32); with
// int8 a quarter plus a float32 scale per output channel.
TEST(Quantization, DecodeWeightBytesCountTheStoredFormat) {
  LoadOptions o;
  const auto base = testing::test_model("llama-a", 3, o);
  ASSERT_FALSE(base->config().tie_word_embeddings);
  double total = 0, projections = 0, out_channels = 0;
  for (const auto& [name, t] : base->weights()) {
    total += static_cast<double>(t.nbytes());
    if (t.dim() == 2 && name != "model.embed_tokens.weight") {
      projections += static_cast<double>(t.nbytes());
    }
  }
  EXPECT_DOUBLE_EQ(base->decode_weight_bytes(), total);
  o.weights.kind = WeightFormat::Kind::kBFloat16;
  EXPECT_DOUBLE_EQ(testing::test_model("llama-a", 3, o)->decode_weight_bytes(),
                   total - projections / 2);
  o.weights.kind = WeightFormat::Kind::kInt8;
  const double int8 = testing::test_model("llama-a", 3, o)->decode_weight_bytes();
  EXPECT_GT(int8, total - projections * 3 / 4);  // the scales add a little
  EXPECT_LT(int8, total - projections * 3 / 4 + projections / 8);
}

// Every backend that runs a quantized model gives the eager (growing cache) tokens of that same
// quantized model, for every strategy.
struct QuantCase {
  std::string format;
  std::string backend;
  std::map<std::string, std::string> options;
  std::string model;
};

class QuantizedBackends : public ::testing::TestWithParam<QuantCase> {};

TEST_P(QuantizedBackends, GiveEagerTokensOnTheSameQuantizedModel) {
  const QuantCase& c = GetParam();
  const bool aoti =
      c.backend == "aoti" || (c.options.count("step") && c.options.at("step") == "aoti");
  if (aoti && testing::kAddressSanitizer) {
    // Exporting a quantized package loads this library into Python (tools/export_aoti.py), which
    // ASan's runtime refuses there; the plain build's run (ctest) covers these cases.
    GTEST_SKIP() << "a quantized aoti export cannot load an AddressSanitizer library in Python";
  }
  register_builtin_backends();
  install_aoti_export_tool();  // aoti builds (or reuses from its cache) a package per case
  LoadOptions o;
  // w8a8: int8 weights with every product's activations quantized too.
  // w8a8b32: the same with a scale per 32 activation channels.
  // w4a8: int4 weights with every product's activations quantized, in blocks of 32.
  // int8g32: int8 weights with a float16 scale per block of 32 (Q8_0); w8a8g32 the same by
  // activations in blocks of 32.
  const bool g32 = c.format == "int8g32" || c.format == "w8a8g32";
  const bool w8a8 = c.format == "w8a8" || c.format == "w8a8b32" || c.format == "w8a8g32";
  // w4a8h8: the same with the output head in int8 (and its activations in blocks of 32).
  const bool w4a8 = c.format == "w4a8" || c.format == "w4a8h8";
  o.weights.int8_head = c.format == "w4a8h8";
  o.weights.kind = parse_weight_kind(w8a8 || g32 ? "int8" : w4a8 ? "int4" : c.format, "test");
  if (g32) o.weights.group_size = 32;
  if (w8a8 || w4a8) o.weights.int8_activation_rows = 1;
  if (c.format == "w8a8b32" || c.format == "w8a8g32" || w4a8) {
    o.weights.int8_activation_block = 32;
  }
  const auto model = testing::test_model(c.model, 11, o);
  auto reference = BackendRegistry::instance().create("eager", model, BackendOptions("eager", {}));
  auto backend =
      BackendRegistry::instance().create(c.backend, model, BackendOptions(c.backend, c.options));
  const std::vector<std::vector<int64_t>> prompts = {{3, 4, 5, 6, 7, 8}, {9}, {10, 11, 12}};
  ResolvedSettings g;
  g.max_new_tokens = 10;
  // aoti runs a model exported apart (tools/export_aoti.py): the float model's tokens must differ
  // from the quantized model's somewhere, or the comparison could not tell a float package.
  std::unique_ptr<ForwardBackend> float_reference;
  if (aoti) {
    float_reference = BackendRegistry::instance().create(
        "eager", testing::test_model(c.model, 11, LoadOptions()), BackendOptions("eager", {}));
  }
  int differ_from_float = 0;
  for (const auto& [what, config] : testing::every_strategy(g)) {
    at::manual_seed(17);
    const auto a = Generator(config).generate(*reference, prompts);
    if (float_reference) {
      at::manual_seed(17);
      const auto f = Generator(config).generate(*float_reference, prompts);
      for (size_t i = 0; i < prompts.size(); ++i) {
        differ_from_float += f.outputs[i].at(0).tokens != a.outputs[i].at(0).tokens;
      }
    }
    at::manual_seed(17);
    const auto b = Generator(config).generate(*backend, prompts);
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(a.outputs[i].size(), b.outputs[i].size());
      for (size_t j = 0; j < a.outputs[i].size(); ++j) {
        EXPECT_EQ(a.outputs[i][j].tokens, b.outputs[i][j].tokens)
            << what << " input " << i << " sequence " << j;
      }
    }
  }
  if (float_reference) EXPECT_GT(differ_from_float, 0);
}

std::vector<QuantCase> quant_cases() {
  std::vector<QuantCase> out;
  // int4 needs widths that its groups of 32 divide: the tiny presets (64 wide); the fixture
  // models (48 wide) for the others.
  for (const std::string format :
       {"int8", "w8a8", "w8a8b32", "int8g32", "w8a8g32", "int4", "w4a8", "w4a8h8", "bfloat16"}) {
    const bool blocks = format == "int4" || format == "w8a8b32" || format == "int8g32" ||
                        format == "w8a8g32" || format == "w4a8" || format == "w4a8h8";
    const std::vector<std::string> models =
        blocks ? std::vector<std::string>{"tiny", "preset:gptj-tiny", "preset:llama-tiny"}
               : std::vector<std::string>{"tiny", "gptj-a", "llama-a"};
    for (const std::string& model : models) {
      out.push_back({format, "eager", {{"cache", "static"}}, model});
      out.push_back({format, "trace", {}, model});
      out.push_back({format, "cuda_graph", {{"capture", "false"}}, model});
    }
  }
  // Gemma 3 (q/k norms and norms after o_proj and down_proj): int8 per channel and int4.
  for (const auto& [format, model] : std::vector<std::pair<std::string, std::string>>{
           {"int8", "gemma3-a"}, {"int4", "preset:gemma3-tiny"}}) {
    out.push_back({format, "eager", {{"cache", "static"}}, model});
    out.push_back({format, "trace", {}, model});
    out.push_back({format, "cuda_graph", {{"capture", "false"}}, model});
  }
  // aoti: a package per model and format (built once, then taken from the package cache); GPT-J
  // quantizes out_proj and fc_out as one projection (one scale per output channel over both).
  out.push_back({"int8", "aoti", {}, "tiny"});
  out.push_back({"int8", "aoti", {}, "preset:llama-tiny"});
  out.push_back({"int8", "aoti", {}, "gptj-a"});
  out.push_back({"int4", "aoti", {}, "preset:llama-tiny"});
  out.push_back({"bfloat16", "aoti", {}, "tiny"});
  // int8 activations: per row, and per block on GPT-J (its joined projection run apart, the
  // blocks falling inside one part or the other).
  out.push_back({"w8a8", "aoti", {}, "tiny"});
  out.push_back({"w8a8b32", "aoti", {}, "preset:gptj-tiny"});
  out.push_back({"w4a8", "aoti", {}, "preset:llama-tiny"});
  out.push_back({"w4a8h8", "aoti", {}, "tiny"});
  // int8 in blocks of 32 (float16 scales per block), by activation blocks of 32 too.
  out.push_back({"w8a8g32", "aoti", {}, "preset:llama-tiny"});
  // cuda_graph's aoti step (uncaptured on CPU) takes the same package as aoti.
  out.push_back({"int8", "cuda_graph", {{"capture", "false"}, {"step", "aoti"}}, "tiny"});
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Formats, QuantizedBackends, ::testing::ValuesIn(quant_cases()), [](const auto& info) {
      const QuantCase& c = info.param;
      std::string n = c.format + "_" + c.backend + (c.options.count("cache") ? "_static" : "") +
                      (c.options.count("step") ? "_" + c.options.at("step") : "") + "_" + c.model;
      for (char& ch : n) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return n;
    });

}  // namespace
}  // namespace gengraph
