// Rival engines as peers (experiments/peers, tools/engine_peer.py): the settings each cannot
// honour refused before anything runs, CTranslate2's rows beside gengraph's with the same greedy
// tokens, llama.cpp's where it is installed, and the reasons a row gives when an engine is missing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <regex>

#include "experiments/experiment/experiment_config.h"
#include "experiments/experiment/runner.h"
#include "experiments/tools/peers.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using ::testing::HasSubstr;

ResolvedSettings settings(const std::string& yaml) {
  const auto c = parse_experiment(
      "model: {preset: gpt2-tiny}\ninputs: {prompts: [[1, 2]]}\n"
      "generation: " +
          yaml + "\n",
      "g.yaml");
  ResolvedSettings g;
  for (auto it = c.generation.begin(); it != c.generation.end(); ++it)
    apply_generation_key(g, it.key(), it.value(), "generation");
  return g;
}

std::string refusal(const std::string& peer, const std::string& yaml,
                    const std::string& device = "cpu") {
  return peer_refusal(peer, settings(yaml), device, "float32");
}

TEST(EnginePeers, WhatAnEngineCannotHonourIsRefusedNamingTheSetting) {
  // llama.cpp: no beams, one sequence per prompt, CPU only.
  EXPECT_EQ(refusal("llama_cpp", "{num_beams: 4}"),
            "generation.num_beams = 4: llama.cpp (llama-cpp-python) has no beam search; drop the "
            "peer or the beams");
  EXPECT_THAT(refusal("llama_cpp_q8_0", "{do_sample: true, num_return_sequences: 2}"),
              HasSubstr("generation.num_return_sequences = 2"));
  EXPECT_THAT(refusal("llama_cpp", "{max_new_tokens: 2}", "cuda"),
              HasSubstr("model.device = cuda: the llama.cpp peers run on the CPU only"));
  EXPECT_THAT(
      refusal("llama_cpp", "{repetition_penalty: 1.2}"),
      HasSubstr("generation.repetition_penalty = 1.2: the llama.cpp peers do not support it"));
  // CTranslate2: penalties it applies to the generated tokens only, sampling with beams, several
  // sampled sequences, gengraph's own extensions.
  EXPECT_THAT(refusal("ct2", "{repetition_penalty: 1.2}"),
              HasSubstr("CTranslate2 applies it to the generated tokens only"));
  EXPECT_THAT(refusal("ct2_int8", "{no_repeat_ngram_size: 3}"),
              HasSubstr("generation.no_repeat_ngram_size = 3"));
  EXPECT_THAT(refusal("ct2", "{do_sample: true, num_beams: 2}"),
              HasSubstr("CTranslate2 samples without beams only"));
  EXPECT_THAT(refusal("ct2", "{do_sample: true, num_return_sequences: 2}"),
              HasSubstr("return several sequences from beams only"));
  EXPECT_THAT(refusal("ct2", "{num_beams: 2, early_stopping: never}"),
              HasSubstr("generation.early_stopping = \"never\""));
  EXPECT_THAT(refusal("ct2", "{do_sample: true, min_p: 0.1}"),
              HasSubstr("generation.min_p = 0.1: the CTranslate2 peers do not support it"));
  EXPECT_THAT(refusal("ct2", "{processors: [{name: temperature, temperature: 0.5}]}"),
              HasSubstr("generation.processors = [{\"name\":\"temperature\",\"temperature\":0.5}]: "
                        "a gengraph extension CTranslate2 does not have"));
  EXPECT_THAT(refusal("ct2", "{top_logprobs: 2}"),
              HasSubstr("generation.top_logprobs = 2: a gengraph extension CTranslate2 does not "
                        "have"));
  EXPECT_THAT(refusal("llama_cpp", "{top_logprobs: 5}"),
              HasSubstr("generation.top_logprobs = 5: a gengraph extension llama.cpp does not "
                        "have"));
  // What they can run: lengths, EOS, greedy, beams (CTranslate2), sampling with the warpers they
  // have; a warper without sampling, or a beam setting without beams, acts on nothing.
  for (const char* peer : {"ct2", "ct2_int8", "llama_cpp", "llama_cpp_q4_0"}) {
    EXPECT_EQ(refusal(peer, "{max_new_tokens: 8, min_new_tokens: 8, eos_token_id: [3]}"), "")
        << peer;
    EXPECT_EQ(refusal(peer, "{do_sample: true, temperature: 0.7, top_k: 5, top_p: 0.9}"), "")
        << peer;
    EXPECT_EQ(refusal(peer, "{min_p: 0.2, typical_p: 0.5, length_penalty: 2.0}"), "") << peer;
  }
  EXPECT_EQ(refusal("ct2", "{num_beams: 4, num_return_sequences: 2, length_penalty: 0.5}"), "");
  EXPECT_EQ(refusal("llama_cpp", "{do_sample: true, min_p: 0.1}"), "");
  EXPECT_EQ(refusal("hf_eager", "{num_beams: 4, repetition_penalty: 1.5}"), "");
  // transformers: gengraph's extensions and diverse beam search (which tools/hf_peer.py would
  // refuse only once gengraph's rows had run).
  const std::vector<std::array<const char*, 3>> transformers_refuses = {
      {"hf_eager", "{strategy: beam_search, num_beams: 2}",
       "generation.strategy = {\"name\":\"beam_search\"}: a gengraph extension transformers "
       "does not have"},
      {"hf_jit_trace", "{stop_sequences: [[1, 2]]}", "generation.stop_sequences = [[1,2]]"},
      {"hf_eager", "{frequency_penalty: 0.5}", "generation.frequency_penalty = 0.5"},
      {"hf_eager", "{top_logprobs: 3}",
       "generation.top_logprobs = 3: a gengraph extension transformers does not have"},
      {"hf_eager", "{num_beams: 4, num_beam_groups: 2, diversity_penalty: 1.0}",
       "diverse beam search is not in transformers 5.17's generate()"}};
  for (const auto& [peer, yaml, why] : transformers_refuses) {
    EXPECT_THAT(refusal(peer, yaml), HasSubstr(why)) << peer << " " << yaml;
  }
}

