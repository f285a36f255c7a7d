// Hostile and careless input, second pass (issue 25): one test per defect class
// (docs/reliability.md). This file: results files read by `show` and `compare`, outputs that would
// replace inputs, and failed writes to stdout.
#include "tests/experiments/hostile_results_support.h"

namespace gengraph {
namespace {

using namespace hostile_results;  // NOLINT: this file's helpers

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

}  // namespace
}  // namespace gengraph
