// The aoti backend beyond conformance: the package cache, given packages, and every way a package
// or its export can be wrong. Each compile is slow (an AOTInductor build of the model), so one
// test builds one package and checks all that needs a fresh one.
#include <ATen/ATen.h>
#include <gengraph/cli.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "backends/aoti/aoti_step.h"
#include "backends/register_builtin.h"
#include "experiments/tools/process.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/model/loader.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using testing::TempDir;

std::shared_ptr<const CausalLM> tiny(uint64_t seed, nlohmann::json config = nullptr) {
  ModelSource s;
  s.preset = "gpt2-tiny";
  s.seed = seed;
  s.config_overrides = std::move(config);
  return load_model(s).model;
}

std::unique_ptr<ForwardBackend> make(const std::string& name, std::shared_ptr<const CausalLM> m,
                                     std::map<std::string, std::string> options = {}) {
  register_builtin_backends();
  install_aoti_export_tool();
  return BackendRegistry::instance().create(name, std::move(m),
                                            BackendOptions(name, std::move(options)));
}

std::vector<std::vector<int64_t>> tokens(const Generation& r) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& input : r.outputs) out.push_back(input.at(0).tokens);
  return out;
}

ResolvedSettings greedy(int64_t n) {
  ResolvedSettings g;
  g.max_new_tokens = n;
  return g;
}

const std::vector<std::vector<int64_t>> kPrompts = {{1, 2, 3, 4}, {5, 6}};

TEST(AotiBackend, BuildsOncePerWeightsReusesTheCacheAndRefusesWrongPackages) {
  TempDir dir;
  const auto m = tiny(5);
  const std::map<std::string, std::string> opts = {{"cache_dir", dir.path().string()},
                                                   {"max_rows", "2"}};
  auto first = make("aoti", m, opts);
  EXPECT_EQ(first->report().at("aoti_built"), 1.0);
  EXPECT_GT(first->report().at("aoti_compile_seconds"), 0.0);
  const auto reference = make("eager", m);
  const auto expected = tokens(Generator(greedy(6)).generate(*reference, kPrompts));
  EXPECT_EQ(tokens(Generator(greedy(6)).generate(*first, kPrompts)), expected);
  std::filesystem::path package;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    if (e.path().extension() == ".pt2") {
      EXPECT_TRUE(package.empty()) << "a second package " << e.path();
      package = e.path();
    }
  }
  ASSERT_FALSE(package.empty());

  // The same weights again: the cached package, with the build's recorded figures.
  auto second = make("aoti", m, opts);
  EXPECT_EQ(second->report().at("aoti_built"), 0.0);
  EXPECT_EQ(second->report().at("aoti_compile_seconds"),
            first->report().at("aoti_compile_seconds"));
  EXPECT_EQ(tokens(Generator(greedy(6)).generate(*second, kPrompts)), expected);

  // Given by path, in the uncaptured cuda_graph step as well.
  auto given = make("aoti", m, {{"package", package.string()}});
  EXPECT_EQ(tokens(Generator(greedy(6)).generate(*given, kPrompts)), expected);
  auto graph_step = make("cuda_graph", m,
                         {{"capture", "false"}, {"step", "aoti"}, {"package", package.string()}});
  EXPECT_EQ(tokens(Generator(greedy(6)).generate(*graph_step, kPrompts)), expected);

  // More rows than the package was built for.
  EXPECT_THAT(error_of([&] {
                Generator(greedy(2)).generate(*given, {{1}, {2}, {3}});
              }),
              HasSubstr("3 rows (batch x beams) exceed the package's bound 2"));

  // Other weights of the same shape: refused by fingerprint; another shape: by the field.
  EXPECT_THAT(error_of([&] {
                make("aoti", tiny(6), {{"package", package.string()}});
              }),
              HasSubstr("was made for model weights (fingerprint)"));
  EXPECT_THAT(error_of([&] {
                make("aoti", tiny(5, {{"n_layer", 3}}), {{"package", package.string()}});
              }),
              HasSubstr("was made for layers '2', but this run needs '3'"));

  // Not a package at all, or one cut short.
  const auto garbage = dir.path() / "garbage.pt2";
  std::ofstream(garbage) << "not a zip";
  EXPECT_THAT(error_of([&] {
                make("aoti", m, {{"package", garbage.string()}});
              }),
              HasSubstr("is not a readable AOTInductor package"));
  const auto cut = dir.path() / "cut.pt2";
  std::filesystem::copy_file(package, cut);
  std::filesystem::resize_file(cut, std::filesystem::file_size(package) / 2);
  EXPECT_THAT(error_of([&] {
                make("aoti", m, {{"package", cut.string()}});
              }),
              HasSubstr("cut.pt2"));
}

