#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <optional>
#include <thread>

#include "framework/decoding/generation_config.h"
#include "tests/test_util.h"

namespace gengraph {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::write_file;

using testing::cli;

TEST(Cli, RunWritesResultsWithTokensTimingsAndEnvironment) {
  TempDir dir;
  write_file(dir / "e.yaml", R"(model: {preset: gpt2-tiny}
backends: [eager, {name: eager, label: static, options: {cache: static}}]
inputs: {prompts: [[1, 2, 3], [4, 5]]}
generation: {max_new_tokens: 4}
run: {warmup: 0, repeats: 2}
)");
  const auto out = dir / "r" / "e.json";
  ASSERT_EQ(cli({"run", (dir / "e.yaml").string(), "--output", out.string(), "--quiet"}), 0);
  const auto doc = nlohmann::json::parse(testing::read_file(out));
  ASSERT_EQ(doc["runs"].size(), 2u);
  for (const auto& r : doc["runs"]) {
    EXPECT_EQ(r["outputs"].size(), 2u);
    EXPECT_EQ(r["outputs"][0]["sequences"][0]["tokens"].size(), 4u);
    EXPECT_EQ(r["timings"]["total_ms"]["values"].size(), 2u);
    EXPECT_TRUE(r["deterministic_across_repeats"].get<bool>());
  }
  EXPECT_EQ(doc["runs"][0]["outputs"], doc["runs"][1]["outputs"]);
  EXPECT_EQ(doc["config"]["text"], testing::read_file(dir / "e.yaml"));
  EXPECT_EQ(doc["config"]["overrides"], nlohmann::json::array());
  EXPECT_EQ(doc["environment"]["torch_version"], "2.11.0");
  EXPECT_FALSE(doc["environment"]["gengraph_commit"].get<std::string>().empty());
  // `show` prints the same table from the file.
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(cli({"show", out.string()}), 0);
  const std::string table = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(table, HasSubstr("experiment e"));
  EXPECT_THAT(table, HasSubstr("static"));
  EXPECT_THAT(table, HasSubstr("decode ms/token"));
}

// "same tokens" compares tokens: in bfloat16 two correct backends can keep the same beams with
// scores that differ in the last bits (seen on the GPU: trace's fused kernels), so a score
// difference is reported beside it, not as a mismatch; a different token is one.
TEST(Cli, SameTokensComparesTokensAndReportsTheScoreDifference) {
  TempDir dir;
  write_file(dir / "e.yaml", R"(model: {preset: gpt2-tiny}
backends: [eager, {name: eager, label: static, options: {cache: static}}]
inputs: {prompts: [[1, 2, 3], [4, 5]]}
generation: {max_new_tokens: 4, num_beams: 2, num_return_sequences: 2}
run: {warmup: 0, repeats: 1}
)");
  const auto out = dir / "e.json";
  ASSERT_EQ(cli({"run", (dir / "e.yaml").string(), "--output", out.string(), "--quiet"}), 0);
  auto doc = nlohmann::json::parse(testing::read_file(out));
  ASSERT_EQ(doc["runs"].size(), 2u);
  EXPECT_TRUE(doc["runs"][1]["tokens_match_first_row"].get<bool>());
  ASSERT_TRUE(doc["runs"][1].contains("max_score_difference_to_first_row"));
  EXPECT_LT(doc["runs"][1]["max_score_difference_to_first_row"].get<double>(), 1e-4);
  auto show = [&](const nlohmann::json& d) {
    write_file(dir / "s.json", d.dump());
    ::testing::internal::CaptureStdout();
    EXPECT_EQ(cli({"show", (dir / "s.json").string()}), 0);
    const std::string table = ::testing::internal::GetCapturedStdout();
    const auto at = table.find("\nstatic ");
    return at == std::string::npos ? table
                                   : table.substr(at + 1, table.find('\n', at + 1) - at - 1);
  };
  // A score 0.25 off, with a stale flag from a file written when the flag compared scores too.
  auto d = doc;
  auto& seq = d["runs"][1]["outputs"][1]["sequences"][1];
  seq["score"] = seq["score"].get<double>() + 0.25;
  d["runs"][1]["tokens_match_first_row"] = false;
  EXPECT_THAT(show(d), HasSubstr("yes (scores +-2.5e-01)"));
  // One token changed is a mismatch.
  d = doc;
  auto& tok = d["runs"][1]["outputs"][1]["sequences"][1]["tokens"][2];
  tok = tok.get<int64_t>() + 1;
  EXPECT_THAT(show(d), ::testing::EndsWith("NO"));
}

// run.bandwidth: the device's read (matrix-vector) and copy bandwidth are measured in the run, and
// each row's decode traffic (at least every weight once per step) is reported as a fraction of
// both.
TEST(Cli, BandwidthIsMeasuredAndDecodeTrafficIsReportedAgainstIt) {
  TempDir dir;
  write_file(dir / "e.yaml", R"(model: {preset: gpt2-tiny}
inputs: {prompts: [[1, 2, 3]]}
generation: {max_new_tokens: 4}
run: {warmup: 0, repeats: 1, bandwidth: true}
)");
  const auto out = dir / "e.json";
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(cli({"run", (dir / "e.yaml").string(), "--output", out.string()}), 0);
  const std::string table = ::testing::internal::GetCapturedStdout();
  auto doc = nlohmann::json::parse(testing::read_file(out));
  const double read = doc["bandwidth"]["read_bytes_per_second"].get<double>();
  const double copy = doc["bandwidth"]["copy_bytes_per_second"].get<double>();
  EXPECT_GT(read, 1e8);
  EXPECT_GT(copy, 1e8);
  const auto& bw = doc["runs"][0]["bandwidth"];
  const double bytes = bw["bytes_per_decode_step"].get<double>();
  EXPECT_GE(bytes, 4.0 * doc["model"]["parameters"].get<double>());
  const double achieved = bw["achieved_bytes_per_second"].get<double>();
  EXPECT_NEAR(bw["fraction_of_read_bandwidth"].get<double>(), achieved / read,
              1e-9 * achieved / read);
  EXPECT_NEAR(bw["fraction_of_copy_bandwidth"].get<double>(), achieved / copy,
              1e-9 * achieved / copy);
  EXPECT_THAT(table, HasSubstr("measured bandwidth: read (mv) "));
  EXPECT_THAT(table, HasSubstr("% of the measured read (mv) bandwidth, "));
  // A results file from before the read measurement (copy only) still shows.
  doc["bandwidth"].erase("read_bytes_per_second");
  doc["runs"][0]["bandwidth"].erase("fraction_of_read_bandwidth");
  write_file(dir / "old.json", doc.dump());
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(cli({"show", (dir / "old.json").string()}), 0);
  const std::string old_table = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(old_table, HasSubstr("measured bandwidth: copy "));
  EXPECT_THAT(old_table, HasSubstr("% of the copy bandwidth"));
  EXPECT_THAT(old_table, ::testing::Not(HasSubstr("read bandwidth")));
}

// Ratios to the baseline pair repeat i of each row with repeat i of the baseline (they ran back to
// back), and come with a distribution-free interval for the median ratio.
TEST(Cli, RatiosToTheBaselineArePairedByRepeatWithAnOrderStatisticInterval) {
  TempDir dir;
  write_file(dir / "e.yaml", R"(model: {preset: gpt2-tiny}
backends: [{name: eager, label: grow}, {name: eager, label: static, options: {cache: static}}]
inputs: {prompts: [[1, 2, 3]]}
generation: {max_new_tokens: 3}
run: {warmup: 0, repeats: 10}
baseline: static
)");
  const auto out = dir / "e.json";
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(cli({"run", (dir / "e.yaml").string(), "--output", out.string()}), 0);
  const std::string table = ::testing::internal::GetCapturedStdout();
  const auto doc = nlohmann::json::parse(testing::read_file(out));
  const auto& grow = doc["runs"][0];
  const auto& base = doc["runs"][1];
  EXPECT_EQ(base["vs_baseline"]["median"].get<double>(), 1.0);
  EXPECT_EQ(base["vs_baseline"]["low"].get<double>(), 1.0);
  std::vector<double> ratios;
  for (size_t i = 0; i < 10; ++i) {
    ratios.push_back(base["timings"]["total_ms"]["values"][i].get<double>() /
                     grow["timings"]["total_ms"]["values"][i].get<double>());
  }
  std::sort(ratios.begin(), ratios.end());
  const auto& v = grow["vs_baseline"];
  EXPECT_EQ(v["baseline"], "static");
  EXPECT_DOUBLE_EQ(v["median"].get<double>(), 0.5 * (ratios[4] + ratios[5]));
  // n = 10: P(Binomial(10, 1/2) <= 1) = 11/1024, so [r(2), r(9)] covers 1 - 22/1024 >= 95%;
  // [r(3), r(8)] would cover only 1 - 112/1024.
  EXPECT_DOUBLE_EQ(v["low"].get<double>(), ratios[1]);
  EXPECT_DOUBLE_EQ(v["high"].get<double>(), ratios[8]);
  EXPECT_DOUBLE_EQ(v["confidence"].get<double>(), 1 - 22.0 / 1024);
  EXPECT_THAT(table, HasSubstr("97.9% confidence"));
  EXPECT_THAT(table, HasSubstr("vs static"));
}

// Texts in and out through the model folder's own tokenizer: a word-level test tokenizer where
// token i >= 2 is the word "w<i>" (0 is "<eos>", 1 "<unk>"), so what encoding and decoding must
// give is known exactly.
TEST(Cli, TextsAreEncodedAndOutputsDecodedWithTheFoldersTokenizer) {
  TempDir dir;
  const auto folder = dir / "model";
  const int vocab =
      nlohmann::json::parse(testing::read_file(std::filesystem::path(testing::fixtures_dir()) /
                                               "models" / "gpt2-a" / "config.json"))["vocab_size"]
          .get<int>();
  testing::make_folder_with_test_tokenizer("gpt2-a", folder, vocab);
  const auto text_out = dir / "t.json", ids_out = dir / "i.json";
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(cli({"generate", "--model", folder.string(), "--text", "w5 w7 w9", "--text", "w12",
                 "--max-new-tokens", "4", "--output", text_out.string(), "--quiet"}),
            0);
  const std::string table = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(cli({"generate", "--model", folder.string(), "--prompt", "5,7,9", "--prompt", "12",
                 "--max-new-tokens", "4", "--output", ids_out.string(), "--quiet"}),
            0);
  const auto t = nlohmann::json::parse(testing::read_file(text_out));
  const auto i = nlohmann::json::parse(testing::read_file(ids_out));
  EXPECT_EQ(t["inputs"]["prompts"], nlohmann::json::parse("[[5, 7, 9], [12]]"));
  EXPECT_EQ(t["inputs"]["texts"], nlohmann::json::parse(R"(["w5 w7 w9", "w12"])"));
  // The same generation as from the ids, and each output's text is its tokens as words.
  for (size_t k = 0; k < 2; ++k) {
    const auto& seq = t["runs"][0]["outputs"][k]["sequences"][0];
    EXPECT_EQ(seq["tokens"], i["runs"][0]["outputs"][k]["sequences"][0]["tokens"]);
    std::string words;
    for (const auto& id : seq["tokens"]) {
      const int64_t v = id.get<int64_t>();
      words += (words.empty() ? "" : " ") + (v == 0   ? std::string("<eos>")
                                             : v == 1 ? "<unk>"
                                                      : "w" + std::to_string(v));
    }
    EXPECT_EQ(seq["text"], words);
    EXPECT_THAT(table, HasSubstr("text: \"" + words + "\""));
  }
  EXPECT_FALSE(i["runs"][0]["outputs"][0]["sequences"][0].contains("text"));

  // tokenizer.json alone is read as itself (AutoTokenizer would guess GPT-2's BPE from
  // config.json).
  std::filesystem::remove(folder / "tokenizer_config.json");
  ASSERT_EQ(cli({"generate", "--model", folder.string(), "--text", "w5 <eos> w6",
                 "--max-new-tokens", "1", "--output", text_out.string(), "--quiet"}),
            0);
  EXPECT_EQ(nlohmann::json::parse(testing::read_file(text_out))["inputs"]["prompts"],
            nlohmann::json::parse("[[5, 0, 6]]"));
}

// A tokenizer that does not match the model: ids beyond the model's vocabulary when encoding,
// beyond the tokenizer's when decoding.
TEST(Cli, ATokenizerThatDoesNotMatchTheModelIsRefused) {
  TempDir dir;
  const std::string root = GENGRAPH_SOURCE_DIR;
  const std::string python = root + "/.venv/bin/python";
  auto make = [&](const std::string& name, int vocab) {
    testing::make_folder_with_test_tokenizer("gpt2-a", dir / name, vocab);
    return dir / name;
  };
  const auto big = make("big", 200);  // the model has 96 tokens
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"generate", "--model", big.string(), "--text", "w5 w150", "--quiet"}), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("inputs.texts[0]: the tokenizer in '" + big.string() +
                        "' gave token id 150, outside the model's vocabulary [0, 96): the "
                        "tokenizer does not match the model"));
  const auto small = make("small", 20);
  write_file(dir / "req.json",
             nlohmann::json{{"model", small.string()}, {"decode", {{5, 50}}}}.dump());
  const int rc =
      std::system(("\"" + python + "\" \"" + root + "/tools/hf_tokenizer.py\" --request \"" +
                   (dir / "req.json").string() + "\" --out \"" + (dir / "out.json").string() +
                   "\" 2> \"" + (dir / "err.txt").string() + "\"")
                      .c_str());
  EXPECT_NE(rc, 0);
  EXPECT_THAT(testing::read_file(dir / "err.txt"),
              HasSubstr("token id 50 is outside the vocabulary of the tokenizer in '" +
                        small.string() + "' (20 tokens)"));
  EXPECT_FALSE(std::filesystem::exists(dir / "out.json"));
}

