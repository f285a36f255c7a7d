// Hostile and careless input, second pass (issue 25): one test per defect class
// (docs/reliability.md). This file: results files read by `show` and `compare`, outputs that would
// replace inputs, and failed writes to stdout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <streambuf>
#include <tuple>

#include "experiments/compare.h"
#include "experiments/results.h"
#include "experiments/statistics.h"
#include "experiments/table.h"
#include "framework/util/error.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using namespace testing::cli_names;  // NOLINT(build/namespaces)
using Json = nlohmann::json;

// One timing summary as gengraph writes it.
Json timing(double scale = 1) {
  return {{"median", 2 * scale}, {"min", 1 * scale}, {"max", 3 * scale},
          {"mean", 2 * scale},   {"stdev", scale},   {"values", {scale, 2 * scale, 3 * scale}}};
}

Json timings(double scale = 1) {
  return {{"time_to_first_token_ms", timing(scale)},
          {"decode_ms_per_token", timing(scale)},
          {"total_ms", timing(scale)},
          {"tokens_per_second", timing(1 / scale)}};
}

// One point of a results file with every field `show` and `compare` read: three rows (one with a
// bandwidth, an aoti report and a loop that fell back; one that ran the whole step; a failed
// peer).
Json point_doc() {
  return Json::parse(R"({
    "environment": {"gengraph_commit": "abc123", "torch_version": "2.11.0", "device": "cpu",
                    "dtype": "float32", "threads": 2},
    "model": {"source": "preset:gpt2-tiny", "model_type": "gpt2", "parameters": 182016},
    "generation": {"max_new_tokens": 2}, "inputs": {"batch_size": 1, "prompt_lengths": [2]},
    "run": {"warmup": 0, "repeats": 3},
    "bandwidth": {"read_bytes_per_second": 2.9e10, "copy_bytes_per_second": 2.2e10},
    "runs": [
      {"label": "eager", "backend": "eager",
       "outputs": [{"input": 0, "prompt_length": 2,
                    "sequences": [{"tokens": [5, 6], "score": -1.5, "text": "hi"}]}],
       "bandwidth": {"bytes_per_decode_step": 5e8, "bytes_moved_per_step": 6e8,
                     "fraction_of_read_bandwidth": 0.8, "fraction_of_copy_bandwidth": 1.1},
       "report": {"aoti_package_bytes": 1e6, "aoti_export_seconds": 1.0,
                  "aoti_compile_seconds": 2.0, "aoti_load_seconds": 0.1, "aoti_built": 1,
                  "aoti_freezing": 0, "sdpa_kernel": 1},
       "loop": {"whole_step": "auto", "ran_whole_step": false, "fallback": "a reason"}},
      {"label": "static", "backend": "eager", "tokens_match_first_row": true,
       "outputs": [{"input": 0, "prompt_length": 2,
                    "sequences": [{"tokens": [5, 6], "score": -1.5}]}],
       "loop": {"whole_step": "on", "ran_whole_step": true, "captured": false,
                "flag_reads": 3, "steps_run": 8}},
      {"label": "hf_eager", "backend": "peer:hf_eager", "error": "peer 'hf_eager': exit 1"}
    ]})");
}

Json complete_doc() {
  Json d = point_doc();
  d["runs"][0]["timings"] = timings();
  d["runs"][1]["timings"] = timings(0.5);
  d["schema_version"] = 1;
  d["experiment"] = "e";
  d["created"] = "2026-01-01T00:00:00Z";
  d["baseline"] = "eager";
  return d;
}

Json sweep_doc() {
  Json d = {{"schema_version", 1}, {"experiment", "e"}, {"baseline", "eager"}};
  for (const char* p : {"inputs.batch_size=1", "inputs.batch_size=2"}) {
    Json point = complete_doc();
    point.erase("schema_version");
    point["point"] = {p};
    d["points"].push_back(point);
  }
  d["missing_points"] = {{{"point", {"inputs.batch_size=3"}}, {"status", "no result"}}};
  return d;
}

// {exit status, stdout, stderr} of the CLI in-process.
std::tuple<int, std::string, std::string> cli_out(const std::vector<std::string>& args) {
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  const int rc = cli(args);
  std::string out = ::testing::internal::GetCapturedStdout();
  return {rc, out, ::testing::internal::GetCapturedStderr()};
}

