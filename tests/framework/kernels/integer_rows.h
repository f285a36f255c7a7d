// A check shared by the integer-activation kernel tests (test_weight_only.cpp,
// test_int8_blocks.cpp).
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "framework/quant/kernels.h"

namespace gengraph::kernels::checks {

// An integer-activation product of kIntegerGemmRows rows or more outside BatchInvariant: the
// integer kernels' floats (`integer`), or where integer_rows_by_float_gemm says so LibTorch's GEMM
// of the dequantized activation levels by the widened weight, to the bit, and within float
// rounding of the integer kernels' floats (relative to the products' magnitudes).
inline void expect_integer_rows(const at::Tensor& got, const at::Tensor& integer,
                                const at::Tensor& dequantized, const at::Tensor& widened) {
  ASSERT_GE(got.size(0), kIntegerGemmRows);
  if (!integer_rows_by_float_gemm(got.size(0))) {
    EXPECT_TRUE(at::equal(got, integer)) << "the integer kernels' floats";
    return;
  }
  EXPECT_TRUE(at::equal(got, at::linear(dequantized, widened))) << "the float GEMM's";
  const at::Tensor bound =
      at::linear(dequantized.abs().to(at::kDouble), widened.abs().to(at::kDouble)) * 1e-5 + 1e-6;
  EXPECT_TRUE((got.to(at::kDouble) - integer.to(at::kDouble)).abs().le(bound).all().item<bool>());
}

}  // namespace gengraph::kernels::checks