TEST(Cli, TextInputsNeedAFolderWithATokenizer) {
  TempDir dir;
  auto error_of_run = [&](const std::vector<std::string>& args) {
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(cli(args), 1);
    return ::testing::internal::GetCapturedStderr();
  };
  EXPECT_THAT(error_of_run({"generate", "--model", "gpt2-tiny", "--text", "hello", "--quiet"}),
              HasSubstr("inputs.texts: needs model.path, a folder with a Hugging Face tokenizer; "
                        "model.preset 'gpt2-tiny' has none"));
  const auto folder = std::filesystem::path(testing::fixtures_dir()) / "models" / "gpt2-a";
  EXPECT_THAT(error_of_run({"generate", "--model", folder.string(), "--text", "hello", "--quiet"}),
              HasSubstr("' has no tokenizer (expected tokenizer.json or tokenizer_config.json)"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(
      cli({"generate", "--model", folder.string(), "--text", "a", "--prompt", "1", "--quiet"}), 2);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("give --prompt IDS or --text TEXT (one or more of either, not both)"));
  write_file(dir / "e.yaml", "model: {preset: gpt2-tiny}\ninputs: {texts: [\"\"]}\n");
  EXPECT_THAT(error_of_run({"validate", (dir / "e.yaml").string()}),
              HasSubstr("inputs.texts[0]: expected a non-empty string"));
  write_file(dir / "f.yaml", "model: {preset: gpt2-tiny}\ninputs: {texts: [a], prompts: [[1]]}\n");
  EXPECT_THAT(
      error_of_run({"validate", (dir / "f.yaml").string()}),
      HasSubstr(
          "exactly one of inputs.prompts (token-id lists), inputs.texts or inputs.synthetic"));
  // A tokenizer file that transformers cannot read: the tool's failure names the folder.
  const auto broken = dir / "broken";
  std::filesystem::copy(folder, broken);
  write_file(broken / "tokenizer.json", "{not json");
  const auto out = dir / "b.json";
  EXPECT_THAT(error_of_run({"generate", "--model", broken.string(), "--text", "w1", "--output",
                            out.string(), "--quiet"}),
              HasSubstr("could not encode with the tokenizer in '" + broken.string() + "'"));
  EXPECT_FALSE(std::filesystem::exists(out));
}

// A command line that does not fit the usage exits 2 and says what is wrong; flag values never
// reach the YAML unchecked (a newline in a value cannot add keys).
TEST(Cli, UsageErrorsExitTwoAndNameTheFlag) {
  TempDir dir;
  write_file(dir / "e.yaml", "model: {preset: gpt2-tiny}\ninputs: {prompts: [[1]]}\n");
  const std::string e = (dir / "e.yaml").string();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"run"}, "run: expected 1 argument(s), found 0"},
      {{"run", e, "--bogus"}, "unknown option '--bogus'"},
      {{"run", e, "--set"}, "option --set needs a value"},
      {{"run", e, "--prompt", "1"}, "run: option --prompt does not apply to this command"},
      {{"validate", e, "--output", "x.json"}, "validate: option --output does not apply"},
      {{"show"}, "show: expected 1 argument(s), found 0"},
      {{"frobnicate"}, "unknown command 'frobnicate'"},
      {{"generate", "--prompt", "1"}, "generate: --model PRESET|FOLDER is required"},
      {{"generate", "--model", "gpt2-tiny", "--prompt", "-1,2"},
       "--prompt '-1,2': item 0: expected a non-negative integer token id, found '-1'"},
      {{"generate", "--model", "gpt2-tiny", "--prompt", "1], [2"}, "--prompt '1], [2': item 0"},
      {{"generate", "--model", "gpt2-tiny", "--prompt", "1,2,"},
       "expected comma-separated token ids"},
      {{"generate", "--model", "gpt2-tiny", "--prompt", "1", "--max-new-tokens",
        "2\n  num_beams: 3"},
       "--max-new-tokens: expected an integer >= 1"},
      {{"generate", "--model", "gpt2-tiny", "--prompt", "1", "--max-new-tokens", ""},
       "--max-new-tokens: expected an integer >= 1, found ''"},
      {{"generate", "--model", "gpt2-tiny", "--prompt", "1", "--dtype", "float64"},
       "--dtype: expected float32, bfloat16 or float16, found 'float64'"},
      {{"generate", "--model", "gpt2-tiny", "--prompt", "1", "--device", "tpu"},
       "--device: expected cpu, cuda or cuda:N"},
      {{"generate", "--model", "gpt2-tiny", "--text", ""}, "--text: expected a non-empty text"},
      {{"generate", "--model", "gpt2-tiny", "--text", "caf\xe9"}, "--text: expected UTF-8 text"},
      {{"run", e, "--output", "same.png", "--set", "plot=same.png"},
       "the plot 'same.png' and the results 'same.png' are the same file"},
      {{"run", e, "--output", "a.json", "--output", "b.json"}, "option --output given twice"},
      {{"validate", e, "--set", "foo"}, "--set 'foo': expected KEY=VALUE"},
  };
  for (const auto& [args, expected] : cases) {
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(cli(args), 2) << args[0] << " " << expected;
    EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr(expected));
  }
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"generate", "--model", (dir / "no" / "model").string(), "--prompt", "1"}), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("/no/model': no such model folder"));
}