TEST(EnginePeers, RefusalsComeAtValidationNamingThePeerAndTheSweepPoint) {
  const std::string base =
      "model: {preset: gpt2-tiny}\npeers: [hf_eager, {name: llama_cpp, label: lcpp}]\n"
      "inputs: {prompts: [[1, 2]]}\ngeneration: {max_new_tokens: 2}\n";
  EXPECT_EQ(testing::error_of([&] { check_experiment(parse_experiment(base, "s.yaml")); }),
            "<no error>");
  const std::string text = base + "sweep: {generation.num_beams: [1, 3]}\n";
  const auto c = parse_experiment(text, "s.yaml");
  EXPECT_THAT(
      testing::error_of([&] { check_experiment(c); }),
      HasSubstr("sweep point [generation.num_beams=3]: s.yaml: peers: 'lcpp' cannot run "
                "generation.num_beams = 3: llama.cpp (llama-cpp-python) has no beam search"));
  EXPECT_THAT(testing::error_of([&] { parse_experiment(text, "s.yaml", {"peers=[ct2_in8]"}); }),
              HasSubstr("unknown peer 'ct2_in8' (did you mean 'ct2_int8'?)"));
}

std::string python() { return std::string(GENGRAPH_SOURCE_DIR) + "/.venv/bin/python"; }

// `tools/engine_peer.py --check ENGINE`: "" when ready, else what it printed.
std::string engine_missing(const std::string& engine, const std::filesystem::path& err) {
  const std::string cmd = "\"" + python() + "\" \"" + GENGRAPH_SOURCE_DIR +
                          "/tools/engine_peer.py\" --check " + engine + " > /dev/null 2> \"" +
                          err.string() + "\"";
  if (std::system(cmd.c_str()) == 0) return "";
  const std::string why = testing::read_file(err);
  return why.empty() ? "(no message)" : why;
}

