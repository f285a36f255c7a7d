// The token history that processors, stopping criteria and strategies read: one shared state.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>

namespace gengraph {

struct Sequences {
  at::Tensor tokens;          // [rows, prompt_length + generated] int64, prompts left-padded
  at::Tensor prompt_valid;    // [rows, prompt_length] bool, false on left padding
  int64_t prompt_length = 0;  // padded prompt length, the same for every row
  int64_t rows() const { return tokens.size(0); }
  int64_t length() const { return tokens.size(1); }
  int64_t generated() const { return tokens.size(1) - prompt_length; }
};

}  // namespace gengraph