// Results and plot appear together or not at all; paths that can never be written fail before
// the run; the plot path reaches the plotting tool as one argument, never through a shell.
TEST(Cli, ResultsAndPlotAreWrittenTogetherOrNotAtAll) {
  TempDir dir;
  write_file(dir / "e.yaml",
             "model: {preset: gpt2-tiny}\ninputs: {prompts: [[1, 2]]}\n"
             "generation: {max_new_tokens: 2}\nrun: {warmup: 0, repeats: 1}\n");
  const std::string e = (dir / "e.yaml").string();
  auto run = [&](std::vector<std::string> args, int expected_rc) {
    args.insert(args.begin(), {"run", e, "--quiet"});
    ::testing::internal::CaptureStderr();
    ::testing::internal::CaptureStdout();
    EXPECT_EQ(cli(args), expected_rc);
    ::testing::internal::GetCapturedStdout();
    return ::testing::internal::GetCapturedStderr();
  };
  write_file(dir / "afile", "");
  EXPECT_THAT(run({"--output", (dir / "afile" / "r.json").string()}, 1),
              HasSubstr("'" + (dir / "afile").string() + "' is not a folder"));
  EXPECT_THAT(run({"--output", (dir / "r.json").string(), "--set",
                   "plot=" + (dir / "afile" / "p.png").string()},
                  1),
              HasSubstr("plot '" + (dir / "afile" / "p.png").string() + "'"));
  EXPECT_FALSE(std::filesystem::exists(dir / "r.json"));
  // The plotting tool fails: neither file is left, nor their temporary files.
  {
    const testing::ScopedEnv python("GENGRAPH_PYTHON", "/bin/false");
    EXPECT_THAT(
        run({"--output", (dir / "r.json").string(), "--set", "plot=" + (dir / "p.png").string()},
            1),
        HasSubstr("tools/plot_results.py failed"));
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "e.yaml" || name == "afile") << "left behind: " << name;
  }
  // Shell syntax in the plot path is just part of the file name.
  const std::string odd = (dir / "a$(touch PWNED) \"q\".png").string();
  EXPECT_EQ(
      run({"--output", (dir / "r.json").string(), "--set", "plot=" + nlohmann::json(odd).dump()},
          0),
      "");
  EXPECT_TRUE(std::filesystem::exists(odd));
  EXPECT_TRUE(std::filesystem::exists(dir / "r.json"));
  EXPECT_FALSE(std::filesystem::exists("PWNED"));
  EXPECT_FALSE(std::filesystem::exists(dir / "PWNED"));
}

