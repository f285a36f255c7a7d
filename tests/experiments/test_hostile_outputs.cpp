// Hostile and careless input, second pass (issue 25), continued from test_hostile_results.cpp:
// outputs that would replace inputs, damaged tool output, failed writes to stdout, many repeats.
#include "experiments/tools/python_tools.h"
#include "tests/experiments/hostile_results_support.h"

namespace gengraph {
namespace {

using namespace hostile_results;  // NOLINT: this file's helpers

TEST(HostileResults, OutputsNeverReplaceInputs) {
  TempDir dir;
  const std::string a = (dir / "a.json").string(), b = (dir / "b.json").string();
  const std::string a_text = complete_doc().dump();
  write_file(a, a_text);
  write_file(b, complete_doc().dump());
  std::filesystem::create_directories(dir / "sub");
  std::filesystem::create_symlink(a, dir / "link.json");
  for (const std::string& out : {a, (dir / "sub" / ".." / "a.json").string(),
                                 (dir / "." / "b.json").string(), (dir / "link.json").string()}) {
    auto [rc, err] = testing::cli_stderr({"compare", a, b, "--output", out});
    EXPECT_EQ(rc, 2) << out;
    EXPECT_THAT(err, HasSubstr("compare: the output '" + out + "' is the input '"));
    EXPECT_THAT(err, HasSubstr("outputs never replace inputs"));
  }
  auto [rc, err] = testing::cli_stderr({"compare", a, a, "--output", a});
  EXPECT_EQ(rc, 2);
  EXPECT_EQ(testing::read_file(a), a_text);
  // The experiment file as the results (--output or its own output:) or the plot.
  const std::string config = (dir / "e.yaml").string();
  const std::string yaml =
      "model: {preset: gpt2-tiny}\ninputs: {prompts: [[1, 2]]}\n"
      "generation: {max_new_tokens: 2}\nrun: {warmup: 0, repeats: 1}\n";
  write_file(config, yaml);
  std::tie(rc, err) = testing::cli_stderr({"run", config, "--output", config, "--quiet"});
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(err, HasSubstr("the results '" + config + "' is the experiment file '" + config));
  std::tie(rc, err) = testing::cli_stderr(
      {"run", config, "--output", (dir / "sub" / ".." / "e.yaml").string(), "--quiet"});
  EXPECT_EQ(rc, 2);
  EXPECT_EQ(testing::read_file(config), yaml);
  // The plot (a .png path) as the experiment file, were that named like one.
  const std::string png = (dir / "p.png").string();
  write_file(png, yaml + "plot: '" + png + "'\n");
  std::tie(rc, err) =
      testing::cli_stderr({"run", png, "--output", (dir / "o.json").string(), "--quiet"});
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(err, HasSubstr("the plot '" + png + "' is the experiment file '" + png + "'"));
  // generate: a file of the model folder (its config.json), also through another spelling.
  std::filesystem::create_directories(dir / "m");
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(testing::fixtures_dir() + "/models/gpt2-a/" + f, dir / "m" / f);
  const std::string model_config = testing::read_file(dir / "m" / "config.json");
  for (const std::string& out : {(dir / "m" / "config.json").string(),
                                 (dir / "sub" / ".." / "m" / "config.json").string()}) {
    std::tie(rc, err) = testing::cli_stderr(
        {"generate", "--model", (dir / "m").string(), "--prompt", "1", "--output", out, "--quiet"});
    EXPECT_EQ(rc, 2) << out;
    EXPECT_THAT(err, HasSubstr("the results '" + out + "' is a file of the model folder '" +
                               (dir / "m").string() + "'"));
  }
  EXPECT_EQ(testing::read_file(dir / "m" / "config.json"), model_config);
  EXPECT_FALSE(std::filesystem::exists(dir / "o.json"));
}

// A stand-in for the tools' Python (GENGRAPH_PYTHON): writes `output` as the tool's result (its
// arguments: the tool, --request REQUEST, --out OUT), as tools/hf_peer.py or hf_tokenizer.py would.
testing::ScopedEnv stand_in_tool(const TempDir& dir, const Json& output) {
  write_file(dir / "tool_output.json", output.dump());
  write_file(dir / "python.sh",
             "#!/bin/sh\ncp '" + (dir / "tool_output.json").string() + "' \"$5\"\n");
  std::filesystem::permissions(dir / "python.sh", std::filesystem::perms::owner_all);
  return testing::ScopedEnv("GENGRAPH_PYTHON", (dir / "python.sh").string());
}

// What the Python tools write is read through the typed reader too: a damaged peer row fails that
// peer, naming the key (its timings were read with json's get<>() and ended the run with json's
// own text, nothing written); damaged token ids from the tokenizer end the run, naming the key.
TEST(HostileResults, DamagedToolOutputIsRefusedNamingTheKey) {
  TempDir dir;
  write_file(dir / "e.yaml",
             "model: {preset: gpt2-tiny}\nbackends: [eager]\npeers: [hf_eager]\n"
             "inputs: {prompts: [[1, 2]]}\ngeneration: {max_new_tokens: 2}\n"
             "run: {warmup: 0, repeats: 1}\n");
  const Json good = Json::parse(R"({"label": "hf_eager", "backend": "peer:hf_eager",
    "outputs": [{"input": 0, "prompt_length": 2, "sequences": [{"tokens": [5, 6]}]}],
    "timings": {"total_ms": {"median": 2, "min": 1, "max": 3, "values": [1, 2, 3]},
                "decode_ms_per_token": {}}})");
  struct Case {
    std::function<void(Json&)> damage;
    std::string message;  // "" for a row that is accepted
  };
  const std::vector<Case> cases = {
      {[](Json&) {}, ""},
      {[](Json& r) { r["timings"]["total_ms"]["values"][0] = "a"; },
       "key 'timings.total_ms.values[0]': expected a measured value > 0 and at most 1e12, found "
       "the string \"a\""},
      {[](Json& r) { r = Json::array(); },
       "expected a results row (an object), found an array of 0 entries"},
      {[](Json& r) { r["outputs"][0].erase("sequences"); },
       "key 'outputs[0].sequences': expected an array, found nothing (the key is missing)"},
      {[](Json& r) { r["outputs"][0]["sequences"][0]["tokens"][0] = 1.5; },
       "key 'outputs[0].sequences[0].tokens[0]': expected an integer, found 1.5"},
      {[](Json& r) { r["outputs"].push_back(r["outputs"][0]); },
       "key 'outputs': expected one entry per input (1), found an array of 2 entries"},
      {[](Json& r) { r["label"] = "other"; },
       "key 'label': expected the peer's label, \"hf_eager\", found the string \"other\""},
  };
  const std::string out = (dir / "r.json").string();
  for (const auto& c : cases) {
    Json row = good;
    c.damage(row);
    const auto python = stand_in_tool(dir, row);
    auto [rc, table, err] = cli_out({"run", (dir / "e.yaml").string(), "--output", out, "--quiet"});
    EXPECT_EQ(rc, c.message.empty() ? 0 : 3) << c.message << ": " << err;
    EXPECT_THAT(err, ::testing::Not(HasSubstr("json.exception"))) << c.message;
    const Json doc = Json::parse(testing::read_file(out));
    ASSERT_EQ(doc["runs"].size(), 2u) << c.message;
    EXPECT_FALSE(doc["runs"][0].contains("error")) << c.message;  // gengraph's row is kept
    if (c.message.empty()) {
      EXPECT_FALSE(doc["runs"][1].contains("error")) << doc["runs"][1].dump();
    } else {
      EXPECT_THAT(doc["runs"][1].value("error", ""),
                  HasSubstr("peer 'hf_eager': the output of tools/hf_peer.py: " + c.message));
    }
    EXPECT_EQ(std::get<0>(cli_out({"show", out})), 0) << c.message;
  }
  // The tokenizer's token ids for inputs.texts.
  const auto model = dir / "m";
  std::filesystem::create_directories(model);
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(testing::fixtures_dir() + "/models/gpt2-a/" + f, model / f);
  write_file(model / "tokenizer.json",
             "{}");  // not read: the stand-in answers (--tokenizer python)
  const std::string source =
      "inputs.texts: the output of tools/hf_tokenizer.py (encode with the "
      "tokenizer in '" +
      model.string() + "'): ";
  const std::vector<std::pair<Json, std::string>> answers = {
      {Json::parse(R"({"ids": [["x"]]})"),
       "key 'ids[0][0]': expected an integer, found the string \"x\""},
      {Json::parse(R"({"ids": [[1], [2]]})"),
       "key 'ids': expected one entry per text (1), found an array of 2 entries"},
      {Json::parse(R"({"ids": [3]})"), "key 'ids[0]': expected an array of token ids, found 3"},
      {Json::parse(R"({"texts": []})"),
       "key 'ids': expected an array, found nothing (the key is missing)"},
      {Json::parse("[]"), "expected an object, found an array of 0 entries"},
  };
  for (const auto& [answer, message] : answers) {
    const auto python = stand_in_tool(dir, answer);
    auto [rc, table, err] =
        cli_out({"generate", "--model", model.string(), "--text", "w1", "--tokenizer", "python",
                 "--output", (dir / "t.json").string(), "--quiet"});
    EXPECT_EQ(rc, 1) << message;
    EXPECT_THAT(err, HasSubstr(source + message));
    EXPECT_THAT(err, ::testing::Not(HasSubstr("json.exception"))) << message;
    EXPECT_FALSE(std::filesystem::exists(dir / "t.json"));
  }
}

// A stream buffer on a full disk: every write fails with ENOSPC.
class FullDisk : public std::streambuf {
 protected:
  int_type overflow(int_type) override {
    errno = ENOSPC;
    return traits_type::eof();
  }
  std::streamsize xsputn(const char*, std::streamsize) override {
    errno = ENOSPC;
    return 0;
  }
};

// An interleaved peer's repeats merge into one row without trusting what check_peer_row does not
// check: a repeat without a deterministic flag or a memory block makes the row not deterministic
// and takes no peak from it, and a metric no repeat measured stays as the first repeat gave it.
TEST(HostileResults, InterleavedPeerRepeatsMergeWithoutTrustingTheRest) {
  const nlohmann::json one = nlohmann::json::parse(R"({"label": "p", "backend": "peer:ct2",
      "outputs": [1], "deterministic_across_repeats": true, "memory": {"peak_rss_bytes": 7},
      "timings": {"total_ms": {"values": [2.0]}, "time_to_first_token_ms": null}})");
  nlohmann::json two = one;
  two.erase("deterministic_across_repeats");
  two["memory"] = "lots";
  two["timings"]["total_ms"]["values"] = {4.0};
  const nlohmann::json row = merge_peer_repeats({one, two});
  EXPECT_FALSE(row["deterministic_across_repeats"].get<bool>());
  EXPECT_EQ(row["memory"]["peak_rss_bytes"].get<double>(), 7.0);
  EXPECT_EQ(row["timings"]["total_ms"]["values"], nlohmann::json({2.0, 4.0}));
  EXPECT_EQ(row["timings"]["total_ms"]["median"].get<double>(), 3.0);
  EXPECT_TRUE(row["timings"]["time_to_first_token_ms"].is_null());
  EXPECT_EQ(row["order"], "interleaved");
  const nlohmann::json same = merge_peer_repeats({one, one});
  EXPECT_TRUE(same["deterministic_across_repeats"].get<bool>());
  EXPECT_THROW(merge_peer_repeats({}), Error);
}