// `show` and `compare` (both ways) of a results file holding `doc`: each must exit `rc`; returns
// their stderr, one after the other.
std::string show_and_compare(const TempDir& dir, const Json& doc, int rc) {
  write_file(dir / "m.json", doc.dump());
  // Compared with an undamaged file of the same shape, so that its rows are read.
  write_file(dir / "c.json", (doc.contains("points") ? sweep_doc() : complete_doc()).dump());
  std::string errors;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"show", (dir / "m.json").string()},
        {"compare", (dir / "m.json").string(), (dir / "c.json").string()},
        {"compare", (dir / "c.json").string(), (dir / "m.json").string()}}) {
    auto [got, out, err] = cli_out(args);
    EXPECT_EQ(got, rc) << args[0] << ": " << err;
    EXPECT_THAT(err, ::testing::Not(HasSubstr("json.exception"))) << args[0];
    errors += err;
  }
  return errors;
}

TEST(HostileResults, ACompleteFileShowsAndCompares) {
  // The fixture every other test damages: it must be accepted whole, or they test nothing.
  TempDir dir;
  for (const Json& doc : {complete_doc(), sweep_doc()}) {
    EXPECT_EQ(show_and_compare(dir, doc, 0), "");
    EXPECT_NO_THROW(format_table(doc, "x.json"));
  }
  const std::string table = format_table(complete_doc(), "x.json");
  EXPECT_THAT(table, HasSubstr("FAILED: peer 'hf_eager': exit 1"));
  EXPECT_THAT(table, HasSubstr("host loop (whole step not possible: a reason)"));
  EXPECT_THAT(table, HasSubstr("done flag read 3 times over 8 steps"));
  EXPECT_THAT(table, HasSubstr("input 0: [5,6]  score -1.5"));
}

TEST(HostileResults, AnEmptySweepIsShownAndComparedNotCrashed) {
  TempDir dir;
  const Json empty = {{"schema_version", 1}, {"experiment", "e"}, {"points", Json::array()}};
  write_file(dir / "e.json", empty.dump());
  write_file(dir / "s.json", sweep_doc().dump());
  auto [rc, out, err] = cli_out({"compare", (dir / "e.json").string(), (dir / "e.json").string()});
  EXPECT_EQ(rc, 0) << err;
  EXPECT_THAT(out, HasSubstr("no sweep point in either file"));
  std::tie(rc, out, err) =
      cli_out({"compare", (dir / "e.json").string(), (dir / "s.json").string()});
  EXPECT_EQ(rc, 0) << err;
  EXPECT_THAT(out, HasSubstr("[inputs.batch_size=1]\n  only in after"));
  std::tie(rc, out, err) =
      cli_out({"compare", (dir / "s.json").string(), (dir / "e.json").string()});
  EXPECT_EQ(rc, 0) << err;
  EXPECT_THAT(out, HasSubstr("[inputs.batch_size=2]\n  only in before"));
  std::tie(rc, out, err) = cli_out({"show", (dir / "e.json").string()});
  EXPECT_EQ(rc, 0) << err;
  EXPECT_EQ(out, "experiment e\n");
  // A file without a sweep and no rows.
  write_file(dir / "n.json", Json{{"schema_version", 1}, {"runs", Json::array()}}.dump());
  std::tie(rc, out, err) =
      cli_out({"compare", (dir / "n.json").string(), (dir / "n.json").string()});
  EXPECT_EQ(rc, 0) << err;
}

