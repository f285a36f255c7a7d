// Hostile and careless input, one test per defect class (docs/reliability.md): each gives exit 1
// or 2 with a message naming the input, at once and in bounded memory; nothing is left
// half-written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>

#include "experiments/results/compare.h"
#include "framework/model/loader.h"
#include "framework/model/safetensors.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using namespace testing::cli_names;  // NOLINT(build/namespaces)

const std::string kQuickstart =
    std::string(GENGRAPH_SOURCE_DIR) + "/configs/quickstart-random.yaml";

TEST(HostileInput, YamlAliasesThatReferToThemselvesOrExplodeAreRefused) {
  TempDir dir;
  // An alias inside the node it names: an endless document (segfaulted before).
  write_file(dir / "self.yaml", "model: {preset: gpt2-tiny}\nfoo: &a [*a]\n");
  auto [rc, err] = testing::cli_stderr({"validate", (dir / "self.yaml").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("self.yaml:2:6: an alias refers to a node that contains it"));
  // The same in a --set value.
  std::tie(rc, err) = testing::cli_stderr(
      {"validate", (dir / "self.yaml").string(), "--set", "generation.suppress_tokens=&b [*b]"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("an alias refers to a node that contains it"));
  // "Billion laughs": ten levels of ten aliases, 10^10 nodes from a 400-byte file.
  std::string bomb = "model: {preset: gpt2-tiny}\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 10; ++i) {
    const std::string p = "*a" + std::to_string(i - 1);
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + p;
    for (int k = 1; k < 10; ++k) bomb += ", " + p;
    bomb += "]\n";
  }
  write_file(dir / "bomb.yaml", bomb);
  const auto t0 = std::chrono::steady_clock::now();
  std::tie(rc, err) = testing::cli_stderr({"validate", (dir / "bomb.yaml").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("the document expands to more than 200000 nodes"));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
  // Deep nesting.
  write_file(dir / "deep.yaml", "model: {preset: gpt2-tiny}\nx: " + std::string(100, '[') +
                                    std::string(100, ']') + "\n");
  std::tie(rc, err) = testing::cli_stderr({"validate", (dir / "deep.yaml").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("nested more than 64 levels deep"));
}

// yaml-cpp loops without end on some inputs with control characters (fuzzing found a 72-byte
// file); YAML does not allow them, and they are refused before parsing.
TEST(HostileInput, ControlCharactersAreRefusedBeforeParsing) {
  TempDir dir;
  write_file(dir / "c.yaml", std::string("model: {preset: gpt2-tiny}\nx: a\0b\n", 34));
  auto [rc, err] = testing::cli_stderr({"validate", (dir / "c.yaml").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("c.yaml:2:5: expected printable YAML text, found the control "
                             "character 0x00"));
  std::tie(rc, err) =
      testing::cli_stderr({"validate", kQuickstart, "--set", std::string("run.seed=1\x07")});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("found the control character 0x07"));
}

// yaml-cpp 0.7 loops without end, allocating, on some malformed flow collections (fuzzing found
// this 43-byte one); a dry run of the parser with an event budget refuses it in milliseconds.
TEST(HostileInput, TextOnWhichTheYamlParserWouldNotEndIsRefused) {
  TempDir dir;
  write_file(dir / "h.yaml", ",&o\nfoo [*a]\nmodel:\n{pr*eset: gpt1-tina}y]\n");
  auto [rc, err] = testing::cli_stderr({"validate", (dir / "h.yaml").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("h.yaml: malformed YAML: the parser does not come to an end"));
}

TEST(HostileInput, AMultiDocumentSetValueIsRefusedNotTruncated) {
  auto [rc, err] = testing::cli_stderr(
      {"validate", kQuickstart, "--set", "generation.max_new_tokens=4\n---\n8"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("expected one YAML value, found 2 documents"));
}

TEST(HostileInput, SpecialFilesAreRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo.yaml").c_str(), 0600), 0);
  auto [rc, err] = testing::cli_stderr({"run", (dir / "fifo.yaml").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("is not a regular file (a FIFO, device or socket)"));
  // A model folder whose weights file is a FIFO: refused, not waited on.
  std::filesystem::create_directories(dir / "m");
  std::filesystem::copy_file(testing::fixtures_dir() + "/models/gpt2-a/config.json",
                             dir / "m" / "config.json");
  ASSERT_EQ(::mkfifo((dir / "m" / "model.safetensors").c_str(), 0600), 0);
  std::tie(rc, err) = testing::cli_stderr(
      {"generate", "--model", (dir / "m").string(), "--prompt", "1", "--quiet"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("model.safetensors': is not a regular file"));
  // A results file that is a device.
  std::tie(rc, err) = testing::cli_stderr({"show", "/dev/zero"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("'/dev/zero' is not a regular file"));
}

TEST(HostileInput, AbsurdSizesAreRefusedByAnEstimateBeforeAnyAllocation) {
  // A million layers, a billion beams, a long context for a big batch: legal numbers, refused in
  // validation with the estimate and the setting to change, nothing allocated.
  auto [rc, err] = testing::cli_stderr(
      {"validate", kQuickstart, "--set", "model.config={n_layer: 100000000, n_embd: 4096}"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("this experiment (weights "));
  EXPECT_THAT(err, HasSubstr("available on cpu; lower inputs"));
  std::tie(rc, err) =
      testing::cli_stderr({"validate", kQuickstart, "--set", "generation.num_beams=1000000000",
                           "--set", "generation.max_new_tokens=16"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("generation.num_beams"));
  // The same model through the API is refused at load, naming the preset.
  EXPECT_THAT(testing::error_of([] {
                ModelSource s;
                s.preset = "gpt2-tiny";
                s.config_overrides = {{"n_layer", 100000000}, {"n_embd", 4096}};
                load_model(s);
              }),
              HasSubstr("the weights of preset:gpt2-tiny needs about"));
}

TEST(HostileInput, AMillionMissingTensorsAreCountedNotListed) {
  TempDir dir;
  std::filesystem::create_directories(dir / "m");
  auto cfg = nlohmann::json::parse(
      testing::read_file(testing::fixtures_dir() + "/models/gpt2-a/config.json"));
  cfg["n_layer"] = 200000;
  write_file(dir / "m" / "config.json", cfg.dump());
  std::filesystem::copy_file(testing::fixtures_dir() + "/models/gpt2-a/model.safetensors",
                             dir / "m" / "model.safetensors");
  auto [rc, err] = testing::cli_stderr(
      {"generate", "--model", (dir / "m").string(), "--prompt", "1", "--quiet"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("missing tensor(s): "));
  EXPECT_THAT(err, ::testing::ContainsRegex("and [0-9]+ more"));
  EXPECT_LT(err.size(), 10000u);
}

TEST(HostileInput, NumbersTheJsonCannotHoldAndNonFiniteValuesAreNamed) {
  TempDir dir;
  write_file(dir / "r.json", R"({"schema_version": 1, "runs": [], "x": 1e999})");
  auto [rc, err] = testing::cli_stderr({"show", (dir / "r.json").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("r.json' is not valid JSON"));
  std::tie(rc, err) =
      testing::cli_stderr({"validate", kQuickstart, "--set", "generation.length_penalty=.nan"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("'length_penalty': expected a number, found NaN"));
  std::tie(rc, err) =
      testing::cli_stderr({"validate", kQuickstart, "--set", "generation.temperature=-.inf"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("found -Infinity"));
}

TEST(HostileInput, EmptyFlagValuesAreUsageErrors) {
  auto [rc, err] =
      testing::cli_stderr({"generate", "--model", "gpt2-tiny", "--prompt", "1", "--output", ""});
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(err, HasSubstr("option --output needs a value, found an empty one"));
}

TEST(HostileInput, WriteFailuresGiveTheSystemsReason) {
  auto [rc, err] = testing::cli_stderr(
      {"generate", "--model", "gpt2-tiny", "--prompt", "1", "--quiet", "--output", "/dev/full"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("writing results '/dev/full' failed: No space left on device"));
}

// A trace cache on a full disk: an error naming the file and the reason, no 0-byte .tmp left
// (LibTorch's writer aborted the process before). Needs a small tmpfs, i.e. root.
TEST(HostileInput, ATraceCacheOnAFullDiskFailsCleanly) {
  TempDir dir;
  const auto mnt = dir / "full";
  std::filesystem::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) {
    GTEST_SKIP() << "cannot mount a 64 KB tmpfs here (needs root): " << std::strerror(errno);
  }
  struct Unmount {
    std::filesystem::path p;
    ~Unmount() { ::umount(p.c_str()); }
  } unmount{mnt};
  write_file(dir / "t.yaml",
             "model: {preset: gpt2-tiny}\nbackends: [{name: trace, options: "
             "{cache_dir: '" +
                 mnt.string() +
                 "'}}]\ninputs: {prompts: [[1, 2]]}\n"
                 "generation: {max_new_tokens: 2}\nrun: {warmup: 0, repeats: 1}\n");
  auto [rc, err] = testing::cli_stderr(
      {"run", (dir / "t.yaml").string(), "--quiet", "--output", (dir / "o.json").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("writing the trace cache file"));
  EXPECT_THAT(err, HasSubstr("No space left on device"));
  for (const auto& e : std::filesystem::directory_iterator(mnt)) ADD_FAILURE() << "left " << e;
  EXPECT_FALSE(std::filesystem::exists(dir / "o.json"));
}

TEST(HostileInput, CompareIsNotQuadraticInRows) {
  // 50,000 rows a side: quadratic matching would take minutes; it must finish well inside the
  // test's time limit.
  nlohmann::json doc = {{"schema_version", 1}, {"runs", nlohmann::json::array()}};
  for (int i = 0; i < 50000; ++i) {
    doc["runs"].push_back(
        {{"label", "r" + std::to_string(i)},
         {"timings", {{"total_ms", {{"values", {1.0 + i % 7, 2.0, 3.0}}, {"median", 2.0}}}}}});
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto c = compare_documents(doc, "a.json", doc, "b.json", "total_ms");
  ASSERT_EQ(c["points"][0]["rows"].size(), 50000u);
  EXPECT_EQ(c["points"][0]["rows"][49999]["status"], "compared");
  RecordProperty(
      "compare_seconds",
      std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
}

TEST(HostileInput, ATiedConfigOverADifferentStoredHeadIsUntiedAsTransformersDoes) {
  TempDir dir;
  ModelSource src;
  src.preset = "gpt2-tiny";
  const LoadedModel tied = load_model(src);
  save_model_folder(tied, dir / "m");
  // The folder's config ties the head (GPT-2's default); store a different lm_head.weight.
  std::vector<std::pair<std::string, at::Tensor>> tensors(tied.model->weights().begin(),
                                                          tied.model->weights().end());
  const at::Tensor wte = tied.model->weights().at("transformer.wte.weight");
  const at::Tensor head = wte.flip(0).contiguous();
  tensors.emplace_back("lm_head.weight", head);
  write_safetensors(dir / "m" / "model.safetensors", tensors);
  ModelSource folder;
  folder.path = dir / "m";
  const LoadedModel untied = load_model(folder);
  ASSERT_EQ(untied.warnings.size(), 1u);
  EXPECT_THAT(untied.warnings[0], HasSubstr("it is used untied, as transformers does"));
  ASSERT_TRUE(untied.model->weights().count("lm_head.weight"));
  EXPECT_TRUE(at::equal(untied.model->weights().at("lm_head.weight"), head));
  // A stored head equal to the embedding stays tied, without a word.
  tensors.back().second = wte.clone();
  write_safetensors(dir / "m" / "model.safetensors", tensors);
  const LoadedModel still_tied = load_model(folder);
  EXPECT_TRUE(still_tied.warnings.empty());
  EXPECT_FALSE(still_tied.model->weights().count("lm_head.weight"));
}

}  // namespace
}  // namespace gengraph