// CTranslate2 float32 and int8 on a preset's random weights (converted once per content: the
// second run, whose temporary copy of the weights is new, reuses the conversion): float32 gives
// gengraph's greedy tokens, int8 exactly as many.
TEST(EnginePeers, Ct2RowsRunBesideGengraphAndFloat32GivesItsGreedyTokens) {
  testing::TempDir dir;
  const testing::ScopedEnv cache("GENGRAPH_CACHE", (dir / "cache").string());
  if (const auto why = engine_missing("ct2", dir / "err.txt"); !why.empty()) GTEST_SKIP() << why;
  testing::write_file(dir / "p.yaml",
                      "model: {preset: llama-tiny, seed: 3}\nbackends: [eager]\n"
                      "peers: [ct2, ct2_int8]\ninputs: {prompts: [[1, 2, 3, 4, 5], [6, 7]]}\n"
                      "generation: {max_new_tokens: 12, min_new_tokens: 12}\n"
                      "run: {warmup: 1, repeats: 2, threads: 1}\n");
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_EQ(testing::run_quietly(dir / "p.yaml", dir / "p.json"), 0);
    const auto doc = nlohmann::json::parse(testing::read_file(dir / "p.json"));
    ASSERT_EQ(doc["runs"].size(), 3u);
    const auto &ct2 = doc["runs"][1], &int8 = doc["runs"][2];
    EXPECT_EQ(ct2["backend"], "peer:ct2");
    EXPECT_EQ(int8["backend"], "peer:ct2_int8");
    EXPECT_TRUE(ct2["tokens_match_first_row"].get<bool>());
    EXPECT_EQ(ct2["outputs"], doc["runs"][0]["outputs"]);
    for (const auto* r : {&ct2, &int8}) {
      for (const auto& in : (*r)["outputs"])
        EXPECT_EQ(in["sequences"][0]["tokens"].size(), 12u) << (*r)["label"];
      EXPECT_EQ((*r)["timings"]["total_ms"]["values"].size(), 2u);
      EXPECT_GT((*r)["timings"]["time_to_first_token_ms"]["median"].get<double>(), 0.0);
      EXPECT_EQ((*r)["peer"]["engine"], "ctranslate2");
      EXPECT_EQ((*r)["peer"]["conversion"]["cached"].get<bool>(), pass == 1) << pass;
    }
    EXPECT_EQ(ct2["peer"]["compute_type"], "float32");
    EXPECT_EQ(int8["peer"]["compute_type"], "int8");
  }
  // Beams: the same beams as gengraph's (their scores may differ: CTranslate2 bans EOS for
  // min_new_tokens after normalising, transformers before).
  testing::write_file(dir / "b.yaml",
                      "model: {preset: llama-tiny, seed: 3}\nbackends: [eager]\npeers: [ct2]\n"
                      "inputs: {prompts: [[1, 2, 3, 4, 5], [6, 7]]}\n"
                      "generation: {max_new_tokens: 6, num_beams: 3, num_return_sequences: 2}\n"
                      "run: {warmup: 0, repeats: 1}\n");
  ASSERT_EQ(testing::run_quietly(dir / "b.yaml", dir / "b.json"), 0);
  const auto beams = nlohmann::json::parse(testing::read_file(dir / "b.json"));
  EXPECT_TRUE(beams["runs"][1]["tokens_match_first_row"].get<bool>());
  EXPECT_EQ(beams["runs"][1]["outputs"][1]["sequences"].size(), 2u);
}

// llama.cpp's rows where llama-cpp-python is installed (never built here: GENGRAPH_PEER_INSTALL=0).
TEST(EnginePeers, LlamaCppRowsRunWhereItIsInstalled) {
  testing::TempDir dir;
  const testing::ScopedEnv no_build("GENGRAPH_PEER_INSTALL", "0");
  if (const auto why = engine_missing("llama_cpp", dir / "err.txt"); !why.empty())
    GTEST_SKIP() << "llama-cpp-python is not installed: " << why;
  testing::write_file(dir / "p.yaml",
                      "model: {preset: llama-tiny, seed: 3}\nbackends: [eager]\n"
                      "peers: [llama_cpp, llama_cpp_q8_0, llama_cpp_q4_0]\n"
                      "inputs: {prompts: [[1, 2, 3, 4, 5], [6, 7]]}\n"
                      "generation: {max_new_tokens: 12, min_new_tokens: 12, eos_token_id: [2]}\n"
                      "run: {warmup: 1, repeats: 2, threads: 1}\n");
  ASSERT_EQ(testing::run_quietly(dir / "p.yaml", dir / "p.json"), 0);
  const auto doc = nlohmann::json::parse(testing::read_file(dir / "p.json"));
  ASSERT_EQ(doc["runs"].size(), 4u);
  // float32 GGUF: gengraph's greedy tokens; the quantized ones: exactly as many (EOS banned).
  EXPECT_TRUE(doc["runs"][1]["tokens_match_first_row"].get<bool>());
  for (int k : {1, 2, 3}) {
    const auto& r = doc["runs"][k];
    EXPECT_FALSE(r.contains("error")) << r.dump();
    for (const auto& in : r["outputs"]) EXPECT_EQ(in["sequences"][0]["tokens"].size(), 12u);
    EXPECT_EQ(r["peer"]["engine"], "llama.cpp");
  }
  EXPECT_EQ(doc["runs"][1]["peer"]["kv_cache_type"], "f32");
  EXPECT_EQ(doc["runs"][1]["peer"]["flash_attention"], "off");
  EXPECT_EQ(doc["runs"][2]["peer"]["conversion"]["format"], "q8_0");
  EXPECT_EQ(doc["runs"][3]["peer"]["conversion"]["format"], "q4_0");
}

