// Issue 49's file classes: a safetensors header that is not JSON, and symbolic link loops where a
// model folder, an experiment file, an output or a cache folder is expected. Each is refused in
// our words, naming the file and what it was for; no "json.exception" or "filesystem error" text.
#include <gengraph/gengraph.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "framework/model/loader.h"
#include "framework/model/safetensors.h"
#include "framework/util/path_errors.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using namespace testing::cli_names;  // NOLINT(build/namespaces)
using ::testing::Not;

constexpr const char* kLoop = "a symbolic link loop (too many levels of symbolic links)";

// Raw safetensors bytes: the 8-byte length, then `header` as it is.
std::string with_header(const std::string& header) {
  const uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header;
}

void expect_no_library_text(const std::string& err) {
  EXPECT_THAT(err, Not(HasSubstr("json.exception")));
  EXPECT_THAT(err, Not(HasSubstr("filesystem error")));
  EXPECT_THAT(err, Not(HasSubstr("Too many levels")));
}

TEST(HostilePaths, ASafetensorsHeaderThatIsNotJsonIsNamedWithItsBytes) {
  TempDir dir;
  const auto file = dir / "model.safetensors";
  for (const std::string header : {std::string("{\"a\": [1, 2"), std::string("not json at all"),
                                   std::string("{\"x\": 1e999}"), std::string("{\"\xff\": 1}")}) {
    SCOPED_TRACE(header);
    write_file(file, with_header(header));
    const std::string err = testing::error_of([&] { SafetensorsFile::open(file); });
    EXPECT_THAT(err, HasSubstr("'" + file.string() + "': the safetensors header (bytes 8 to " +
                               std::to_string(8 + header.size() - 1) + ") is not valid JSON: "));
    EXPECT_THAT(err, HasSubstr("at line 1, column "));
    expect_no_library_text(err);
  }
  write_file(file, with_header(""));
  EXPECT_THAT(testing::error_of([&] { SafetensorsFile::open(file); }),
              HasSubstr("the header is empty (length 0), expected a JSON object"));
  // Through the CLI: a model folder holding such a file.
  std::filesystem::copy_file(testing::fixtures_dir() + "/models/gpt2-a/config.json",
                             dir / "config.json");
  write_file(file, with_header("{\"transformer.wte.weight\": {\"dtype\": \"F32\","));
  auto [rc, err] =
      testing::cli_stderr({"generate", "--model", dir.path().string(), "--prompt", "1", "--quiet"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("the safetensors header (bytes 8 to "));
  expect_no_library_text(err);
}

// A link to itself where a model folder is expected: as --model, model.path, the Engine's model,
// a draft model; and a config.json or model.safetensors that loops inside a real folder.
TEST(HostilePaths, ASymlinkLoopForAModelFolderIsNamed) {
  TempDir dir;
  const auto m = dir / "m";
  std::filesystem::create_symlink(m, m);
  auto [rc, err] =
      testing::cli_stderr({"generate", "--model", m.string(), "--prompt", "1", "--quiet"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("'" + m.string() + "': " + kLoop));
  expect_no_library_text(err);

  write_file(dir / "e.yaml", "model: {path: '" + m.string() +
                                 "'}\nbackends: [eager]\ninputs: {prompts: [[1, 2]]}\n");
  for (const char* cmd : {"validate", "run"}) {
    SCOPED_TRACE(cmd);
    std::vector<std::string> args = {cmd, (dir / "e.yaml").string()};
    if (std::string(cmd) == "run")
      args.insert(args.end(), {"--quiet", "--output", (dir / "o.json").string()});
    std::tie(rc, err) = testing::cli_stderr(args);
    EXPECT_EQ(rc, 1);
    EXPECT_THAT(err, HasSubstr("model folder '" + m.string() + "': " + kLoop));
    expect_no_library_text(err);
  }

  err = testing::error_of([&] { Engine engine(m.string()); });
  EXPECT_THAT(err, HasSubstr("'" + m.string() + "': " + kLoop));
  expect_no_library_text(err);

  Engine tiny("gpt2-tiny");
  err = testing::error_of([&] {
    tiny.generate({{1, 2}}, nlohmann::json{{"max_new_tokens", 2},
                                           {"candidate_generator",
                                            {{"name", "draft_model"}, {"model", m.string()}}}});
  });
  EXPECT_THAT(err, HasSubstr("'" + m.string() + "': " + kLoop));
  expect_no_library_text(err);

  // Inside a folder: config.json, then model.safetensors, each a link to itself.
  const auto f = dir / "f";
  std::filesystem::create_directories(f);
  std::filesystem::create_symlink(f / "config.json", f / "config.json");
  std::tie(rc, err) =
      testing::cli_stderr({"generate", "--model", f.string(), "--prompt", "1", "--quiet"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("'" + (f / "config.json").string() + "': " + kLoop));
  expect_no_library_text(err);
  std::filesystem::remove(f / "config.json");
  std::filesystem::copy_file(testing::fixtures_dir() + "/models/gpt2-a/config.json",
                             f / "config.json");
  std::filesystem::create_symlink(f / "model.safetensors", f / "model.safetensors");
  std::tie(rc, err) =
      testing::cli_stderr({"generate", "--model", f.string(), "--prompt", "1", "--quiet"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("'" + (f / "model.safetensors").string() + "': " + kLoop));
  expect_no_library_text(err);
}

TEST(HostilePaths, ASymlinkLoopForAnExperimentFileIsNamed) {
  TempDir dir;
  const auto e = dir / "e.yaml";
  std::filesystem::create_symlink(e, e);
  for (const char* cmd : {"validate", "run"}) {
    SCOPED_TRACE(cmd);
    std::vector<std::string> args = {cmd, e.string()};
    if (std::string(cmd) == "run") args.push_back("--quiet");
    auto [rc, err] = testing::cli_stderr(args);
    EXPECT_EQ(rc, 1);
    EXPECT_THAT(err, HasSubstr("'" + e.string() + "'"));
    EXPECT_THAT(err, HasSubstr(kLoop));
    expect_no_library_text(err);
  }
}

// The output itself a loop, or a folder on its way one.
TEST(HostilePaths, ASymlinkLoopForAnOutputPathIsNamed) {
  TempDir dir;
  const auto out = dir / "out.json";
  std::filesystem::create_symlink(out, out);
  const auto loop = dir / "lp";
  std::filesystem::create_symlink(loop, loop);
  for (const auto& path : {out, loop / "out.json", loop / "sub" / "out.json"}) {
    SCOPED_TRACE(path.string());
    auto [rc, err] =
        testing::cli_stderr({"generate", "--model", "gpt2-tiny", "--prompt", "1",
                             "--max-new-tokens", "2", "--quiet", "--output", path.string()});
    EXPECT_EQ(rc, 1);
    EXPECT_THAT(err, HasSubstr("results '" + path.string() + "': " + kLoop));
    expect_no_library_text(err);
  }
  // A trace cache folder that loops.
  write_file(dir / "t.yaml",
             "model: {preset: gpt2-tiny}\nbackends: [{name: trace, options: {cache_dir: '" +
                 loop.string() +
                 "'}}]\ninputs: {prompts: [[1, 2]]}\ngeneration: {max_new_tokens: 2}\n"
                 "run: {warmup: 0, repeats: 1}\n");
  auto [rc, err] = testing::cli_stderr(
      {"run", (dir / "t.yaml").string(), "--quiet", "--output", (dir / "t.json").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr(kLoop));
  EXPECT_THAT(err, HasSubstr(loop.string()));
  expect_no_library_text(err);
}

// What gets through to the top is still said in our words.
TEST(HostilePaths, AFilesystemErrorThatGetsThroughIsDescribedInOurWords) {
  const std::filesystem::filesystem_error e(
      "status", "/a/b", std::make_error_code(std::errc::too_many_symbolic_link_levels));
  EXPECT_EQ(describe_filesystem_error(e), "'/a/b': " + std::string(kLoop));
  EXPECT_EQ(path_problem(std::make_error_code(std::errc::permission_denied)), "permission denied");
}

}  // namespace
}  // namespace gengraph