// validate checks what run would refuse later: backend options (without loading a model) and each
// sweep point's model; run refuses them before measuring anything.
TEST(Cli, ValidateChecksBackendOptionsAndEverySweepPointsModel) {
  TempDir dir;
  const std::string rest =
      "inputs: {prompts: [[1, 2]]}\ngeneration: {max_new_tokens: 2}\nrun: {warmup: 0, repeats: "
      "1}\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model: {preset: gpt2-tiny}\nbackends: [{name: eager, options: {cahce: static}}]\n",
       "backends: 'eager': backend 'eager': unknown option 'cahce' (did you mean 'cache'?)"},
      {"model: {preset: gpt2-tiny}\nbackends: [{name: trace, label: t, options: {freeze: "
       "maybe}}]\n",
       "backends: 't': backend 'trace' option 'freeze': expected true or false, found 'maybe'"},
      {"model: {preset: gpt2-tiny}\nbackends: [{name: trace, options: {file: " +
           (dir / "none.pt").string() + "}}]\n",
       "none.pt' does not exist"},
      {"model: {preset: gpt2-tiny}\nbackends: [{name: cuda_graph, options: {buckets: '1,x', "
       "capture: false}}]\n",
       "option 'buckets': expected comma-separated positive row counts, found '1,x'"},
      {"model: {preset: gpt2-tiny}\nbackends: [cuda_graph]\n",
       "backend 'cuda_graph' needs the model on a CUDA device; set model.device: cuda (found cpu)"},
      {"model: {preset: gpt2-tiny}\nsweep: {model.preset: [gpt2-tiny, gpt2-nope]}\n",
       "sweep point [model.preset=gpt2-nope]: unknown model preset 'gpt2-nope'"},
      {"model: {path: " + dir.path().string() + "}\n",
       "model.path: '" + dir.path().string() + "' has no config.json"},
      // What the model's configuration alone settles, without loading weights.
      {"model: {preset: gpt2-tiny}\nsweep: {generation.max_new_tokens: [2, 300]}\n",
       "sweep point [generation.max_new_tokens=300]: " + (dir / "c7.yaml").string() +
           ": the longest prompt (2 tokens) plus 300 new tokens exceeds the model's context of 256 "
           "positions"},
      {"model: {preset: gpt2-tiny, config: {n_head: 3}}\n",
       "n_embd 64 is not divisible by n_head 3"},
      {"model: {preset: gpt2-tiny, config: {n_layr: 3}}\n", "model.config: 'n_layr' is not a key"},
      {"model: {preset: gpt2-tiny, config: {vocab_size: 2}}\n",
       "id 2 is outside the vocabulary [0, 2)"},
      {"model: {preset: gpt2-tiny}\nbackends: [{name: trace, options: {cache_dir: " +
           (dir / "c0.yaml").string() + "}}]\n",
       "option 'cache_dir': '" + (dir / "c0.yaml").string() + "' is not a folder"},
  };
  int i = 0;
  for (const auto& [head, expected] : cases) {
    const auto file = dir / ("c" + std::to_string(i++) + ".yaml");
    write_file(file, head + rest);
    for (const std::string cmd : {"validate", "run"}) {
      ::testing::internal::CaptureStderr();
      EXPECT_EQ(cli({cmd, file.string()}), 1) << cmd << " " << expected;
      const std::string err = ::testing::internal::GetCapturedStderr();
      EXPECT_THAT(err, HasSubstr(expected)) << cmd;
      EXPECT_THAT(err, ::testing::Not(HasSubstr("preparing and warming up")))
          << cmd;  // refused before any run
    }
  }
}