TEST(HostileResults, WrongTypedAndMissingFieldsAreNamedByTheirKeyPath) {
  TempDir dir;
  const std::string file = "'" + (dir / "m.json").string() + "' is not a gengraph results file: ";
  auto errors_of = [&](const std::function<void(Json&)>& damage, bool sweep = false) {
    Json d = sweep ? sweep_doc() : complete_doc();
    damage(d);
    return show_and_compare(dir, d, 1);
  };
  EXPECT_THAT(errors_of([](Json& d) { d["runs"][1]["timings"]["total_ms"]["median"] = "fast"; }),
              HasSubstr(file + "key 'runs[1].timings.total_ms.median': expected a measured value "
                               "> 0 and at most 1e12, found the string \"fast\""));
  EXPECT_THAT(errors_of([](Json& d) { d["runs"][0]["label"] = 7; }),
              HasSubstr(file + "key 'runs[0].label': expected a string, found 7"));
  EXPECT_THAT(errors_of([](Json& d) { d["runs"][1]["timings"] = "broken"; }),
              HasSubstr(file + "key 'runs[1].timings': expected an object, found the string "
                               "\"broken\""));
  EXPECT_THAT(errors_of([](Json& d) { d["runs"][0].erase("timings"); }),
              HasSubstr(file + "key 'runs[0].timings': expected an object, found nothing (the "
                               "key is missing)"));
  EXPECT_THAT(errors_of([](Json& d) { d["runs"][2] = 3; }),
              HasSubstr(file + "key 'runs[2]': expected an object, found 3"));
  EXPECT_THAT(errors_of([](Json& d) { d["points"][1]["point"] = {1}; }, true),
              HasSubstr(file + "key 'points[1].point[0]': expected a string, found 1"));
  EXPECT_THAT(errors_of(
                  [](Json& d) {
                    d["points"][0]["runs"][1]["timings"]["total_ms"]["values"] = {1, nullptr};
                  },
                  true),
              HasSubstr(file + "key 'points[0].runs[1].timings.total_ms.values[1]': expected a "
                               "measured value > 0 and at most 1e12, found null"));
  // show alone reads the header and the rows' details.
  auto show_error = [&](const std::function<void(Json&)>& damage) {
    Json d = complete_doc();
    damage(d);
    write_file(dir / "m.json", d.dump());
    auto [rc, err] = testing::cli_stderr({"show", (dir / "m.json").string()});
    EXPECT_EQ(rc, 1);
    EXPECT_THAT(err, ::testing::Not(HasSubstr("json.exception")));
    return err;
  };
  EXPECT_THAT(show_error([](Json& d) { d["model"].erase("model_type"); }),
              HasSubstr(file + "key 'model.model_type': expected a string, found nothing (the key "
                               "is missing)"));
  EXPECT_THAT(show_error([](Json& d) { d["run"]["repeats"] = 1e18; }),
              HasSubstr(file + "key 'run.repeats': expected an integer from 1 to 100000, found "
                               "1e+18"));
  // 0 is parsed as an unsigned integer: held to the range's lower end too.
  EXPECT_THAT(show_error([](Json& d) { d["run"]["repeats"] = 0; }),
              HasSubstr(file + "key 'run.repeats': expected an integer from 1 to 100000, found 0"));
  EXPECT_THAT(show_error([](Json& d) { d["inputs"]["batch_size"] = 0; }),
              HasSubstr(file + "key 'inputs.batch_size': expected an integer from 1 to "
                               "9223372036854775807, found 0"));
  // The header that every reader checks first (it was read with json's own value(), whose
  // type_error escaped as "[json.exception.type_error.302] ...").
  EXPECT_THAT(show_error([](Json& d) { d["schema_version"] = "1"; }),
              HasSubstr(file + "key 'schema_version': expected 1 (the results schema this gengraph "
                               "reads), found the string \"1\""));
  EXPECT_THAT(show_error([](Json& d) { d["runs"] = Json::object(); }),
              HasSubstr(file + "key 'runs': expected an array of runs (or 'points', each with "
                               "'runs'), found an object of 0 keys"));
  EXPECT_THAT(
      show_error([](Json& d) { d["runs"][0]["loop"]["ran_whole_step"] = "no"; }),
      HasSubstr(file + "key 'runs[0].loop.ran_whole_step': expected true or false, found the "
                       "string \"no\""));
  EXPECT_THAT(
      show_error([](Json& d) { d["runs"][0]["outputs"][0]["sequences"][0]["tokens"][1] = "x"; }),
      HasSubstr(file + "key 'runs[0].outputs[0].sequences[0].tokens[1]': expected an "
                       "integer, found the string \"x\""));
  EXPECT_THAT(
      show_error([](Json& d) { d["runs"][0]["bandwidth"]["fraction_of_copy_bandwidth"] = -1; }),
      HasSubstr(file + "key 'runs[0].bandwidth.fraction_of_copy_bandwidth': expected a "
                       "number >= 0, found -1"));
}

