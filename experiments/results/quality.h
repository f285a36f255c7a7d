// What weight-only quantization costs in quality (gengraph quality): on a model folder with a
// tokenizer, each format against the float model, on windows of a fixed text (teacher-forced)
// and on greedy generations from prompts.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "framework/quant/weight_format.h"

namespace gengraph {

struct QualityOptions {
  std::string model;                 // a folder or a known real model name
  std::vector<std::string> formats;  // int8, int4, bfloat16 (float is the reference)
  int64_t group_size = 32;           // int4
  bool quantize_head = true;
  std::string text_file = "/usr/share/common-licenses/GPL-3";
  int64_t windows = 8;               // teacher-forced windows, run as one batch
  int64_t window = 256;              // tokens per window
  std::vector<std::string> prompts;  // greedy generations compared with float's
  int64_t new_tokens = 32;
};

// Per format: perplexity over the windows (and float's), the mean KL divergence of float's
// next-token distribution from the format's (nats), how often their top tokens agree
// (teacher-forced), and over the prompts' greedy generations the share of identical outputs and
// the mean length of the common prefix. Progress goes to `log`.
nlohmann::json measure_quality(const QualityOptions& o, std::ostream& log);
// A format of --weights (int8, int4, bfloat16, float; w8a8: int8 weights with every product's
// activations in int8, a scale per row; w8a8/B a scale per block of B channels; w4a8: int4 with
// activations in blocks of 32; int8gB int8 weights in blocks of B, w8a8gB the same by activations
// in blocks of B; int4's output head is int8 (model.int8_head's default), a suffix
// "+h4" on int4 or w4a8 keeps it int4, "+h8" says the default) with --group-size (int4's groups),
// through the one weight-format parser: errors name --weights or --group-size.
WeightFormat quality_weight_format(const std::string& name, int64_t group_size, bool quantize_head);
std::string format_quality(const nlohmann::json& doc);

}  // namespace gengraph