// A token id outside the vocabulary names where it came from: the model folder's
// generation_config.json, or the experiment when the experiment set it.
TEST(Cli, ABadTokenIdNamesTheFileItCameFrom) {
  TempDir dir;
  const auto folder = dir / "model";
  std::filesystem::copy(std::filesystem::path(testing::fixtures_dir()) / "models" / "gpt2-a",
                        folder);
  write_file(folder / "generation_config.json", R"({"eos_token_id": 9999})");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"generate", "--model", folder.string(), "--prompt", "1", "--quiet"}), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr(folder.string() +
                        "/generation_config.json: 'eos_token_id': token id 9999 is outside"));
  write_file(folder / "generation_config.json", R"({"eos_token_id": 1})");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"generate", "--model", folder.string(), "--prompt", "1", "--set",
                 "generation.pad_token_id=5000", "--quiet"}),
            1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("gengraph generate (flags as YAML): generation: 'pad_token_id': token id "
                        "5000 is outside"));
  EXPECT_THAT(
      testing::error_of([&] {
        GenerationConfig g;
        g.eos_token_id = {7};
        g.validate_for_vocab(5);
      }),
      HasSubstr("generation: 'eos_token_id': token id 7 is outside the model's vocabulary [0, 5)"));
}

// --output through a symlink (as /dev/stdout is) writes to its target and keeps the link.
TEST(Cli, OutputThroughASymlinkKeepsTheLink) {
  TempDir dir;
  write_file(dir / "e.yaml",
             "model: {preset: gpt2-tiny}\ninputs: {prompts: [[1, 2]]}\n"
             "generation: {max_new_tokens: 2}\nrun: {warmup: 0, repeats: 1}\n");
  std::filesystem::create_symlink(dir / "target.json", dir / "link.json");
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(
      cli({"run", (dir / "e.yaml").string(), "--output", (dir / "link.json").string(), "--quiet"}),
      0);
  ::testing::internal::GetCapturedStdout();
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "link.json"));
  EXPECT_EQ(nlohmann::json::parse(testing::read_file(dir / "target.json"))["schema_version"], 1);
}