TEST(HostileResults, AFailedWriteToStdoutIsAnError) {
  TempDir dir;
  write_file(dir / "r.json", complete_doc().dump());
  write_file(dir / "e.yaml", "model: {preset: gpt2-tiny}\ninputs: {prompts: [[1, 2]]}\n");
  const std::string r = (dir / "r.json").string();
  const std::vector<std::vector<std::string>> commands = {{"show", r},
                                                          {"compare", r, r},
                                                          {"validate", (dir / "e.yaml").string()},
                                                          {"presets"},
                                                          {"--help"}};
  for (const auto& args : commands) {
    FullDisk full;
    std::streambuf* const old = std::cout.rdbuf(&full);
    ::testing::internal::CaptureStderr();
    const int rc = cli(args);
    const std::string err = ::testing::internal::GetCapturedStderr();
    std::cout.rdbuf(old);
    std::cout.clear();
    EXPECT_EQ(rc, 1) << args[0];
    EXPECT_THAT(err, HasSubstr("error: writing to standard output failed: No space left on device"))
        << args[0];
  }
  // The program itself, to /dev/full and with stdout closed: the system's reason, exit 1.
  const auto bin = testing::cli_binary();
  if (bin.empty()) GTEST_SKIP() << "the gengraph binary is not built beside the tests";
  for (const auto& [redirect, reason] :
       {std::pair<std::string, std::string>{"> /dev/full", "No space left on device"},
        {">&-", "Bad file descriptor"}}) {
    for (const std::string& cmd : {"show '" + r + "'", "compare '" + r + "' '" + r + "'"}) {
      const int status = std::system(("'" + bin.string() + "' " + cmd + " " + redirect + " 2> '" +
                                      (dir / "err").string() + "'")
                                         .c_str());
      ASSERT_TRUE(WIFEXITED(status)) << cmd << " " << redirect;
      EXPECT_EQ(WEXITSTATUS(status), 1) << cmd << " " << redirect;
      EXPECT_THAT(testing::read_file(dir / "err"),
                  HasSubstr("error: writing to standard output failed: " + reason))
          << cmd << " " << redirect;
    }
  }
}

