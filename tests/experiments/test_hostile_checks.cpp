// Hostile and careless input, second pass (issue 25): one test per defect class
// (docs/reliability.md).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "backends/aoti/aoti_package.h"
#include "experiments/cluster/slurm_job.h"
#include "framework/model/model_config.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using namespace testing::cli_names;  // NOLINT(build/namespaces)

// `validate` said "valid" for settings that `run` then refused, and `submit` queued such jobs
// (every task failed). It now resolves the settings and builds the decoding pipeline as `run`
// does, before any weight is loaded.
TEST(HostileChecks, ValidateRefusesWhatRunRefuses) {
  TempDir dir;
  const std::string head =
      "model: {preset: gpt2-tiny}\nbackends: [eager]\ninputs: {prompts: [[1, 2, 3]]}\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"generation: {processors: [{name: no_such_processor}]}", "no_such_processor"},
      {"generation: {stopping_criteria: [{name: no_such_criterion}]}", "no_such_criterion"},
      {"generation: {strategy: {name: no_such_strategy}}", "no_such_strategy"},
      {"generation: {do_sample: true, processors: [{name: top_p, top_p: .nan}]}", "top_p"},
      {"generation: {do_sample: true, processors: [{name: top_p, top_p: [1]}]}", "top_p"},
      {"generation: {processors: [{name: temperature, temperature: hot}]}", "temperature"},
      {"generation: {num_beams: 2, num_return_sequences: 3}", "num_return_sequences"},
      {"generation: {num_beams: 5, num_beam_groups: 2, diversity_penalty: 0.5}", "num_beam_groups"},
  };
  for (const auto& [generation, needle] : cases) {
    SCOPED_TRACE(generation);
    write_file(dir / "e.yaml", head + generation + "\n");
    const std::string out = (dir / "out.json").string();
    auto [run_rc, run_err] =
        testing::cli_stderr({"run", (dir / "e.yaml").string(), "--quiet", "--output", out});
    auto [rc, err] = testing::cli_stderr({"validate", (dir / "e.yaml").string()});
    EXPECT_EQ(run_rc, 1) << run_err;
    EXPECT_EQ(rc, 1) << err;
    EXPECT_THAT(err, HasSubstr(needle));
    EXPECT_THAT(err, HasSubstr("e.yaml"));
    EXPECT_FALSE(std::filesystem::exists(out));
  }
  // What is valid stays valid.
  write_file(dir / "ok.yaml", head +
                                  "generation: {num_beams: 4, num_beam_groups: 2, "
                                  "diversity_penalty: 0.5, num_return_sequences: 2}\n");
  EXPECT_EQ(cli({"validate", (dir / "ok.yaml").string()}), 0);
}

