// The linear layers' weight format (model.weights and its companion keys), and the one place the
// keys a user gives are parsed and their combinations checked (docs/quantization.md).
//
// Every entry point (EngineOptions and Python's keyword arguments, the experiment YAML's model
// and its rows' model:, gengraph quality's flags, the draft model's parameters, the loader and the
// quantized projections themselves) calls parse_weight_format or check_weight_format with its own
// WeightKeyNames, so a rule is written once and its error names the key where the user set it.
// tools/check_parsers.py (ctest one_parser) keeps the rules' texts in this file alone.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace gengraph {

// Weight-only quantization of the linear layers (model.weights): the fused form's projections
// (q/k/v, output, MLP, and the output head unless lm_head is false) hold their weights as
//   int8      one int8 per weight, one float scale per output channel (absmax / 127), computed by
//             gengraph's kernels on CPU (with int8_activation_rows, products of that many rows
//             quantize their activations too) and at::_weight_int8pack_mm on CUDA; with
//             group_size, one float16 scale per block of group_size input channels of a row
//             instead (llama.cpp's Q8_0 at 32), CPU only;
//   int4      4-bit values in groups of group_size input channels, a float16 scale and zero per
//             group and output channel, packed for gengraph's int4 kernels;
//   bfloat16  bfloat16 weights with float32 activations (the product in bfloat16);
// and kAsLoaded keeps the model's dtype. Activations, norms, attention and the cache stay in the
// model's dtype.
struct WeightFormat {
  enum class Kind { kAsLoaded, kInt8, kInt4, kBFloat16 };
  Kind kind = Kind::kAsLoaded;
  // Input channels per scale, 32, 64, 128 or 256; 0 (not given) is each format's default:
  //   int4  groups of that many channels (0: 32; parse_weight_format stores 32);
  //   int8  0: one float32 scale per output channel; B: one float16 scale per block of B
  //         channels of each row;
  //   others ignore it.
  int64_t group_size = 0;
  bool lm_head = true;  // quantize the output head too
  // int4 only: the output head in int8 instead (with int8 activations, as int8_activation_rows and
  // _block say), as 4-bit engines keep it at higher precision. The default; false keeps it int4.
  // Other formats ignore it (head_int8() is false): an explicit true with them is refused by
  // parse_weight_format, which sees whether the user set it.
  bool int8_head = true;
  // int8 or int4 on CPU: products of at least this many activation rows quantize the activations
  // to int8 too (W8A8, kernels::linear_w8a8; W4A8, kernels::linear_w4a8); fewer rows stay
  // weight-only. 0: never (the default).
  int64_t int8_activation_rows = 0;
  // Those products' activation scales: 0, one per row (LibTorch's integer GEMM); B, one per block
  // of B input channels of each row (a multiple of 32 dividing every projection's input width;
  // gengraph's VNNI / AVX2 kernels); int4 takes 32 only. No effect while int8_activation_rows is 0.
  int64_t int8_activation_block = 0;
  bool quantized() const { return kind != Kind::kAsLoaded; }
  // int4's group (group_size, 0 read as 32).
  int64_t int4_group() const { return group_size > 0 ? group_size : 32; }
  // int8 with a scale per block of group_size channels (group_size > 0), not per output channel.
  bool int8_blocks() const { return kind == Kind::kInt8 && group_size > 0; }
  // Whether the output head is held in int8 under an int4 body (int4, head quantized, int8_head).
  bool head_int8() const { return kind == Kind::kInt4 && lm_head && int8_head; }
  // "float" (as loaded), "int8", "int4" or "bfloat16"; describe() adds the group and the head.
  std::string name() const;
  std::string describe() const;
  // The same weights: group_size and int8_head compared where the kind reads them.
  bool operator==(const WeightFormat& o) const {
    const auto group = [](const WeightFormat& f) {
      return f.kind == Kind::kInt4 ? f.int4_group() : f.kind == Kind::kInt8 ? f.group_size : 0;
    };
    return kind == o.kind && group(*this) == group(o) && lm_head == o.lm_head &&
           head_int8() == o.head_int8() && int8_activation_rows == o.int8_activation_rows &&
           int8_activation_block == o.int8_activation_block;
  }
  bool operator!=(const WeightFormat& o) const { return !(*this == o); }
};

// "float" | "int8" | "int4" | "bfloat16"; anything else is refused naming `where` (the key as the
// user wrote it). parse_weight_format's first step, for callers that hold only the name.
WeightFormat::Kind parse_weight_kind(const std::string& name, const std::string& where);

// The group sizes (input channels per scale) gengraph's kernels take, int4's groups and int8's
// blocks; errors say "expected " kGroupSizes.
constexpr const char* kGroupSizes = "32, 64, 128 or 256";
bool is_group_size(int64_t n);

// The weight-format keys as the user gave them, under their YAML names.
struct WeightFormatKeys {
  std::string weights = "float";
  int64_t group_size = 0;  // 0: not given (int4 32, int8 a scale per output channel)
  bool quantize_head = true;
  // Not given: true for int4 (the head in int8), unread elsewhere. Given true, refused unless the
  // weights are int4 and the head quantized.
  std::optional<bool> int8_head;
  int64_t int8_activation_rows = 0;
  int64_t int8_activation_block = 0;
  // The model's form (model.fused): quantized weights live in the fused form's projections.
  bool fused = true;
};

// How an error names a key where the user set it. `name` maps a key's YAML name ("int8_head",
// "group_size", "weights", "fused", ...) to its spelling there: "EngineOptions::int8_head",
// "run.yaml:3:5: backends[1].model.int8_head", "--group-size". `found`, when set, gives what the
// error shows as found for a key from its value as text ("40", "true", "'int3'"); without it
// the value itself. The rules' texts name the other keys by their YAML names (weights,
// quantize_head, int8_activation_rows, fused).
struct WeightKeyNames {
  std::function<std::string(std::string_view key)> name;
  std::function<std::string(std::string_view key, const std::string& value)> found;
};
// Every key as `prefix` + its YAML name: "EngineOptions::" gives "EngineOptions::group_size".
WeightKeyNames key_names_with_prefix(std::string prefix);

// The one checked parser: the weight kind from its name, then check_weight_format. Throws
// gengraph::Error naming the key (through `names`), what was expected and what was found.
WeightFormat parse_weight_format(const WeightFormatKeys& keys, const WeightKeyNames& names);

// Every combination rule of the keys, over a format already held (the loader's LoadOptions, a
// projection's format): group_size 0 or one of kGroupSizes; int8_activation_rows >= 0, and > 0
// only with int8 or int4; int8_activation_block 0 or a multiple of 32, 32 for int4 with
// int8_activation_rows, and group_size for int8 in blocks with int8_activation_rows; quantized
// weights only in the fused form. Throws as parse_weight_format does. (int8_head given true with
// another format than int4, or with the head as loaded, is refused by parse_weight_format, which
// alone sees whether it was given.)
void check_weight_format(const WeightFormat& f, bool fused, const WeightKeyNames& names);

}  // namespace gengraph