TEST(HostileResults, ManyRepeatsAreComparedInBoundedMemory) {
  // 100,000 repeats a side: 10^10 pairs, 80 GB as a sorted list; selected without forming them,
  // with the same answer as the list gives. Identical sides: the estimate is exactly 1.
  std::vector<double> x(100000), y;
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1 + static_cast<double>((i * 7919) % 1000) / 100;
  Speedup s = speedup(x, x);
  EXPECT_DOUBLE_EQ(s.estimate, 1.0);
  EXPECT_TRUE(s.has_interval);
  EXPECT_LT(s.low, 1.0);
  EXPECT_GT(s.high, 1.0);
  for (double v : x) y.push_back(v / 2);
  s = speedup(x, y);
  EXPECT_NEAR(s.estimate, 2.0, 1e-12);
  EXPECT_LT(s.low, 2.0);
  EXPECT_GT(s.low, 1.5);
  EXPECT_GT(s.high, 2.0);
  // Just past the switch from the sorted list (up to 2^20 pairs) to selection: the same numbers as
  // the sorted list of every pair, formed here.
  std::vector<double> b(1030), a(1030);
  for (size_t i = 0; i < b.size(); ++i) {
    b[i] = 10 + static_cast<double>((i * 37) % 101) / 7;
    a[i] = 5 + static_cast<double>((i * 53) % 89) / 5;
  }
  std::vector<double> d;
  for (double u : b)
    for (double v : a) d.push_back(std::log(u) - std::log(v));
  std::sort(d.begin(), d.end());
  const size_t n = d.size();
  ASSERT_GT(n, size_t{1} << 20);
  const Speedup big = speedup(b, a);
  EXPECT_EQ(big.estimate, std::exp(0.5 * (d[n / 2 - 1] + d[n / 2])));
  // The interval's rank as speedup() takes it (normal approximation above 100 repeats a side).
  const double sd = std::sqrt(1030.0 * 1030.0 * 2061.0 / 12.0);
  const auto k = static_cast<size_t>(std::floor(static_cast<double>(n) / 2 - 1.959964 * sd + 0.5));
  EXPECT_EQ(big.low, std::exp(d[k - 1]));
  EXPECT_EQ(big.high, std::exp(d[n - k]));
  // The interval for the median of many paired repeats: 0.5^n no longer underflows past 1074.
  const auto [rank, coverage] = median_interval_rank(2000);
  EXPECT_EQ(rank, 956u);
  EXPECT_NEAR(coverage, 0.9534, 1e-3);
  EXPECT_EQ(ratio_confidence_text(2000), "95.3% confidence");
}

