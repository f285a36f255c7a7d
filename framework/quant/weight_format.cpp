#include "framework/quant/weight_format.h"

#include <optional>
#include <vector>

#include "framework/util/error.h"

namespace gengraph {
namespace {

std::optional<WeightFormat::Kind> kind_named(const std::string& name) {
  if (name == "float") return WeightFormat::Kind::kAsLoaded;
  if (name == "int8") return WeightFormat::Kind::kInt8;
  if (name == "int4") return WeightFormat::Kind::kInt4;
  if (name == "bfloat16") return WeightFormat::Kind::kBFloat16;
  return std::nullopt;
}

constexpr const char* kKindNames = "float, int8, int4 or bfloat16";

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// "KEY: expected EXPECTED, found FOUND[CONTEXT]", KEY and FOUND as `names` spells them.
[[noreturn]] void refuse(const WeightKeyNames& names, std::string_view key,
                         const std::string& expected, const std::string& value,
                         const std::string& context = "") {
  const std::string found = names.found ? names.found(key, value) : value;
  throw Error(names.name(key) + ": expected " + expected + ", found " + found + context);
}

}  // namespace

std::string WeightFormat::name() const {
  switch (kind) {
    case Kind::kAsLoaded:
      return "float";
    case Kind::kInt8:
      return "int8";
    case Kind::kInt4:
      return "int4";
    case Kind::kBFloat16:
      return "bfloat16";
  }
  return "?";
}

std::string WeightFormat::describe() const {
  if (!quantized()) return name();
  std::string out = name();
  if (kind == Kind::kInt4) out += " (groups of " + std::to_string(int4_group()) + ")";
  if (int8_blocks()) out += " (blocks of " + std::to_string(group_size) + ")";
  if ((kind == Kind::kInt8 || kind == Kind::kInt4) && int8_activation_rows > 0) {
    out += " (int8 activations from " + std::to_string(int8_activation_rows) + " row" +
           (int8_activation_rows == 1 ? "" : "s") +
           (int8_activation_block > 0 ? ", blocks of " + std::to_string(int8_activation_block)
                                      : std::string()) +
           ")";
  }
  if (!lm_head) out += ", output head as loaded";
  if (head_int8()) out += ", output head int8";
  if (kind == Kind::kInt4 && lm_head && !int8_head) out += ", output head int4";
  return out;
}

WeightFormat::Kind parse_weight_kind(const std::string& name, const std::string& where) {
  if (const auto k = kind_named(name)) return *k;
  throw Error(where + ": expected " + kKindNames + ", found " + quoted(name) +
              did_you_mean(name, {"float", "int8", "int4", "bfloat16"}));
}

bool is_group_size(int64_t n) { return n == 32 || n == 64 || n == 128 || n == 256; }

WeightKeyNames key_names_with_prefix(std::string prefix) {
  WeightKeyNames n;
  n.name = [prefix = std::move(prefix)](std::string_view key) { return prefix + std::string(key); };
  return n;
}

WeightFormat parse_weight_format(const WeightFormatKeys& keys, const WeightKeyNames& names) {
  WeightFormat f;
  const auto kind = kind_named(keys.weights);
  if (!kind) {
    refuse(names, "weights", kKindNames, quoted(keys.weights),
           did_you_mean(keys.weights, {"float", "int8", "int4", "bfloat16"}));
  }
  f.kind = *kind;
  f.group_size = keys.group_size;
  // int4's group when not given: 32, stored so that a held format says it.
  if (f.kind == WeightFormat::Kind::kInt4 && f.group_size == 0) f.group_size = 32;
  f.lm_head = keys.quantize_head;
  // Given true, the head goes to int8: only an int4 model's quantized head has that form. Not
  // given, int4 takes it (WeightFormat's default) and other formats do not read it.
  if (keys.int8_head.value_or(false) &&
      (f.kind != WeightFormat::Kind::kInt4 || !keys.quantize_head)) {
    refuse(names, "int8_head",
           "false unless weights is int4 and quantize_head is true (it puts an int4 model's "
           "output head in int8, the default there; leave it out elsewhere)",
           "true",
           " with weights '" + f.name() + "'" +
               (keys.quantize_head ? "" : " and quantize_head false"));
  }
  f.int8_head = keys.int8_head.value_or(true);
  f.int8_activation_rows = keys.int8_activation_rows;
  f.int8_activation_block = keys.int8_activation_block;
  check_weight_format(f, keys.fused, names);
  return f;
}

void check_weight_format(const WeightFormat& f, bool fused, const WeightKeyNames& names) {
  // Checked whatever the kind, so that a sweep over model.weights meets a bad group at once.
  if (f.group_size != 0 && !is_group_size(f.group_size)) {
    refuse(names, "group_size", kGroupSizes, std::to_string(f.group_size),
           " (or not given: int4 groups of 32, int8 a scale per output channel)");
  }
  const bool integer = f.kind == WeightFormat::Kind::kInt8 || f.kind == WeightFormat::Kind::kInt4;
  if (f.int8_activation_rows < 0) {
    refuse(names, "int8_activation_rows",
           "0 (never) or a row count from which products quantize their activations",
           std::to_string(f.int8_activation_rows));
  }
  if (f.int8_activation_rows > 0 && !integer) {
    refuse(names, "int8_activation_rows",
           "0 unless weights is int8 or int4 (int8 activations multiply integer weights)",
           std::to_string(f.int8_activation_rows), " with weights '" + f.name() + "'");
  }
  if (f.int8_activation_block < 0 || f.int8_activation_block % 32 != 0) {
    refuse(names, "int8_activation_block",
           "0 (a scale per row) or a multiple of 32 (a scale per block of that many channels of "
           "the products that int8_activation_rows quantizes)",
           std::to_string(f.int8_activation_block));
  }
  if (f.int8_activation_rows > 0 && f.kind == WeightFormat::Kind::kInt4 &&
      f.int8_activation_block != 32) {
    refuse(names, "int8_activation_block",
           "32 with weights int4 and int8_activation_rows (the W4A8 kernel quantizes activations "
           "in blocks of 32 channels)",
           std::to_string(f.int8_activation_block));
  }
  if (f.int8_blocks() && f.int8_activation_rows > 0 && f.int8_activation_block != f.group_size) {
    refuse(names, "int8_activation_block",
           "group_size (" + std::to_string(f.group_size) +
               ") with weights int8 in blocks and int8_activation_rows (each block's integer sum "
               "takes one activation scale and one weight scale)",
           std::to_string(f.int8_activation_block));
  }
  if (f.quantized() && !fused) {
    refuse(names, "weights",
           "float with fused: false (weights are quantized in the fused form's projections; "
           "transformers' op-by-op form keeps them as loaded)",
           quoted(f.name()));
  }
}

}  // namespace gengraph