// Every node of the file replaced by a value of each JSON type, or removed: `show` and `compare`
// either read the file or refuse it with a gengraph::Error naming the file and a key path; never
// json's own exceptions, never a crash.
TEST(HostileResults, EveryFieldDamagedGivesAResultOrANamedError) {
  const std::vector<Json> replacements = {nullptr,        "x", -1, 0, 1e308, Json::array(),
                                          Json::object(), true};
  const ::testing::Matcher<std::string> named = ::testing::ContainsRegex(
      "^'m\\.json' is not a gengraph results file: key '[A-Za-z_][]A-Za-z_0-9.[]*': "
      "expected .*, found ");
  size_t cases = 0, refused = 0;
  for (const Json& original : {complete_doc(), sweep_doc()}) {
    std::vector<Json::json_pointer> nodes;
    std::function<void(const Json&, const Json::json_pointer&)> walk =
        [&](const Json& j, const Json::json_pointer& at) {
          if (!at.empty()) nodes.push_back(at);
          if (j.is_object()) {
            for (const auto& [k, v] : j.items()) walk(v, at / k);
          } else if (j.is_array()) {
            for (size_t i = 0; i < j.size(); ++i) walk(j[i], at / i);
          }
        };
    walk(original, Json::json_pointer());
    for (const auto& at : nodes) {
      for (size_t r = 0; r <= replacements.size(); ++r) {
        Json d = original;
        if (r == replacements.size()) {
          Json& parent = d[at.parent_pointer()];
          if (parent.is_object())
            parent.erase(at.back());
          else
            parent.erase(std::stoul(at.back()));
        } else {
          d[at] = replacements[r];
        }
        ++cases;
        try {
          (void)format_table(d, "m.json");
          const Json c1 = compare_documents(d, "m.json", original, "c.json", "total_ms");
          const Json c2 = compare_documents(original, "c.json", d, "m.json", "tokens_per_second");
          (void)format_comparison(c1);
          (void)format_comparison(c2);
        } catch (const Error& e) {
          ++refused;
          EXPECT_THAT(e.what(), named) << at.to_string() << " = " << r;
        } catch (const std::exception& e) {
          ADD_FAILURE() << at.to_string() << " = " << r << ": " << e.what();
        }
      }
    }
  }
  EXPECT_GT(cases, 500u);
  EXPECT_GT(refused, cases / 3);  // most damage is refused, not shown
  RecordProperty("cases", std::to_string(cases));
}

TEST(HostileResults, ImpossibleTimingsAreRefusedNamingTheKeyAndTheValue) {
  TempDir dir;
  const std::string file = "'" + (dir / "m.json").string() + "' is not a gengraph results file: ";
  const std::string key = "key 'runs[0].timings.total_ms.";
  struct Case {
    std::function<void(Json&)> damage;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](Json& t) {
         t["values"] = {1, -2, 3};
       },
       "values[1]': expected a measured value > 0 and at most 1e12, found -2"},
      {[](Json& t) { t["median"] = 0; },
       "median': expected a measured value > 0 and at most 1e12, found 0"},
      // NaN is written as null: there is no NaN in JSON.
      {[](Json& t) { t["mean"] = nullptr; },
       "mean': expected a measured value > 0 and at most "
       "1e12, found null"},
      {[](Json& t) { t["max"] = 1e308; },
       "max': expected a measured value > 0 and at most 1e12, "
       "found 1e+308"},
      {[](Json& t) { t["median"] = 7; },
       "median': expected a value within [min, max] = [1.0, "
       "3.0], found 7"},
      {[](Json& t) {
         t["values"] = {1, 2, 30};
       },
       "values[2]': expected a value within [min, max] "
       "= [1.0, 3.0], found 30"},
      {[](Json& t) { t["min"] = 5; }, "max': expected a value >= min (5.0), found 3"},
      {[](Json& t) { t["stdev"] = -1; },
       "stdev': expected a value >= 0 and at most 1e12, found -1"},
  };
  for (const auto& c : cases) {
    Json d = complete_doc();
    c.damage(d["runs"][0]["timings"]["total_ms"]);
    EXPECT_THAT(show_and_compare(dir, d, 1), HasSubstr(file + key + c.message)) << c.message;
  }
  // The same checks in the other metrics, which compare reads by --metric.
  Json d = complete_doc();
  d["runs"][1]["timings"]["decode_ms_per_token"]["values"][0] = -0.5;
  write_file(dir / "m.json", d.dump());
  auto [rc, err] = testing::cli_stderr({"show", (dir / "m.json").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr(file + "key 'runs[1].timings.decode_ms_per_token.values[0]': "
                                    "expected a measured value > 0 and at most 1e12, found -0.5"));
}