// Ctrl-C while a peer runs: the peer gets the signal, the temporary model copy and the request
// files are removed, nothing is written, and the exit status is 128 + SIGINT.
TEST(Cli, AnInterruptDuringAPeerRemovesTemporaryFilesAndExits130) {
  TempDir dir;
  write_file(dir / "slow.sh", "#!/bin/sh\nexec sleep 60\n");
  std::filesystem::permissions(dir / "slow.sh", std::filesystem::perms::owner_all);
  write_file(dir / "e.yaml",
             "model: {preset: gpt2-tiny}\npeers: [hf_eager]\ninputs: {prompts: [[1, 2]]}\n"
             "generation: {max_new_tokens: 2}\nrun: {warmup: 0, repeats: 1}\n");
  std::optional<testing::ScopedEnv> python;
  python.emplace("GENGRAPH_PYTHON", (dir / "slow.sh").string());
  const auto model_copy = std::filesystem::temp_directory_path() /
                          ("gengraph-peer-model-" + std::to_string(::getpid()));
  std::thread interrupter([&] {
    // Only once the copy exists: gengraph then catches the signal (before, it would end the test).
    for (int i = 0; i < 400 && !std::filesystem::exists(model_copy); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    if (std::filesystem::exists(model_copy)) ::kill(::getpid(), SIGINT);
  });
  ::testing::internal::CaptureStderr();
  const auto t0 = std::chrono::steady_clock::now();
  const int rc =
      cli({"run", (dir / "e.yaml").string(), "--output", (dir / "r.json").string(), "--quiet"});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string err = ::testing::internal::GetCapturedStderr();
  interrupter.join();
  python.reset();
  EXPECT_EQ(rc, 128 + SIGINT);
  EXPECT_THAT(err,
              HasSubstr("interrupted by signal 2: temporary files removed, no results written"));
  EXPECT_LT(seconds, 30.0);  // the peer was stopped, not waited for
  EXPECT_FALSE(std::filesystem::exists(model_copy));
  EXPECT_FALSE(std::filesystem::exists(dir / "r.json"));
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::temp_directory_path())) {
    EXPECT_EQ(e.path().filename().string().find("gengraph-hf_peer.py-" +
                                                std::to_string(::getpid()) + "-"),
              std::string::npos)
        << "left behind: " << e.path();
  }
}

// A trace cache_dir of "~/..." is the home folder's, as in a shell (YAML does not expand it).
TEST(Cli, TraceCacheDirExpandsTheHomeFolder) {
  TempDir dir;
  std::optional<testing::ScopedEnv> home;
  home.emplace("HOME", dir.path().string());
  write_file(
      dir / "e.yaml",
      "model: {preset: gpt2-tiny}\nbackends: [{name: trace, options: {cache_dir: ~/traces}}]\n"
      "inputs: {prompts: [[1, 2]]}\ngeneration: {max_new_tokens: 2}\nrun: {warmup: 0, repeats: "
      "1}\n");
  ::testing::internal::CaptureStdout();
  const int rc =
      cli({"run", (dir / "e.yaml").string(), "--output", (dir / "r.json").string(), "--quiet"});
  ::testing::internal::GetCapturedStdout();
  home.reset();
  ASSERT_EQ(rc, 0);
  int traces = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir / "traces"))
    traces += f.path().extension() == ".pt";
  EXPECT_EQ(traces, 1);
  EXPECT_FALSE(std::filesystem::exists("~"));
}