TEST(AotiBackend, OptionsAreCheckedBeforeAnyBuild) {
  TempDir dir;
  const auto m = tiny(5);
  EXPECT_THAT(
      error_of([&] {
        make("aoti", m, {{"package", (dir.path() / "none.pt2").string()}});
      }),
      HasSubstr("option 'package': '" + (dir.path() / "none.pt2").string() + "' does not exist"));
  const auto file = dir.path() / "file";
  std::ofstream(file) << "x";
  EXPECT_THAT(error_of([&] {
                make("aoti", m, {{"cache_dir", file.string()}});
              }),
              HasSubstr("option 'cache_dir': '" + file.string() + "' is not a folder"));
  EXPECT_THAT(error_of([&] {
                make("aoti", m, {{"cache_dir", dir.path().string()}, {"package", file.string()}});
              }),
              HasSubstr("options 'package' and 'cache_dir' exclude each other"));
  EXPECT_THAT(error_of([&] { make("aoti", m, {{"max_rows", "0"}}); }), HasSubstr("max_rows"));
  EXPECT_THAT(error_of([&] {
                make("cuda_graph", m, {{"capture", "false"}, {"package", file.string()}});
              }),
              HasSubstr("option 'package' applies to the aoti step; set step: aoti"));
}

TEST(AotiBackend, WithoutABuilderTheErrorSaysHowToGetAPackage) {
  TempDir dir;
  register_builtin_backends();
  set_aoti_package_builder(nullptr, "");
  const auto m = tiny(5);
  const std::string err = error_of([&] {
    BackendRegistry::instance().create(
        "aoti", m, BackendOptions("aoti", {{"cache_dir", dir.path().string()}}));
  });
  install_aoti_export_tool();
  EXPECT_THAT(err, HasSubstr("no package builder installed"));
  EXPECT_THAT(err, HasSubstr("option 'package'"));
}

// The exporter's failures reach the user with its reason: no compiler, a model it cannot load.
TEST(AotiBackend, ExportFailuresNameTheReason) {
  TempDir dir;
  const char* old = std::getenv("CXX");
  const std::string saved = old ? old : "";
  ::setenv("CXX", "/nonexistent/g++", 1);
  const std::string err = error_of([&] {
    make("aoti", tiny(5), {{"cache_dir", dir.path().string()}});
  });
  if (old) {
    ::setenv("CXX", saved.c_str(), 1);
  } else {
    ::unsetenv("CXX");
  }
  EXPECT_THAT(err, HasSubstr("AOTInductor export of the model from preset:gpt2-tiny failed"));
  EXPECT_THAT(err,
              HasSubstr("the C++ compiler '/nonexistent/g++' (CXX, default g++) was not found"));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()) ||
              std::none_of(std::filesystem::directory_iterator(dir.path()),
                           std::filesystem::directory_iterator{},
                           [](const auto& e) { return e.path().extension() == ".pt2"; }))
      << "a failed export left a package";

  const auto folder = dir.path() / "odd";
  std::filesystem::create_directories(folder);
  std::ofstream(folder / "config.json") << R"({"model_type": "no_such_architecture"})";
  const auto r = run_captured({python_for_tools().string(),
                               (source_root() / "tools" / "export_aoti.py").string(), "--model",
                               folder.string(), "--out", (dir.path() / "odd.pt2").string()});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("export_aoti: transformers cannot load '" + folder.string() + "'"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "odd.pt2"));
}

}  // namespace
}  // namespace gengraph