TEST(HostileResults, ControlCharactersFromTheFileAreEscapedForTheTerminal) {
  TempDir dir;
  Json d = complete_doc();
  d["runs"][0]["label"] = "evil\x1b[2J\x07";
  d["baseline"] = "evil\x1b[2J\x07";
  d["runs"][2]["error"] = "line\rover\nwritten";
  d["model"]["source"] = "pre\u202eset\xc2\x9b";
  d["experiment"] = "e\tx";
  d["environment"]["device"] = "cpu\x1b]0;title\x07";
  d["runs"][0]["loop"]["fallback"] = "\x1b[31mred";
  write_file(dir / "r.json", d.dump());
  Json other = complete_doc();
  other["runs"][0]["label"] = "evil\x1b[2J\x07";
  write_file(dir / "o.json", other.dump());
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"show", (dir / "r.json").string()},
        {"compare", (dir / "r.json").string(), (dir / "o.json").string()}}) {
    auto [rc, out, err] = cli_out(args);
    ASSERT_EQ(rc, 0) << err;
    for (char c : out) {
      const auto u = static_cast<unsigned char>(c);
      ASSERT_TRUE(u >= 0x20 || c == '\n') << args[0] << ": control character " << int{u};
    }
    EXPECT_THAT(out, HasSubstr("evil\\x1b[2J\\x07")) << args[0];
    EXPECT_THAT(out, HasSubstr("pre\\u202eset\\u009b")) << args[0];
    EXPECT_THAT(out, ::testing::Not(HasSubstr("\xe2\x80\xae"))) << args[0];
    if (args[0] == "show") {
      EXPECT_THAT(out, HasSubstr("experiment e\\tx\n"));
      EXPECT_THAT(out, HasSubstr("FAILED: line\\rover\\nwritten\n"));
      EXPECT_THAT(out, HasSubstr("cpu\\x1b]0;title\\x07"));
      EXPECT_THAT(out, HasSubstr("whole step not possible: \\x1b[31mred)"));
    }
  }
  // Error messages too (here a value quoted from the file name), line breaks kept; the comparison
  // document keeps the text as it was.
  write_file(dir / "bad\x1b[31m.json", "{");
  auto [rc, err] = testing::cli_stderr({"show", (dir / "bad\x1b[31m.json").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("bad\\x1b[31m.json"));
  EXPECT_THAT(err, ::testing::Not(HasSubstr("\x1b")));
  const Json c = compare_documents(d, "r.json", other, "o.json", "total_ms");
  EXPECT_EQ(c["points"][0]["rows"][0]["label"], "evil\x1b[2J\x07");
  // Bytes that are not UTF-8, C1 controls, overlong forms and bidirectional marks.
  EXPECT_EQ(terminal_text("a\xff"
                          "b\xc0\xafz\xe2\x81\xa6q\xc2\x85"),
            "a\\xffb\\xc0\\xafz\\u2066q\\u0085");
  EXPECT_EQ(terminal_text("ok \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"),
            "ok \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  EXPECT_EQ(terminal_text("a\nb\tc\x7f", true), "a\nb\tc\\x7f");
  // A long setting is cut on a character boundary: the comparison stays valid UTF-8.
  Json longer = complete_doc();
  longer["model"]["source"] = std::string(86, 'a') + "\xc3\xa9\xc3\xa9\xc3\xa9";
  const Json c2 = compare_documents(longer, "a", complete_doc(), "b", "total_ms");
  EXPECT_NO_THROW(c2.dump());
  EXPECT_EQ(c2["settings_that_differ"][0]["before"], std::string(86, 'a') + "...");
}

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

// The CLI binary beside the test binary's folder (build/gengraph for build/tests/gengraph_tests),
// or "" when it was not built there.
std::filesystem::path cli_binary() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const auto bin = self.parent_path().parent_path() / "gengraph";
  return std::filesystem::is_regular_file(bin, ec) ? bin : std::filesystem::path();
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
  const auto bin = cli_binary();
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

}  // namespace
}  // namespace gengraph