TEST(Cli, ShowRefusesWhatIsNotAResultsFile) {
  TempDir dir;
  auto show_error = [&](const std::string& name, const std::string& text) {
    write_file(dir / name, text);
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(cli({"show", (dir / name).string()}), 1) << name;
    return ::testing::internal::GetCapturedStderr();
  };
  EXPECT_THAT(show_error("a.json", "{"), HasSubstr("a.json' is not valid JSON"));
  EXPECT_THAT(
      show_error("b.json", "{\"runs\": []}"),
      HasSubstr("b.json' is not a gengraph results file: expected schema_version 1, found none"));
  EXPECT_THAT(show_error("c.json", "{\"schema_version\": 1}"), HasSubstr("expected a 'runs' list"));
  EXPECT_THAT(
      show_error("d.json", "{\"schema_version\": 1, \"experiment\": \"x\", \"runs\": [{}]}"),
      HasSubstr("d.json' is not a gengraph results file: a field is missing or of the wrong type"));
  // Fields missing from an otherwise complete file are named (and never read out of bounds).
  const std::string run =
      R"({"label": "eager", "backend": "eager", "outputs": [], "timings": {"total_ms": {"median": 1, "min": 1,
                               "max": 1, "values": [1]}}})";
  const std::string head =
      R"({"schema_version": 1, "experiment": "x", "model": {"source": "s", "model_type": "gpt2",
      "parameters": 1}, "inputs": {"batch_size": 1}, "run": {"repeats": 1}, )";
  EXPECT_THAT(show_error("e.json", head + R"("runs": [)" + run + "]}"),
              HasSubstr("key 'environment' not found"));
  EXPECT_THAT(
      show_error(
          "f.json",
          head +
              R"("environment": {"device": "cpu", "dtype": "float32"}, "runs": [{"label": "eager"}]})"),
      HasSubstr("key 'timings' not found"));
  write_file(
      dir / "g.json",
      head + R"("environment": {"device": "cpu", "dtype": "float32"}, "runs": [)" + run + "]}");
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(cli({"show", (dir / "g.json").string()}), 0);  // the complete file shows
  ::testing::internal::GetCapturedStdout();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"show", (dir / "missing.json").string()}), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("missing.json': file missing or unreadable"));
}

TEST(Cli, BadInputExitsNonZeroAndWritesNothing) {
  TempDir dir;
  write_file(dir / "e.yaml", "model: {preset: gpt2-tiny}\ninputs: {prompts: [[1, 99999]]}\n");
  const auto out = dir / "e.json";
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"run", (dir / "e.yaml").string(), "--output", out.string(), "--quiet"}), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("id 99999 is outside the vocabulary"));
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(out.string() + ".tmp"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"run", (dir / "e.yaml").string(), "--set", "backend=eagr", "--quiet"}), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("unknown backend 'eagr'"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"frobnicate"}), 2);
  ::testing::internal::GetCapturedStderr();
}

TEST(Cli, GenerateAndListings) {
  TempDir dir;
  const auto out = dir / "g.json";
  ASSERT_EQ(cli({"generate", "--model", "gpt2-tiny", "--prompt", "1,2,3", "--max-new-tokens", "3",
                 "--output", out.string(), "--quiet"}),
            0);
  const auto doc = nlohmann::json::parse(testing::read_file(out));
  EXPECT_EQ(doc["runs"][0]["outputs"][0]["sequences"][0]["tokens"].size(), 3u);
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(cli({"backends"}), 0);
  EXPECT_THAT(::testing::internal::GetCapturedStdout(), HasSubstr("eager\tavailable"));
}

}  // namespace
}  // namespace gengraph