// A folder's generation_config.json is part of the settings `run` uses: validate reads it too.
TEST(HostileChecks, ValidateReadsTheFoldersGenerationConfig) {
  TempDir dir;
  std::filesystem::copy(testing::fixtures_dir() + "/models/gpt2-a", dir / "m",
                        std::filesystem::copy_options::recursive);
  write_file(dir / "m" / "generation_config.json",
             R"({"num_beams": 2, "num_return_sequences": 4})");
  write_file(dir / "e.yaml", "model: {path: " + (dir / "m").string() +
                                 "}\nbackends: [eager]\ninputs: {prompts: [[1, 2]]}\n");
  auto [rc, err] = testing::cli_stderr({"validate", (dir / "e.yaml").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("num_return_sequences"));
  write_file(dir / "m" / "generation_config.json", R"({"num_beams": 2})");
  EXPECT_EQ(cli({"validate", (dir / "e.yaml").string()}), 0);
  write_file(dir / "m" / "generation_config.json", R"([1, 2])");
  std::tie(rc, err) = testing::cli_stderr({"validate", (dir / "e.yaml").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("generation_config.json': expected a JSON object"));
}

// The job.json fuzz target starts from a manifest the check accepts, so the fuzzer explores past
// the first refusal; its damaged neighbours in the corpus are refused, each naming a key.
TEST(HostileChecks, TheJobJsonSeedIsAcceptedAndItsDamagedNeighboursAreNamed) {
  const std::filesystem::path dir =
      std::filesystem::path(GENGRAPH_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / "job_json";
  EXPECT_NO_THROW(check_job_manifest(read_json_file(dir / "valid"), "job.json"));
  for (const char* name : {"swapped_points", "extra_point", "points_not_array", "missing_cwd",
                           "long_job_id", "newline_in_cwd", "override_without_value"}) {
    SCOPED_TRACE(name);
    const std::string err =
        testing::error_of([&] { check_job_manifest(read_json_file(dir / name), "job.json"); });
    EXPECT_THAT(err, HasSubstr("job.json"));
    EXPECT_NE(err, "");
  }
}

// The same for the aoti package fuzz target (seeds from tools/make_aoti_fuzz_seeds.py): a package
// laid out as tools/export_aoti.py lays it out passes the check; each damaged neighbour is
// refused naming the file, before anything could load it.
TEST(HostileChecks, TheAotiPackageSeedIsAcceptedAndItsDamagedNeighboursAreRefused) {
  const std::filesystem::path dir =
      std::filesystem::path(GENGRAPH_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / "aoti_package";
  EXPECT_NO_THROW(check_aoti_package(dir / "valid"));
  EXPECT_NO_THROW(check_aoti_package(dir / "no_manifest"));
  for (const char* name :
       {"truncated_half", "truncated_directory", "so_bytes_changed", "so_truncated_in_zip",
        "so_compressed", "entry_outside_package", "metadata_not_strings", "not_a_zip"}) {
    SCOPED_TRACE(name);
    const std::string err = testing::error_of([&] { check_aoti_package(dir / name); });
    EXPECT_THAT(err, HasSubstr((dir / name).string()));
  }
}

// Finite weights whose forward overflows (a preset drawn with initializer_range 1e30) gave [0]
// tokens and -nan scores with exit 0: the prompts' logits are checked for NaN, once per generation.
TEST(HostileChecks, LogitsThatOverflowToNaNAreAnErrorNotGarbage) {
  TempDir dir;
  for (const char* generation : {"{max_new_tokens: 3}", "{max_new_tokens: 3, num_beams: 2}",
                                 "{max_new_tokens: 3, do_sample: true}"}) {
    SCOPED_TRACE(generation);
    write_file(dir / "e.yaml",
               std::string("model: {preset: gpt2-tiny, config: {initializer_range: 1.0e30}}\n"
                           "backends: [eager]\ninputs: {prompts: [[1, 2, 3]]}\ngeneration: ") +
                   generation + "\nrun: {warmup: 0, repeats: 1}\n");
    const std::string out = (dir / "out.json").string();
    auto [rc, err] =
        testing::cli_stderr({"run", (dir / "e.yaml").string(), "--quiet", "--output", out});
    EXPECT_EQ(rc, 1);
    EXPECT_THAT(err, HasSubstr("the model's logits for the prompts hold NaN values"));
    EXPECT_FALSE(std::filesystem::exists(out));
  }
}

// Backend options: a number too large is said to be too large, not malformed.
TEST(HostileChecks, ABackendOptionTooLargeIsSaidToBe) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"99999999999999999999",
       "option 'max_rows': too large (the most is 1048576), found "
       "'99999999999999999999'"},
      {"2000000", "option 'max_rows': too large (the most is 1048576), found '2000000'"},
      {"1", "option 'max_rows': expected an integer in [2, 1048576], found '1'"},
      {"12x", "option 'max_rows': expected an integer in [2, 1048576], found '12x'"},
  };
  for (const auto& [value, needle] : cases) {
    SCOPED_TRACE(value);
    write_file(dir / "e.yaml",
               "model: {preset: gpt2-tiny}\nbackends: [{name: aoti, options: "
               "{max_rows: '" +
                   value + "'}}]\ninputs: {prompts: [[1, 2]]}\n");
    auto [rc, err] = testing::cli_stderr({"validate", (dir / "e.yaml").string()});
    EXPECT_EQ(rc, 1);
    EXPECT_THAT(err, HasSubstr(needle));
  }
}

// `generate --model preset:NAME` always means the preset; an unknown one is named.
TEST(HostileChecks, GenerateTakesPresetColonName) {
  TempDir dir;
  const std::string out = (dir / "g.json").string();
  auto [rc, err] = testing::cli_stderr({"generate", "--model", "preset:gpt2-tiny", "--prompt",
                                        "1,2", "--max-new-tokens", "2", "--output", out});
  EXPECT_EQ(rc, 0) << err;
  EXPECT_TRUE(std::filesystem::exists(out));
  std::tie(rc, err) = testing::cli_stderr({"generate", "--model", "preset:gpt2-nope", "--prompt",
                                           "1,2", "--output", (dir / "h.json").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("gpt2-nope"));
}

}  // namespace
}  // namespace gengraph
