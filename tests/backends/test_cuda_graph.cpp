// The cuda_graph backend. Option and device errors are checked everywhere; the GPU suite (token
// equality of eager, trace and cuda_graph on CUDA, float32 and bfloat16) skips without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "backends/cuda_graph/cuda_graph_backend.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/model/loader.h"
#include "framework/util/device.h"
#include "tests/test_util.h"

namespace gengraph {
namespace {

using ::testing::HasSubstr;
using testing::error_of;

std::shared_ptr<const CausalLM> model(const std::string& which, at::ScalarType dtype, const std::string& device) {
  return testing::test_model(which, 3, LoadOptions{dtype, parse_device(device)});
}

TEST(CudaGraphBackend, ListedWithTheReasonWhenUnavailable) {
  register_builtin_backends();
  const auto& info = BackendRegistry::instance().get("cuda_graph");
  if (cuda_available()) {
    EXPECT_EQ(info.unavailable_reason(BackendOptions("cuda_graph", {})), "");
  } else {
    EXPECT_THAT(info.unavailable_reason(BackendOptions("cuda_graph", {})), HasSubstr("needs a CUDA device"));
    EXPECT_EQ(info.unavailable_reason(BackendOptions("cuda_graph", {{"capture", "false"}})), "");
    EXPECT_THAT(error_of([] {
                  BackendRegistry::instance().create("cuda_graph", model("tiny", at::kFloat, "cpu"),
                                                     BackendOptions("cuda_graph", {}));
                }),
                HasSubstr("backend 'cuda_graph' is unavailable here: capture needs a CUDA device"));
  }
}

TEST(CudaGraphBackend, OptionsAndDeviceErrorsNameTheOption) {
  const auto info = cuda_graph_backend_info();
  const auto cpu = model("tiny", at::kFloat, "cpu");
  auto create = [&](std::map<std::string, std::string> o) {
    return error_of([&] { info.create(cpu, BackendOptions("cuda_graph", std::move(o))); });
  };
  EXPECT_THAT(create({{"buckets", "1,two"}}), HasSubstr("option 'buckets': expected comma-separated positive"));
  EXPECT_THAT(create({{"buckets", "0"}}), HasSubstr("option 'buckets'"));
  EXPECT_THAT(create({{"step", "script"}}), HasSubstr("option 'step': expected one of eager, trace"));
  EXPECT_THAT(create({}), HasSubstr("needs the model on a CUDA device; set model.device: cuda (found cpu)"));
  EXPECT_THAT(create({{"capture", "maybe"}}), HasSubstr("option 'capture'"));
  EXPECT_EQ(create({{"capture", "false"}}), "<no error>");
}

class CudaGraphGpu : public ::testing::TestWithParam<std::tuple<std::string, at::ScalarType>> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaGraphGpu, SameTokensAsEagerAndTrace) {
  const auto& [which, dtype] = GetParam();
  register_builtin_backends();
  const auto m = model(which, dtype, "cuda");
  auto& reg = BackendRegistry::instance();
  std::vector<std::pair<std::string, std::unique_ptr<ForwardBackend>>> backends;
  backends.emplace_back("eager", reg.create("eager", m, BackendOptions("eager", {})));
  backends.emplace_back("trace", reg.create("trace", m, BackendOptions("trace", {})));
  backends.emplace_back("cuda_graph", reg.create("cuda_graph", m, BackendOptions("cuda_graph", {})));
  backends.emplace_back("cuda_graph_trace",
                        reg.create("cuda_graph", m, BackendOptions("cuda_graph", {{"step", "trace"}})));
  const std::vector<std::vector<int64_t>> prompts = {{3, 4, 5, 6, 7, 8}, {9}, {10, 11, 12}};
  GenerationConfig greedy;
  greedy.max_new_tokens = 16;
  GenerationConfig sample = greedy;
  sample.do_sample = true;
  GenerationConfig beam = greedy;
  beam.num_beams = 4;
  beam.num_return_sequences = 2;
  for (const auto& [what, config] : {std::pair{"greedy", greedy}, std::pair{"sample", sample}, std::pair{"beam", beam}}) {
    std::vector<GenerationResult> results;
    for (auto& [name, b] : backends) {
      at::manual_seed(23);
      results.push_back(Generator(config, [] { synchronize(at::Device(at::kCUDA, 0)); }).generate(*b, prompts));
    }
    for (size_t k = 1; k < results.size(); ++k) {
      for (size_t i = 0; i < prompts.size(); ++i) {
        ASSERT_EQ(results[0].outputs[i].size(), results[k].outputs[i].size());
        for (size_t j = 0; j < results[0].outputs[i].size(); ++j) {
          EXPECT_EQ(results[0].outputs[i][j].tokens, results[k].outputs[i][j].tokens)
              << what << ": " << backends[k].first << " vs eager, input " << i << " sequence " << j;
        }
      }
    }
  }
  EXPECT_GE(backends[2].second->report().at("graphs"), 1.0);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaGraphGpu,
                         ::testing::Combine(::testing::Values("tiny", "gpt2-a", "gptj-a", "llama-a"),
                                            ::testing::Values(at::kFloat, at::kBFloat16)),
                         [](const auto& info) {
                           std::string m = std::get<0>(info.param);
                           std::replace(m.begin(), m.end(), '-', '_');
                           return m + (std::get<1>(info.param) == at::kFloat ? "_float32" : "_bfloat16");
                         });

TEST(CudaGraphGpuErrors, BucketsAndLengthLimitsNameTheOption) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  register_builtin_backends();
  const auto m = model("tiny", at::kFloat, "cuda");
  auto b = BackendRegistry::instance().create("cuda_graph", m,
                                              BackendOptions("cuda_graph", {{"buckets", "1,2"}, {"max_length", "12"}}));
  GenerationConfig g;
  g.max_new_tokens = 4;
  EXPECT_THAT(error_of([&] { Generator(g).generate(*b, {{1}, {2}, {3}}); }),
              HasSubstr("3 rows (batch x beams) exceed the largest bucket 2; add a larger one to the option 'buckets'"));
  g.max_new_tokens = 20;
  EXPECT_THAT(error_of([&] { Generator(g).generate(*b, {{1, 2}}); }),
              HasSubstr("raise the backend option 'max_length'"));
}

}  // namespace
}  // namespace gengraph
