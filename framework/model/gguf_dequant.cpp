#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstring>

#include "framework/model/gguf.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

// The block layouts (ggml's block_q8_0, block_q4_K, ...), byte offsets within one block. Every
// fp16 field is widened exactly to float32; the arithmetic after it follows the reference
// dequantization's order of operations.
float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return c10::detail::fp16_ieee_to_fp32_value(h);
}

// F16: one fp16 value per element.
void f16_block(const uint8_t* b, float* y) { y[0] = half_at(b); }

// BF16: the upper half of a float32's bits.
void bf16_block(const uint8_t* b, float* y) {
  uint16_t h;
  std::memcpy(&h, b, 2);
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  std::memcpy(y, &bits, 4);
}

// F32 (a misaligned one): copied.
void f32_block(const uint8_t* b, float* y) { std::memcpy(y, b, 4); }

// Q8_0: fp16 scale d, 32 int8 values: d * q.
void q8_0_block(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const auto* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(q[i]) * d;
}

// Q4_0: fp16 scale d, 16 bytes of nibbles (low nibbles are elements 0..15, high ones 16..31):
// d * (q - 8).
void q4_0_block(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint8_t* q = b + 2;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>((q[i] & 0x0F) - 8);
    y[i + 16] = d * static_cast<float>((q[i] >> 4) - 8);
  }
}

// Q4_1: fp16 scale d and minimum m, nibbles as Q4_0: d * q + m.
void q4_1_block(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const float m = half_at(b + 2);
  const uint8_t* q = b + 4;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>(q[i] & 0x0F) + m;
    y[i + 16] = d * static_cast<float>(q[i] >> 4) + m;
  }
}

// Q5_0: fp16 scale d, 4 bytes of high bits (a little-endian 32-bit word: bit i is element i's fifth
// bit), nibbles as Q4_0: d * (q - 16).
void q5_0_block(const uint8_t* b, float* y) {
  const float d = half_at(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* q = b + 6;
  for (int i = 0; i < 16; ++i) {
    const int lo = (q[i] & 0x0F) | static_cast<int>(((qh >> i) & 1) << 4);
    const int hi = (q[i] >> 4) | static_cast<int>(((qh >> (i + 16)) & 1) << 4);
    y[i] = d * static_cast<float>(lo - 16);
    y[i + 16] = d * static_cast<float>(hi - 16);
  }
}

// Q5_1: fp16 scale d and minimum m, then Q5_0's high bits and nibbles: d * q + m.
void q5_1_block(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const float m = half_at(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* q = b + 8;
  for (int i = 0; i < 16; ++i) {
    const int lo = (q[i] & 0x0F) | static_cast<int>(((qh >> i) & 1) << 4);
    const int hi = (q[i] >> 4) | static_cast<int>(((qh >> (i + 16)) & 1) << 4);
    y[i] = d * static_cast<float>(lo) + m;
    y[i + 16] = d * static_cast<float>(hi) + m;
  }
}

// The 6-bit scale and minimum of sub-block j (0..7) from a K-quant block's 12 scale bytes: bytes
// 0..3 hold the low six bits of scales 0..3, bytes 4..7 those of minimums 0..3, and for j >= 4
// bytes 8..11 hold the low four bits of scale and minimum while the top two bits of bytes 0..7
// hold the high two.
void scale_min(const uint8_t* s, int j, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = s[j] & 0x3F;
    m = s[j + 4] & 0x3F;
  } else {
    sc = static_cast<uint8_t>((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Q4_K: fp16 d and dmin, 12 scale bytes, 128 bytes of nibbles. Sub-block j (32 elements) takes
// the low (even j) or high (odd j) nibbles of bytes 32 * (j / 2) ...: (d * sc) * q - (dmin * m).
void q4_k_block(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const float dmin = half_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    scale_min(scales, j, sc, m);
    const float dj = d * static_cast<float>(sc);
    const float mj = dmin * static_cast<float>(m);
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    float* out = y + 32 * j;
    for (int i = 0; i < 32; ++i) out[i] = dj * static_cast<float>((q[i] >> shift) & 0x0F) - mj;
  }
}

// Q5_K: Q4_K's fields with 32 bytes of high bits after the scales: sub-block j's fifth bit of
// element i is bit j of qh[i].
void q5_k_block(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const float dmin = half_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    scale_min(scales, j, sc, m);
    const float dj = d * static_cast<float>(sc);
    const float mj = dmin * static_cast<float>(m);
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    float* out = y + 32 * j;
    for (int i = 0; i < 32; ++i) {
      const int v = ((q[i] >> shift) & 0x0F) | (((qh[i] >> j) & 1) << 4);
      out[i] = dj * static_cast<float>(v) - mj;
    }
  }
}

// Q6_K: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 int8 scales, fp16 d. Each half
// (128 elements) takes 64 nibble bytes and 32 pair bytes: element 32 * s + i (s = 0..3) has the
// low (s < 2) or high nibble of ql[32 * (s % 2) + i] and bits 2s, 2s + 1 of qh[i]; value q - 32,
// scaled by (d * scales[e / 16]).
void q6_k_block(const uint8_t* b, float* y) {
  const float d = half_at(b + 208);
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b + 64 * half;
    const uint8_t* qh = b + 128 + 32 * half;
    float* out = y + 128 * half;
    const int8_t* sc = scales + 8 * half;
    for (int s = 0; s < 4; ++s) {
      const uint8_t* low = ql + 32 * (s % 2);
      const int nibble = 4 * (s / 2);
      for (int i = 0; i < 32; ++i) {
        const int e = 32 * s + i;
        const int q = (((low[i] >> nibble) & 0x0F) | (((qh[i] >> (2 * s)) & 3) << 4)) - 32;
        out[e] = (d * static_cast<float>(sc[e / 16])) * static_cast<float>(q);
      }
    }
  }
}

}  // namespace

namespace {

// The blocks in order, on ATen's threads; about 64K elements per task: enough to pay for a thread,
// small enough to share a big tensor. `Block` is a template argument so that it is inlined.
template <void (*Block)(const uint8_t*, float*)>
void run(const uint8_t* data, int64_t blocks, int64_t per_block, int64_t block_bytes, float* out) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / per_block);
  at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) Block(data + i * block_bytes, out + i * per_block);
  });
}

}  // namespace

