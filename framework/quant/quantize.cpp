#include "framework/quant/quantize.h"

#include <ATen/ATen.h>

#include <string>

#include "framework/util/error.h"

namespace gengraph {

Int8Weight quantize_int8(const at::Tensor& weight) {
  const at::Tensor w = weight.to(at::kFloat);
  // A row of zeros gets scale 1 (its values quantize to 0 whatever the scale).
  const at::Tensor absmax = w.abs().amax(1);
  const at::Tensor scales = at::where(absmax > 0, absmax / 127.0, at::ones_like(absmax));
  Int8Weight out;
  out.q = at::round(w / scales.unsqueeze(1)).clamp(-127, 127).to(at::kChar).contiguous();
  out.scales = scales.to(weight.scalar_type()).contiguous();
  return out;
}

at::Tensor dequantize_int8(const Int8Weight& w) {
  return w.q.to(at::kFloat) * w.scales.to(at::kFloat).unsqueeze(1);
}

Int8Blocks quantize_int8_blocks(const at::Tensor& weight, int64_t block) {
  const int64_t n = weight.size(0), k = weight.size(1);
  TORCH_CHECK(block > 0 && k % block == 0, "quantize_int8_blocks: block ", block,
              " must divide the ", k, " input channels");
  const at::Tensor w = weight.to(at::kFloat).reshape({n, k / block, block});
  const at::Tensor absmax = w.abs().amax(-1);
  const at::Tensor scale =
      at::where(absmax > 0, absmax / 127.0, at::ones_like(absmax)).to(at::kHalf);
  if (!scale.isfinite().all().item<bool>()) {
    const at::Tensor bad = scale.isfinite().logical_not().nonzero()[0];
    const int64_t row = bad[0].item<int64_t>(), b = bad[1].item<int64_t>();
    throw Error("model.weights int8 in blocks: output channel " + std::to_string(row) +
                "'s block " + std::to_string(b) + " holds a weight of magnitude " +
                std::to_string(absmax[row][b].item<float>()) +
                "; the blocks keep their scales in float16, which holds finite values up to "
                "65504 (leave group_size out for a float32 scale per output channel)");
  }
  // The levels against the float16 scale's value. A block whose scale rounds to float16's zero
  // (every weight under about 4e-6) keeps level 0: its weights are below what the scale can say.
  const at::Tensor s = scale.to(at::kFloat).unsqueeze(-1);
  const at::Tensor q =
      at::where(s > 0, at::round(w / s).clamp(-127, 127), at::zeros_like(w)).to(at::kChar);
  Int8Blocks out;
  out.block = block;
  out.q = q.reshape({n, k}).contiguous();
  out.scales = scale.contiguous();
  return out;
}

at::Tensor dequantize_int8_blocks(const Int8Blocks& w) {
  const int64_t n = w.q.size(0), k = w.q.size(1);
  return (w.q.to(at::kFloat).reshape({n, k / w.block, w.block}) *
          w.scales.to(at::kFloat).unsqueeze(-1))
      .reshape({n, k});
}

Int4Weight quantize_int4(const at::Tensor& weight, int64_t group) {
  const int64_t n = weight.size(0), k = weight.size(1);
  const at::Tensor w = weight.to(at::kFloat).reshape({n, k / group, group});
  const at::Tensor lo = w.amin(-1), hi = w.amax(-1);
  // 15 steps from the minimum to the maximum; a constant group gets step 1 (all its values are
  // the minimum). The levels are decided on that float32 grid; then the step and the minimum are
  // stored as float16 (rounded to nearest), as a Q4_1 block stores its own.
  const at::Tensor range = hi - lo;
  const at::Tensor step = at::where(range > 0, range / 15.0, at::ones_like(range));
  const at::Tensor scale = step.to(at::kHalf), zero = lo.to(at::kHalf);
  if (!(zero.isfinite().all().item<bool>() && scale.isfinite().all().item<bool>())) {
    const at::Tensor bad = (zero.isfinite() & scale.isfinite()).logical_not().nonzero()[0];
    const int64_t row = bad[0].item<int64_t>(), g = bad[1].item<int64_t>();
    throw Error("model.weights int4: output channel " + std::to_string(row) + "'s group " +
                std::to_string(g) + " holds weights from " +
                std::to_string(lo[row][g].item<float>()) + " to " +
                std::to_string(hi[row][g].item<float>()) +
                "; int4 keeps its scales and zeros in float16, which holds finite values up to "
                "65504 (use int8 or bfloat16 for this model)");
  }
  Int4Weight out;
  out.group = group;
  out.q = at::round((w - lo.unsqueeze(-1)) / step.unsqueeze(-1))
              .clamp(0, 15)
              .to(at::kInt)
              .reshape({n, k})
              .contiguous();
  out.scales = scale.contiguous();
  out.zeros = zero.contiguous();
  return out;
}

namespace {

// The CUDA kernel's value is (q - 8) x scale + zero: its zero is the stored minimum plus 8 steps.
// bfloat16 [in / group, out, 2].
at::Tensor int4_cuda_scales_and_zeros(const Int4Weight& w) {
  const at::Tensor step = w.scales.to(at::kFloat), lo = w.zeros.to(at::kFloat);
  return at::stack({step, lo + 8.0 * step}, -1)  // [out, groups, 2]
      .transpose(0, 1)
      .to(at::kBFloat16)
      .contiguous();
}

}  // namespace

Int4Cuda pack_int4_cuda(const Int4Weight& w) {
  const int64_t n = w.q.size(0), k = w.q.size(1);
  // The kernel's tiles: k a multiple of 16 x inner k-tiles (2, 4 or 8: the most that fit; a
  // group of 32 or more dividing k makes 2 fit), n a multiple of 8: other outputs (GPT-2's
  // 50257-token head) get rows of level 0 with scale and zero 0, whose outputs are dropped.
  const int64_t tiles = k % 128 == 0 ? 8 : k % 64 == 0 ? 4 : 2;
  if (k % (16 * tiles) != 0) {
    throw Error("model.weights int4 on CUDA: a projection of " + std::to_string(k) +
                " inputs; LibTorch's CUDA int4 kernel needs a multiple of 32");
  }
  const int64_t padded = (n + 7) / 8 * 8;
  at::Tensor q = w.q.to(at::kInt);
  at::Tensor sz = int4_cuda_scales_and_zeros(w);  // [groups, n, 2]
  if (padded != n) {
    q = at::constant_pad_nd(q, {0, 0, 0, padded - n}, 0);
    sz = at::constant_pad_nd(sz, {0, 0, 0, padded - n}, 0).contiguous();
  }
  // Two levels a byte, the even input channel in the high nibble, as the packing op reads them.
  const at::Tensor bytes =
      q.slice(1, 0, k, 2).bitwise_left_shift(4).bitwise_or(q.slice(1, 1, k, 2)).to(at::kByte);
  Int4Cuda out;
  out.packed = at::_convert_weight_to_int4pack(bytes.contiguous(), tiles);
  out.scales_and_zeros = sz;
  return out;
}

at::Tensor dequantize_int4_cuda(const Int4Weight& w) {
  const int64_t n = w.q.size(0), k = w.q.size(1);
  const at::Tensor sz = int4_cuda_scales_and_zeros(w).to(at::kFloat).transpose(0, 1);  // [n, g, 2]
  const at::Tensor q = w.q.to(at::kFloat).reshape({n, k / w.group, w.group});
  return ((q - 8.0) * sz.select(-1, 0).unsqueeze(-1) + sz.select(-1, 1).unsqueeze(-1))
      .reshape({n, k});
}

at::Tensor dequantize_int4(const Int4Weight& w) {
  const int64_t n = w.q.size(0), k = w.q.size(1);
  return (w.q.to(at::kFloat).reshape({n, k / w.group, w.group}) *
              w.scales.to(at::kFloat).unsqueeze(-1) +
          w.zeros.to(at::kFloat).unsqueeze(-1))
      .reshape({n, k});
}

}  // namespace gengraph