// Long prompts and generated texts are cut in the table, with their length in tokens (a
// 6,000-token prompt once printed as one 30,608-character line); the results file keeps them.
TEST(HostileResults, TheTableCutsLongTextsAndTokenLists) {
  std::string prompt;
  while (prompt.size() < 30000) prompt += "é word ";  // two-byte characters, never split
  Json doc = complete_doc();
  doc["inputs"] = {{"batch_size", 2},
                   {"prompt_lengths", {6000, 3}},
                   {"texts", {prompt, "short prompt"}},
                   {"tokenizer", "native"}};
  std::vector<int64_t> ids(100);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  doc["runs"][0]["outputs"] = {
      {{"input", 0}, {"sequences", {{{"tokens", ids}, {"text", prompt.substr(0, 500)}}}}},
      {{"input", 1}, {"sequences", {{{"tokens", {7, 8}}, {"text", "a short answer"}}}}}};
  std::string first60 = "\"";  // the first 60 characters, quoted
  for (int i = 0; i < 8; ++i) first60 += "é word ";
  first60 += "é wo\"";
  std::string table = format_table(doc);
  EXPECT_THAT(
      table, HasSubstr("  [0] " + first60 + "… (6,000 tokens) -> " + first60 + "… (100 tokens)\n"));
  EXPECT_THAT(table, HasSubstr("  [1] \"short prompt\" -> \"a short answer\"\n"));
  // No line past 240 bytes (the longest holds two cut texts of 60 characters, some of 2 bytes).
  for (size_t start = 0, end; start < table.size(); start = end + 1) {
    end = table.find('\n', start);
    EXPECT_LE(end - start, 240u) << table.substr(start, 240);
  }
  // Without the texts: the ids, a long list cut after 16, and the text cut the same way.
  doc["inputs"].erase("texts");
  table = format_table(doc);
  EXPECT_THAT(table, HasSubstr("  input 0: [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,…] (100 tokens)\n"
                               "    text: " +
                               first60 + "… (100 tokens)\n"));
  EXPECT_THAT(table, HasSubstr("  input 1: [7,8]\n    text: \"a short answer\"\n"));
}

}  // namespace
}  // namespace gengraph
