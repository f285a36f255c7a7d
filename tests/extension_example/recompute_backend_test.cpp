#include "recompute_backend.h"

#include <gtest/gtest.h>

#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/model/loader.h"

TEST(RecomputeBackend, RegisteredAndTokenIdenticalToEager) {
  gengraph::register_builtin_backends();
  example::register_recompute_backend();
  auto& registry = gengraph::BackendRegistry::instance();
  ASSERT_TRUE(registry.contains("recompute"));
  gengraph::ModelSource src;
  src.preset = "gpt2-tiny";
  const auto model = gengraph::load_model(src).model;
  gengraph::GenerationConfig g;
  g.max_new_tokens = 10;
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3, 4}, {5}};
  auto eager = registry.create("eager", model, gengraph::BackendOptions("eager", {}));
  auto recompute = registry.create("recompute", model, gengraph::BackendOptions("recompute", {}));
  const auto a = gengraph::Generator(g).generate(*eager, prompts);
  const auto b = gengraph::Generator(g).generate(*recompute, prompts);
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(a.outputs[i][0].tokens, b.outputs[i][0].tokens);
}
