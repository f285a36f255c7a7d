// The Python tools through the CLI: texts in and out with a folder's tokenizer, transformers peers
// beside the backends, failures and interrupts while a tool runs (experiments/python_tools,
// process).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <optional>
#include <thread>

#include "experiments/results/table.h"
#include "framework/decoding/resolved_settings.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using namespace testing::cli_names;  // NOLINT(build/namespaces)

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
    EXPECT_THAT(table, HasSubstr("[" + std::to_string(k) + "] " + t["inputs"]["texts"][k].dump() +
                                 " -> \"" + words + "\""));
  }
  EXPECT_FALSE(i["runs"][0]["outputs"][0]["sequences"][0].contains("text"));
  // A word-level tokenizer is not one the native reader handles: the Python tokenizer took over,
  // and the results say so and why.
  EXPECT_THAT(
      t["inputs"]["tokenizer"].get<std::string>(),
      HasSubstr("python: tools/hf_tokenizer.py (transformers) on '" + folder.string() +
                "' (the native tokenizer refused it: '" + (folder / "tokenizer.json").string() +
                "': model 'WordLevel' is not supported natively (supported: BPE))"));
  // --tokenizer native refuses instead of falling back.
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"generate", "--model", folder.string(), "--text", "w5", "--tokenizer", "native",
                 "--max-new-tokens", "1", "--output", text_out.string(), "--quiet"}),
            1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("unsupported tokenizer: '" + (folder / "tokenizer.json").string() +
                        "': model 'WordLevel' is not supported natively"));

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
  EXPECT_THAT(
      ::testing::internal::GetCapturedStderr(),
      HasSubstr("give --prompt IDS or --text TEXT (one or more of either), or --prompts FILE"));
  write_file(dir / "e.yaml", "model: {preset: gpt2-tiny}\ninputs: {texts: [\"\"]}\n");
  EXPECT_THAT(error_of_run({"validate", (dir / "e.yaml").string()}),
              HasSubstr("inputs.texts[0]: expected a non-empty string"));
  write_file(dir / "f.yaml", "model: {preset: gpt2-tiny}\ninputs: {texts: [a], prompts: [[1]]}\n");
  EXPECT_THAT(
      error_of_run({"validate", (dir / "f.yaml").string()}),
      HasSubstr("exactly one of inputs.prompts (token-id lists), inputs.texts, inputs.messages, "
                "inputs.file or inputs.synthetic"));
  // A tokenizer file that is not JSON: the native reader names it (no fallback for a damaged file).
  const auto broken = dir / "broken";
  std::filesystem::copy(folder, broken);
  write_file(broken / "tokenizer.json", "{not json");
  const auto out = dir / "b.json";
  EXPECT_THAT(error_of_run({"generate", "--model", broken.string(), "--text", "w1", "--output",
                            out.string(), "--quiet"}),
              HasSubstr("'" + (broken / "tokenizer.json").string() + "' is not valid JSON"));
  EXPECT_FALSE(std::filesystem::exists(out));
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
  ASSERT_EQ(testing::run_quietly(dir / "p.yaml", dir / "p.json"), 0);
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

// run.peer_order: interleaved times a peer in turn with gengraph's rows, a process a repeat: its
// row holds one value per repeat, says how it was timed, and its ratio to the baseline is paired
// (an interval) instead of a ratio of medians; the table says so. A failing peer still fails by
// name without costing the rows.
TEST(Cli, InterleavedPeersArePairedWithTheBaselineRepeatByRepeat) {
  testing::TempDir dir;
  testing::write_file(dir / "p.yaml",
                      "model: {preset: gpt2-tiny, seed: 2}\n"
                      "backends: [eager]\npeers: [hf_eager]\n"
                      "inputs: {prompts: [[1, 2, 3]]}\n"
                      "generation: {max_new_tokens: 3}\n"
                      "run: {warmup: 0, repeats: 3, peer_order: interleaved}\n");
  ASSERT_EQ(testing::run_quietly(dir / "p.yaml", dir / "p.json"), 0);
  const auto doc = nlohmann::json::parse(testing::read_file(dir / "p.json"));
  ASSERT_EQ(doc["runs"].size(), 2u);
  const auto& peer = doc["runs"][1];
  EXPECT_EQ(peer["backend"], "peer:hf_eager");
  EXPECT_EQ(peer["order"], "interleaved");
  EXPECT_TRUE(peer["tokens_match_first_row"].get<bool>());
  EXPECT_TRUE(peer["deterministic_across_repeats"].get<bool>());
  EXPECT_EQ(peer["timings"]["total_ms"]["values"].size(), 3u);
  EXPECT_EQ(peer["timings"]["decode_ms_per_token"]["values"].size(), 3u);
  EXPECT_THAT(peer["peer"]["note"].get<std::string>(), HasSubstr("in turn with gengraph's rows"));
  EXPECT_EQ(peer["vs_baseline"]["method"],
            "median of paired per-repeat ratios, order-statistic interval");
  EXPECT_TRUE(peer["vs_baseline"].contains("low"));
  EXPECT_THAT(doc["run"]["peer_order"].get<std::string>(), HasSubstr("interleaved"));
  const std::string table = format_table(doc);
  EXPECT_THAT(table, HasSubstr("the same for peers timed in turn with them"));

  const testing::ScopedEnv env("GENGRAPH_PYTHON", "/bin/false");
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"run", (dir / "p.yaml").string(), "--output", (dir / "f.json").string()}), 3);
  ::testing::internal::GetCapturedStdout();
  ::testing::internal::GetCapturedStderr();
  const auto failed = nlohmann::json::parse(testing::read_file(dir / "f.json"));
  ASSERT_EQ(failed["runs"].size(), 2u);
  EXPECT_EQ(failed["runs"][0]["timings"]["total_ms"]["values"].size(), 3u);
  EXPECT_THAT(failed["runs"][1]["error"].get<std::string>(),
              HasSubstr("tools/hf_peer.py failed (exit 1"));
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
  ASSERT_EQ(testing::run_quietly(dir / "p.yaml", dir / "p.json"), 0);
  const auto doc = nlohmann::json::parse(testing::read_file(dir / "p.json"));
  ASSERT_EQ(doc["runs"].size(), 2u);
  const auto& r = doc["runs"][1];
  EXPECT_EQ(r["backend"], "peer:hf_static_compile");
  EXPECT_TRUE(r["tokens_match_first_row"].get<bool>());
  ASSERT_TRUE(r.contains("max_score_difference_to_first_row"));
  EXPECT_LT(r["max_score_difference_to_first_row"].get<double>(), 1e-4);
}

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

}  // namespace
}  // namespace gengraph
