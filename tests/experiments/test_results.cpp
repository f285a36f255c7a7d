// The results document through the CLI: what a run records, ratios and intervals, bandwidth,
// writing JSON and plot whole or not at all, reading it back (experiments/results, table,
// statistics).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <optional>
#include <thread>

#include "framework/decoding/resolved_settings.h"
#include "framework/util/json_at.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using namespace testing::cli_names;  // NOLINT(build/namespaces)

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

// A row may ask for the whole decoding step on the device (`loop:`); the results record what ran
// and, where a part prevented it, why; the table says it under the row.
TEST(Cli, WholeStepRowsRecordTheirLoop) {
  TempDir dir;
  write_file(dir / "w.yaml", R"(model: {preset: gpt2-tiny}
backends:
  - eager
  - {name: cuda_graph, label: whole, options: {capture: false},
     loop: {whole_step: on, capture: false, sync_every: 2}}
  - {name: eager, label: asked, loop: {whole_step: auto}}
inputs: {prompts: [[1, 2, 3], [4, 5]]}
generation: {max_new_tokens: 5, num_beams: 2}
run: {warmup: 1, repeats: 1}
)");
  const auto out = dir / "w.json";
  ASSERT_EQ(cli({"run", (dir / "w.yaml").string(), "--output", out.string(), "--quiet"}), 0);
  const auto doc = nlohmann::json::parse(testing::read_file(out));
  ASSERT_EQ(doc["runs"].size(), 3u);
  EXPECT_EQ(doc["runs"][0]["loop"]["whole_step"], "off");
  const auto& whole = doc["runs"][1]["loop"];
  EXPECT_TRUE(whole["ran_whole_step"].get<bool>());
  EXPECT_FALSE(whole["captured"].get<bool>());
  EXPECT_EQ(whole["sync_every"], 2);
  EXPECT_EQ(whole["steps_run"], 5);
  EXPECT_EQ(whole["flag_reads"], 3);  // before steps 1, 2 and 4
  EXPECT_EQ(doc["runs"][1]["outputs"], doc["runs"][0]["outputs"]);
  const auto& asked = doc["runs"][2]["loop"];
  EXPECT_FALSE(asked["ran_whole_step"].get<bool>());
  EXPECT_THAT(asked["fallback"].get<std::string>(), HasSubstr("backend 'eager'"));
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(cli({"show", out.string()}), 0);
  const std::string table = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(table, HasSubstr("whole step on the device, uncaptured, done flag read 3 times"));
  EXPECT_THAT(table, HasSubstr("host loop (whole step not possible: backend 'eager'"));
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
  EXPECT_THAT(table, HasSubstr("measured bandwidth: read "));
  EXPECT_THAT(table, HasSubstr("% of the measured read bandwidth, "));
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

// Rows in weight formats of their own (`model:`) run in one experiment: the model is loaded once
// per format, each row runs on its own (the tokens of an experiment whose model is in that format),
// and its weights and decode traffic are recorded and shown.
TEST(Cli, RowsInTheirOwnWeightFormatsRunBesideTheExperimentsModel) {
  TempDir dir;
  const std::string common = R"(inputs: {prompts: [[1, 2, 3], [4, 5]]}
generation: {max_new_tokens: 6}
run: {warmup: 0, repeats: 1, bandwidth: true}
)";
  write_file(dir / "mixed.yaml", "model: {preset: gpt2-tiny, seed: 4}\n" + common + R"(backends:
  - eager
  - {name: eager, label: int8, model: {weights: int8}}
  - {name: eager, label: int8-static, options: {cache: static}, model: {weights: int8}}
  - {name: eager, label: w8a8, model: {weights: int8, int8_activation_rows: 1}}
  - {name: eager, label: unfused, fused: false}
)");
  write_file(dir / "int8.yaml", "model: {preset: gpt2-tiny, seed: 4, weights: int8}\n" + common +
                                    "backends: [eager]\n");
  write_file(dir / "w8a8.yaml",
             "model: {preset: gpt2-tiny, seed: 4, weights: int8, int8_activation_rows: 1}\n" +
                 common + "backends: [eager]\n");
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(cli({"run", (dir / "mixed.yaml").string(), "--output", (dir / "m.json").string()}), 0);
  const std::string log = ::testing::internal::GetCapturedStderr();
  const std::string table = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(
      cli({"run", (dir / "int8.yaml").string(), "--output", (dir / "i.json").string(), "--quiet"}),
      0);
  ASSERT_EQ(
      cli({"run", (dir / "w8a8.yaml").string(), "--output", (dir / "w.json").string(), "--quiet"}),
      0);
  const auto mixed = nlohmann::json::parse(testing::read_file(dir / "m.json"));
  const auto int8 = nlohmann::json::parse(testing::read_file(dir / "i.json"));
  const auto w8a8 = nlohmann::json::parse(testing::read_file(dir / "w.json"));
  const auto& runs = mixed["runs"];
  ASSERT_EQ(runs.size(), 5u);
  EXPECT_EQ(runs[0]["weights"], "float");
  EXPECT_EQ(runs[1]["weights"], "int8");
  EXPECT_EQ(runs[3]["weights"], "int8 (int8 activations from 1 row)");
  EXPECT_EQ(runs[3]["weights"], w8a8["model"]["weights"]);
  EXPECT_EQ(runs[4]["weights"], "float");
  EXPECT_EQ(mixed["model"]["weights"], "float");
  // Each row as an experiment in its format gives it.
  EXPECT_EQ(runs[1]["outputs"], int8["runs"][0]["outputs"]);
  EXPECT_EQ(runs[2]["outputs"], int8["runs"][0]["outputs"]);
  EXPECT_EQ(runs[3]["outputs"], w8a8["runs"][0]["outputs"]);
  // A decode step reads the row's own weights: the int8 projections, not the float ones.
  EXPECT_EQ(runs[1]["bandwidth"]["bytes_per_decode_step"],
            int8["runs"][0]["bandwidth"]["bytes_per_decode_step"]);
  EXPECT_LT(runs[1]["bandwidth"]["bytes_per_decode_step"].get<double>(),
            runs[0]["bandwidth"]["bytes_per_decode_step"].get<double>());
  // One load per format: int8 once for both int8 rows, w8a8 and the unfused form once each.
  const auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("loading the model again"), 3u) << log;
  EXPECT_EQ(count("loading the model again (int8) for int8\n"), 1u) << log;
  EXPECT_THAT(table, HasSubstr("    weights int8\n"));
  EXPECT_THAT(table, HasSubstr("    weights int8 (int8 activations from 1 row)\n"));
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

