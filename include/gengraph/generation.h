// What a generation returns, a public header: the Engine's result (gengraph.h) and the decoding
// loop's (framework/decoding/generator.h) are this one type.
#pragma once

#include <gengraph/stream.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace gengraph {

// The whole decoding step on the device (docs/architecture.md#the-whole-step-on-the-device), as
// asked for (RunOptions, the decoding loop's LoopOptions): kOff the host loop; kAuto the whole
// step when every part allows it, else the host loop (Generation::whole_step_fallback says why);
// kOn the whole step, or an error naming the part that prevents it.
enum class WholeStep { kOff, kAuto, kOn };

struct Sequence {
  std::vector<int64_t> tokens;  // the generated tokens (no prompt, no padding)
  // Beam strategies: the length-normalised score. With output_scores, every strategy: greedy
  // search and sampling give the sum of token_scores (the sequence's log-probability).
  std::optional<double> score;
  std::string text;                  // generate_text: the tokens decoded (special tokens kept)
  std::vector<double> token_scores;  // output_scores: each token's score (StreamedToken::logprob)
  // top_logprobs = k > 0 (greedy search, sampling): per token, the k most likely tokens of its
  // step, best first (StreamedToken::top); empty without it.
  std::vector<std::vector<TopLogprob>> top_logprobs = {};
};

struct Generation {
  std::vector<std::vector<Sequence>> outputs;  // per prompt, best first
  nlohmann::json settings;                     // the resolved generation settings
  int64_t prompt_length = 0;                   // the longest prompt (the others left-padded to it)
  int64_t rows = 0;                            // prompts x sequences per prompt (beams, samples)

  // Time, on the host clock after waiting for the device.
  int64_t steps = 0;                 // tokens chosen per row while the strategy ran
  double time_to_first_token_s = 0;  // prefill + choosing the first token
  double seconds = 0;                // prefill to the last token

  // The loop (docs/architecture.md#the-whole-step-on-the-device).
  bool whole_step = false;          // the whole step ran on the device
  bool captured = false;            // ... replayed as a CUDA graph
  std::string whole_step_fallback;  // why not, when the whole step was asked for with auto
  int64_t steps_run = 0;   // decoding steps run, those past the end (up to sync_every - 1) included
  int64_t flag_reads = 0;  // reads of the done flag, each a device-to-host wait on CUDA
  double capture_s = 0;    // capturing the graph (the first generation of a shape)

  // Speculative decoding (prompt_lookup_num_tokens, candidate_generator): verify forwards run,
  // candidate tokens proposed and kept, and the time spent proposing and verifying.
  int64_t verify_steps = 0;
  int64_t candidates_proposed = 0;
  int64_t candidates_accepted = 0;
  double propose_s = 0;
  double verify_s = 0;
};

}  // namespace gengraph