namespace gengraph {
namespace {

// transformers' generate() as a peer row beside gengraph's backends, and the PNG chart.
TEST(Cli, PeersRunBesideBackendsAndThePlotIsWritten) {
  testing::TempDir dir;
  testing::write_file(dir / "p.yaml",
                      "model: {preset: gpt2-tiny, seed: 2}\n"
                      "backends: [eager]\npeers: [hf_eager, hf_jit_trace]\n"
                      "inputs: {prompts: [[1, 2, 3], [4, 5]]}\n"
                      "generation: {max_new_tokens: 5, num_beams: 2}\n"
                      "run: {warmup: 0, repeats: 1}\nplot: " +
                          (dir / "p.png").string() + "\n");
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(
      cli({"run", (dir / "p.yaml").string(), "--output", (dir / "p.json").string(), "--quiet"}), 0);
  ::testing::internal::GetCapturedStdout();
  const auto doc = nlohmann::json::parse(testing::read_file(dir / "p.json"));
  ASSERT_EQ(doc["runs"].size(), 3u);
  EXPECT_EQ(doc["runs"][1]["backend"], "peer:hf_eager");
  EXPECT_EQ(doc["runs"][2]["backend"], "peer:hf_jit_trace");
  // Same tokens and beams as transformers, as it ships and with the seed's jit-traced decode.
  for (int i : {1, 2}) {
    const auto& r = doc["runs"][i];
    EXPECT_TRUE(r["tokens_match_first_row"].get<bool>()) << r["label"];
    ASSERT_TRUE(r.contains("max_score_difference_to_first_row")) << r["label"];
    EXPECT_LT(r["max_score_difference_to_first_row"].get<double>(), 1e-4) << r["label"];
    // The peer's own process: its peak resident memory holds at least the interpreter and torch.
    EXPECT_GT(r["memory"]["peak_rss_bytes"].get<double>(), 100e6) << r["label"];
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "p.png"));
}

// transformers' static cache with torch.compile of the forward (the third peer) gives
// transformers' beams; on CPU its compile of a tiny model takes seconds (minutes for real sizes).
TEST(Cli, TheStaticCacheCompiledPeerGivesTheSameBeams) {
  testing::TempDir dir;
  testing::write_file(dir / "p.yaml",
                      "model: {preset: gpt2-tiny, seed: 2}\n"
                      "backends: [eager]\npeers: [hf_static_compile]\n"
                      "inputs: {prompts: [[1, 2, 3], [4, 5]]}\n"
                      "generation: {max_new_tokens: 5, num_beams: 2}\n"
                      "run: {warmup: 1, repeats: 1, peer_timeout_s: 600}\n");
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(
      cli({"run", (dir / "p.yaml").string(), "--output", (dir / "p.json").string(), "--quiet"}), 0);
  ::testing::internal::GetCapturedStdout();
  const auto doc = nlohmann::json::parse(testing::read_file(dir / "p.json"));
  ASSERT_EQ(doc["runs"].size(), 2u);
  const auto& r = doc["runs"][1];
  EXPECT_EQ(r["backend"], "peer:hf_static_compile");
  EXPECT_TRUE(r["tokens_match_first_row"].get<bool>());
  ASSERT_TRUE(r.contains("max_score_difference_to_first_row"));
  EXPECT_LT(r["max_score_difference_to_first_row"].get<double>(), 1e-4);
}

}  // namespace
}  // namespace gengraph

namespace gengraph {
namespace {

// A peer that fails or overruns run.peer_timeout_s does not cost gengraph's measured rows: the
// results are written with the peer marked failed and why, the table says so, and the exit is 3.
TEST(Cli, AFailedPeerIsRecordedAndTheRunExitsThree) {
  testing::TempDir dir;
  testing::write_file(dir / "slow.sh", "#!/bin/sh\nsleep 60\n");
  std::filesystem::permissions(dir / "slow.sh", std::filesystem::perms::owner_all);
  testing::write_file(
      dir / "p.yaml",
      "model: {preset: gpt2-tiny}\nbackends: [eager]\npeers: [hf_eager, hf_jit_trace]\n"
      "inputs: {prompts: [[1, 2, 3]]}\ngeneration: {max_new_tokens: 3}\n"
      "run: {warmup: 0, repeats: 1, peer_timeout_s: 1}\n");
  for (const std::string python : {std::string("/bin/false"), (dir / "slow.sh").string()}) {
    const testing::ScopedEnv env("GENGRAPH_PYTHON", python);
    const auto out = dir / "p.json";
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(cli({"run", (dir / "p.yaml").string(), "--output", out.string()}), 3) << python;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string table = ::testing::internal::GetCapturedStdout();
    const std::string log = ::testing::internal::GetCapturedStderr();
    const auto doc = nlohmann::json::parse(testing::read_file(out));
    ASSERT_EQ(doc["runs"].size(), 3u);
    EXPECT_FALSE(doc["runs"][0].contains("error"));
    EXPECT_EQ(doc["runs"][0]["outputs"][0]["sequences"][0]["tokens"].size(), 3u);
    const std::string why = python == "/bin/false" ? "tools/hf_peer.py failed (exit 1"
                                                   : "stopped after run.peer_timeout_s = 1 s";
    for (int k : {1, 2}) EXPECT_THAT(doc["runs"][k]["error"].get<std::string>(), HasSubstr(why));
    EXPECT_THAT(table, HasSubstr("FAILED: peer 'hf_eager'"));
    EXPECT_THAT(log, HasSubstr("2 run(s) failed"));
    if (python != "/bin/false") EXPECT_LT(seconds, 30.0);  // the sleeping peers were stopped
  }
}

TEST(Cli, ShippedConfigsAreValid) {
  int n = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(GENGRAPH_SOURCE_DIR) + "/configs")) {
    if (e.path().extension() != ".yaml") continue;
    ::testing::internal::CaptureStdout();
    EXPECT_EQ(cli({"validate", e.path().string()}), 0) << e.path();
    EXPECT_THAT(::testing::internal::GetCapturedStdout(), ::testing::HasSubstr("valid"));
    ++n;
  }
  EXPECT_GE(n, 5);
}

TEST(Cli, OutputToADeviceIsWrittenThroughNotReplaced) {
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(cli({"generate", "--model", "gpt2-tiny", "--prompt", "1,2", "--max-new-tokens", "2",
                 "--output", "/dev/null", "--quiet"}),
            0);
  ::testing::internal::GetCapturedStdout();
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
}

}  // namespace
}  // namespace gengraph