// The one typed reader of JSON files (framework/util/json_at.h): every refusal is
// "<source>: key '<path>': expected <what>, found <what is there>".
TEST(ResultsJsonAt, EveryRefusalNamesTheSourceKeyExpectationAndFinding) {
  using Json = nlohmann::json;
  const Json doc = Json::parse(R"({"a": {"b": [1, "two", null, true, 2.5, {"c": 0}]},
    "n": 0, "big": 18446744073709551615, "neg": -3, "s": "x\ny\u001b\u0085\"q\"",
    "long": ")" + std::string(300, 'z') +
                               R"(", "arr": [1, 2, 3], "obj": {"k": 1}})");
  const JsonAt root(doc, "'f.json'");
  auto error = [](auto&& f) { return testing::error_of(f); };
  // What is there, described: a string (escaped, quoted), numbers as written, sizes of containers.
  EXPECT_EQ(error([&] { root["a"]["b"].items()[1].integer(); }),
            "'f.json': key 'a.b[1]': expected an integer, found the string \"two\"");
  EXPECT_EQ(error([&] { root["a"]["b"].items()[2].string(); }),
            "'f.json': key 'a.b[2]': expected a string, found null");
  EXPECT_EQ(error([&] { root["a"]["b"].items()[3].number(); }),
            "'f.json': key 'a.b[3]': expected a number, found true");
  EXPECT_EQ(error([&] { root["a"]["b"].items()[4].integer(); }),
            "'f.json': key 'a.b[4]': expected an integer, found 2.5");
  EXPECT_EQ(error([&] { root["a"]["b"].items()[5]["c"].boolean(); }),
            "'f.json': key 'a.b[5].c': expected true or false, found 0");
  EXPECT_EQ(error([&] { root["arr"].string(); }),
            "'f.json': key 'arr': expected a string, found an array of 3 entries");
  EXPECT_EQ(error([&] { root["obj"].items(); }),
            "'f.json': key 'obj': expected an array, found an object of 1 key");
  EXPECT_EQ(error([&] { root["s"].integer(); }),
            "'f.json': key 's': expected an integer, found the string "
            "\"x\\ny\\u001b\\u0085\\\"q\\\"\"");
  EXPECT_EQ(error([&] { root["long"].number(); }),
            "'f.json': key 'long': expected a number, found the string \"" + std::string(120, 'z') +
                "...\"");
  // A missing key, the document itself (no key part), an object where there is none.
  EXPECT_EQ(error([&] { root["a"]["missing"].string(); }),
            "'f.json': key 'a.missing': expected a string, found nothing (the key is missing)");
  EXPECT_EQ(error([&] { JsonAt(Json::array(), "'g.json'").object("a manifest"); }),
            "'g.json': expected a manifest, found an array of 0 entries");
  EXPECT_EQ(error([&] { root["arr"].has("x"); }),
            "'f.json': key 'arr': expected an object, found an array of 3 entries");
  // Ranges: a parsed non-negative integer is unsigned, and is held to both ends.
  EXPECT_EQ(error([&] { root["n"].integer_in(1, 9); }),
            "'f.json': key 'n': expected an integer from 1 to 9, found 0");
  EXPECT_EQ(error([&] { root["big"].integer_in(0, 9); }),
            "'f.json': key 'big': expected an integer from 0 to 9, found 18446744073709551615");
  EXPECT_EQ(error([&] { root["big"].integer(); }),
            "'f.json': key 'big': expected an integer, found 18446744073709551615");
  EXPECT_EQ(error([&] { root["neg"].integer_in(0, 9, "a point number"); }),
            "'f.json': key 'neg': expected a point number, found -3");
  EXPECT_EQ(root["n"].integer_in(0, 0), 0);
  EXPECT_EQ(root["neg"].integer_in(-3, -3), -3);
  EXPECT_EQ(error([&] { root["neg"].number_in(0, 1, "a fraction"); }),
            "'f.json': key 'neg': expected a fraction, found -3");
  // Sizes are refused before the array is walked; strings() names the element.
  EXPECT_EQ(error([&] { root["arr"].items(2, "an array of points"); }),
            "'f.json': key 'arr': expected an array of points (at most 2 entries), found an array "
            "of 3 entries");
  EXPECT_EQ(error([&] { root["arr"].strings(); }),
            "'f.json': key 'arr[0]': expected a string, found 1");
  EXPECT_EQ(error([&] { root["a"].strings(); }),
            "'f.json': key 'a': expected an array of strings, found an object of 1 key");
  // Unknown keys: named (escaped like values), with the closest known one.
  EXPECT_NO_THROW(root["obj"].only({"k"}));
  EXPECT_EQ(error([&] {
              root["obj"].only({"kk", "other"});
            }),
            "'f.json': unknown key 'obj.k' (did you mean 'kk'?); expected only kk, other");
  const Json odd = {{"x\ny", 1}};
  EXPECT_EQ(error([&] { JsonAt(odd, "'h.json'").only({"another"}); }),
            "'h.json': unknown key 'x\\ny'; expected only another");
  // Optional members: the fallback when absent, refused when of another type.
  EXPECT_EQ(root.integer_or("absent", 7), 7);
  EXPECT_EQ(root["a"].string_or("absent", "d"), "d");
  EXPECT_EQ(error([&] { root.string_or("n", "d"); }),
            "'f.json': key 'n': expected a string, found 0");
  EXPECT_EQ(root["a"]["b"].items()[1].text(), "two");
  EXPECT_EQ(root["obj"].text(), "{\"k\":1}");
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
      HasSubstr("b.json' is not a gengraph results file: key 'schema_version': expected 1 (the "
                "results schema this gengraph reads), found nothing (the key is missing)"));
  EXPECT_THAT(
      show_error("c.json", "{\"schema_version\": 1}"),
      HasSubstr("c.json' is not a gengraph results file: key 'runs': expected an array of runs (or "
                "'points', each with 'runs'), found nothing (the key is missing)"));
  EXPECT_THAT(
      show_error("d.json", "{\"schema_version\": 1, \"experiment\": \"x\", \"runs\": [{}]}"),
      HasSubstr("d.json' is not a gengraph results file: key 'model': expected an object, found "
                "nothing (the key is missing)"));
  // Fields missing from an otherwise complete file are named (and never read out of bounds).
  const std::string run =
      R"({"label": "eager", "backend": "eager", "outputs": [], "timings": {"total_ms": {"median": 1, "min": 1,
                               "max": 1, "values": [1]}}})";
  const std::string head =
      R"({"schema_version": 1, "experiment": "x", "model": {"source": "s", "model_type": "gpt2",
      "parameters": 1}, "inputs": {"batch_size": 1}, "run": {"repeats": 1}, )";
  EXPECT_THAT(
      show_error("e.json", head + R"("runs": [)" + run + "]}"),
      HasSubstr("key 'environment': expected an object, found nothing (the key is missing)"));
  EXPECT_THAT(
      show_error(
          "f.json",
          head +
              R"("environment": {"device": "cpu", "dtype": "float32"}, "runs": [{"label": "eager"}]})"),
      HasSubstr("key 'runs[0].timings': expected an object, found nothing (the key is missing)"));
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

// gengraph generate prints its table and tokens; it writes the results JSON only when asked.
TEST(Cli, GenerateWritesNoResultsUnasked) {
  const std::filesystem::path would_be =
      std::filesystem::current_path() / "results" / "generate.json";
  std::filesystem::remove(would_be);
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(cli({"generate", "--model", "gpt2-tiny", "--prompt", "1,2", "--max-new-tokens", "2",
                 "--quiet"}),
            0);
  EXPECT_THAT(::testing::internal::GetCapturedStdout(),
              HasSubstr("results: not written (--output FILE writes them)"));
  EXPECT_FALSE(std::filesystem::exists(would_be));
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