// An engine that is not installed (and may not be built now), or whose build failed: the row
// fails with the reason, gengraph's rows stay, the run exits 3. The tool refuses settings itself
// too, for a request that did not come through validation.
TEST(EnginePeers, AMissingEngineFailsItsRowWithTheReason) {
  testing::TempDir dir;
  const testing::ScopedEnv cache("GENGRAPH_CACHE", (dir / "cache").string());
  const testing::ScopedEnv no_build("GENGRAPH_PEER_INSTALL", "0");
  testing::write_file(dir / "p.yaml",
                      "model: {preset: gpt2-tiny}\nbackends: [eager]\npeers: [llama_cpp]\n"
                      "inputs: {prompts: [[1, 2, 3]]}\ngeneration: {max_new_tokens: 3}\n"
                      "run: {warmup: 0, repeats: 1}\n");
  const auto out = dir / "p.json";
  EXPECT_EQ(testing::run_quietly(dir / "p.yaml", out), 3);
  auto doc = nlohmann::json::parse(testing::read_file(out));
  EXPECT_EQ(doc["runs"][0]["outputs"][0]["sequences"][0]["tokens"].size(), 3u);
  const std::string error = doc["runs"][1]["error"].get<std::string>();
  EXPECT_THAT(error, HasSubstr("peer 'llama_cpp': llama-cpp-python 0.3.36 is not installed in '" +
                               (dir / "cache").string() + "/peers/llama-cpp-python-0.3.36-"));
  EXPECT_THAT(error, HasSubstr("GENGRAPH_PEER_INSTALL=0 forbids building it"));
  // A failed build is remembered with its reason.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(error, m, std::regex("in '([^']+)'")));
  testing::write_file(m[1].str() + ".unavailable", "building it failed: no compiler\n");
  EXPECT_EQ(testing::run_quietly(dir / "p.yaml", out), 3);
  doc = nlohmann::json::parse(testing::read_file(out));
  EXPECT_THAT(doc["runs"][1]["error"].get<std::string>(),
              HasSubstr("llama-cpp-python 0.3.36 could not be installed: building it failed: no "
                        "compiler\n  (remove '" +
                        m[1].str() + ".unavailable' to try again)"));

  // The tool's own check of the resolved settings.
  testing::write_file(dir / "req.json",
                      nlohmann::json{{"peer", "llama_cpp"},
                                     {"label", "l"},
                                     {"model", "/nonexistent"},
                                     {"dtype", "float32"},
                                     {"device", "cpu"},
                                     {"prompts", {{1, 2}}},
                                     {"generation", {{"max_new_tokens", 2}, {"num_beams", 4}}},
                                     {"warmup", 0},
                                     {"repeats", 1},
                                     {"seed", 0},
                                     {"threads", 1}}
                          .dump());
  const std::string cmd = "\"" + python() + "\" \"" + GENGRAPH_SOURCE_DIR +
                          "/tools/engine_peer.py\" --request \"" + (dir / "req.json").string() +
                          "\" --out \"" + (dir / "out.json").string() + "\" 2> /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_THAT(
      nlohmann::json::parse(testing::read_file(dir / "out.json"))["error"].get<std::string>(),
      HasSubstr("llama_cpp cannot run generation.num_beams = 4: llama.cpp "
                "(llama-cpp-python) has no beam search"));
}

}  // namespace
}  // namespace gengraph