void gguf_dequantize(GgufType type, const uint8_t* data, int64_t elements, float* out) {
  const int64_t per_block = gguf_block_elements(type);
  const int64_t bytes = gguf_block_bytes(type);
  if (elements % per_block != 0) {
    throw Error("GGUF: " + std::to_string(elements) + " elements are not whole " +
                gguf_type_name(type) + " blocks of " + std::to_string(per_block));
  }
  const int64_t n = elements / per_block;
  switch (type) {
    case GgufType::kF32:
      return run<f32_block>(data, n, per_block, bytes, out);
    case GgufType::kF16:
      return run<f16_block>(data, n, per_block, bytes, out);
    case GgufType::kBF16:
      return run<bf16_block>(data, n, per_block, bytes, out);
    case GgufType::kQ8_0:
      return run<q8_0_block>(data, n, per_block, bytes, out);
    case GgufType::kQ4_0:
      return run<q4_0_block>(data, n, per_block, bytes, out);
    case GgufType::kQ4_1:
      return run<q4_1_block>(data, n, per_block, bytes, out);
    case GgufType::kQ5_0:
      return run<q5_0_block>(data, n, per_block, bytes, out);
    case GgufType::kQ5_1:
      return run<q5_1_block>(data, n, per_block, bytes, out);
    case GgufType::kQ4_K:
      return run<q4_k_block>(data, n, per_block, bytes, out);
    case GgufType::kQ5_K:
      return run<q5_k_block>(data, n, per_block, bytes, out);
    case GgufType::kQ6_K:
      return run<q6_k_block>(data, n, per_block, bytes, out);
  }
  throw Error("GGUF: cannot dequantize " + gguf_type_name(type));
}

}  // namespace gengraph
