// The paged-attention kernel: its float32 CPU values equal decode_attention's over the same keys
// laid out in order, bit for bit, on the AVX2 and the plain path; they do not depend on the batch
// (how many queries, which others, in what order); causal and windowed prefills agree with
// LibTorch's scaled_dot_product_attention; other dtypes take the composite form.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "framework/kernels/layer_ops.h"
#include "framework/kernels/paged_attention.h"
#include "framework/quant/kernels.h"
#include "tests/support/test_util.h"

namespace gengraph::kernels {
namespace {

using ::testing::HasSubstr;

struct Restore {
  ~Restore() { use_plain_loops(false); }
};

// Sequences of the given lengths in one pool of scattered blocks: their keys and values in order
// ([L, kv, hd] each), and the pool and block table that hold the same values.
struct Paged {
  std::vector<at::Tensor> keys, values;
  at::Tensor k_pool, v_pool, tables;
  int64_t block_size;
};

Paged make_paged(const std::vector<int64_t>& lengths, int64_t kv, int64_t hd, int64_t bs) {
  Paged p;
  p.block_size = bs;
  int64_t needed = 0, widest = 0;
  for (const int64_t L : lengths) {
    needed += (L + bs - 1) / bs;
    widest = std::max(widest, (L + bs - 1) / bs);
  }
  const int64_t blocks = needed + 3;  // spare blocks hold noise nobody reads
  p.k_pool = at::randn({blocks * bs, kv, hd});
  p.v_pool = at::randn({blocks * bs, kv, hd});
  p.tables = at::full({static_cast<int64_t>(lengths.size()), widest + 1}, -1, at::kLong);
  const at::Tensor order = at::randperm(blocks, at::kLong);
  int64_t next = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int64_t L = lengths[s];
    p.keys.push_back(at::randn({L, kv, hd}));
    p.values.push_back(at::randn({L, kv, hd}));
    for (int64_t b = 0; b * bs < L; ++b) {
      const int64_t id = order[next++].item<int64_t>();
      p.tables.index_put_({static_cast<int64_t>(s), b}, id);
      const int64_t n = std::min(bs, L - b * bs);
      p.k_pool.narrow(0, id * bs, n).copy_(p.keys[s].narrow(0, b * bs, n));
      p.v_pool.narrow(0, id * bs, n).copy_(p.values[s].narrow(0, b * bs, n));
    }
  }
  return p;
}

at::Tensor longs(const std::vector<int64_t>& v) {
  return at::tensor(std::vector<int64_t>(v), at::kLong);
}

// decode_attention of one query over its sequence's positions 0 .. last with first .. last
// allowed: the value paged_attention must give to the bit. -> [heads * hd]
at::Tensor reference(const at::Tensor& q, const Paged& p, int64_t s, int64_t first, int64_t last,
                     double scale) {
  const int64_t L = last + 1;
  const at::Tensor k = p.keys[s].narrow(0, 0, L).permute({1, 0, 2}).unsqueeze(0);
  const at::Tensor v = p.values[s].narrow(0, 0, L).permute({1, 0, 2}).unsqueeze(0);
  at::Tensor mask = at::zeros({1, 1, 1, L}, at::kBool);
  mask.narrow(3, first, L - first).fill_(true);
  return decode_attention(q.unsqueeze(0).unsqueeze(2), k, v, mask, scale).reshape({-1});
}

struct Queries {
  at::Tensor q, seq, first, last;
};

// One query at every position of every sequence, reading first = max(0, last - window + 1)
// (window 0: from position 0).
Queries every_position(const std::vector<int64_t>& lengths, int64_t heads, int64_t hd,
                       int64_t window) {
  std::vector<int64_t> seq, first, last;
  for (size_t s = 0; s < lengths.size(); ++s) {
    for (int64_t l = 0; l < lengths[s]; ++l) {
      seq.push_back(static_cast<int64_t>(s));
      last.push_back(l);
      first.push_back(window > 0 ? std::max<int64_t>(0, l - window + 1) : 0);
    }
  }
  const int64_t n = static_cast<int64_t>(seq.size());
  // q with free strides: [N, heads, hd] viewed from [heads, N, hd].
  return {at::randn({heads, n, hd}).transpose(0, 1), longs(seq), longs(first), longs(last)};
}

TEST(PagedAttention, EqualsDecodeAttentionBitForBit) {
  Restore restore;
  at::manual_seed(3);
  const std::vector<int64_t> lengths = {1, 17, 70};
  const int64_t heads = 6, kv = 2, bs = 16;
  for (const int64_t hd : {64, 40}) {
    const Paged p = make_paged(lengths, kv, hd, bs);
    for (const int64_t window : {0, 20}) {
      const Queries qs = every_position(lengths, heads, hd, window);
      for (const int path : {0, 1}) {
        use_plain_loops(path == 1);
        SCOPED_TRACE("hd " + std::to_string(hd) + " window " + std::to_string(window) +
                     (path == 0 ? " vectorized" : " plain"));
        const at::Tensor got = paged_attention(qs.q, p.k_pool, p.v_pool, p.tables, qs.seq, qs.first,
                                               qs.last, bs, 0.125);
        ASSERT_EQ(got.sizes(), (at::IntArrayRef{qs.q.size(0), heads * hd}));
        for (int64_t i = 0; i < qs.q.size(0); ++i) {
          const int64_t s = qs.seq[i].item<int64_t>(), f = qs.first[i].item<int64_t>(),
                        l = qs.last[i].item<int64_t>();
          const at::Tensor want = reference(qs.q[i], p, s, f, l, 0.125);
          ASSERT_TRUE(at::equal(got[i], want)) << "query " << i << " (sequence " << s << ", " << f
                                               << ".." << l << "): " << (got[i] - want).abs().max();
        }
      }
    }
  }
}

TEST(PagedAttention, ValuesDoNotDependOnTheBatch) {
  Restore restore;
  at::manual_seed(4);
  const std::vector<int64_t> lengths = {5, 33, 70};
  const int64_t heads = 6, kv = 2, hd = 64, bs = 16;
  const Paged p = make_paged(lengths, kv, hd, bs);
  const Queries qs = every_position(lengths, heads, hd, 0);
  const int64_t n = qs.q.size(0);
  for (const int path : {0, 1}) {
    use_plain_loops(path == 1);
    SCOPED_TRACE(path == 0 ? "vectorized" : "plain");
    const at::Tensor all =
        paged_attention(qs.q, p.k_pool, p.v_pool, p.tables, qs.seq, qs.first, qs.last, bs, 0.125);
    for (int64_t i = 0; i < n; ++i) {
      const at::Tensor one = paged_attention(qs.q.narrow(0, i, 1), p.k_pool, p.v_pool, p.tables,
                                             qs.seq.narrow(0, i, 1), qs.first.narrow(0, i, 1),
                                             qs.last.narrow(0, i, 1), bs, 0.125);
      ASSERT_TRUE(at::equal(one[0], all[i])) << "query " << i;
    }
    const at::Tensor perm = at::randperm(n, at::kLong);
    const at::Tensor shuffled = paged_attention(
        qs.q.index_select(0, perm), p.k_pool, p.v_pool, p.tables, qs.seq.index_select(0, perm),
        qs.first.index_select(0, perm), qs.last.index_select(0, perm), bs, 0.125);
    EXPECT_TRUE(at::equal(shuffled, all.index_select(0, perm)));
  }
}

// SDPA over the first sequence's keys (heads repeated for the groups), with a boolean mask or
// causal. -> [T, heads * hd]
at::Tensor sdpa(const at::Tensor& q, const Paged& p, const std::optional<at::Tensor>& allowed,
                bool causal, double scale) {
  const int64_t t = q.size(0), heads = q.size(1), hd = q.size(2), kv = p.keys[0].size(1);
  const auto spread = [&](const at::Tensor& x) {
    return x.permute({1, 0, 2}).repeat_interleave(heads / kv, 0).unsqueeze(0);
  };
  return at::scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(0), spread(p.keys[0]),
                                          spread(p.values[0]), allowed, 0.0, causal, scale)
      .squeeze(0)
      .transpose(0, 1)
      .reshape({t, heads * hd});
}

TEST(PagedAttention, CausalAndWindowedPrefillsMatchScaledDotProductAttention) {
  Restore restore;
  at::manual_seed(5);
  const int64_t t = 50, heads = 6, kv = 2, hd = 40, bs = 16;
  const Paged p = make_paged({t}, kv, hd, bs);
  const at::Tensor q = at::randn({t, heads, hd});
  const at::Tensor pos = at::arange(t, at::kLong);
  const at::Tensor seq = at::zeros({t}, at::kLong);
  for (const int path : {0, 1}) {
    use_plain_loops(path == 1);
    SCOPED_TRACE(path == 0 ? "vectorized" : "plain");
    const at::Tensor causal = paged_attention(q, p.k_pool, p.v_pool, p.tables, seq,
                                              at::zeros({t}, at::kLong), pos, bs, 0.2);
    const at::Tensor want = sdpa(q, p, std::nullopt, true, 0.2);
    EXPECT_TRUE(at::allclose(causal, want, 1e-5, 1e-5)) << (causal - want).abs().max();
    // A sliding window of 7: position l reads max(0, l - 6) .. l.
    const at::Tensor first = (pos - 6).clamp_min(0);
    const at::Tensor windowed =
        paged_attention(q, p.k_pool, p.v_pool, p.tables, seq, first, pos, bs, 0.2);
    const at::Tensor allowed =
        pos.unsqueeze(0).le(pos.unsqueeze(1)).logical_and(pos.unsqueeze(0).ge(first.unsqueeze(1)));
    const at::Tensor want_w = sdpa(q, p, allowed, false, 0.2);
    EXPECT_TRUE(at::allclose(windowed, want_w, 1e-5, 1e-5)) << (windowed - want_w).abs().max();
  }
}

TEST(PagedAttention, OtherDtypesTakeTheCompositeAndBadArgumentsAreNamed) {
  at::manual_seed(6);
  const std::vector<int64_t> lengths = {3, 40};
  const int64_t heads = 4, kv = 2, hd = 32, bs = 8;
  const Paged p = make_paged(lengths, kv, hd, bs);
  const Queries qs = every_position(lengths, heads, hd, 9);
  const at::Tensor f32 =
      paged_attention(qs.q, p.k_pool, p.v_pool, p.tables, qs.seq, qs.first, qs.last, bs, 0.17);
  const at::Tensor bf16 =
      paged_attention(qs.q.to(at::kBFloat16), p.k_pool.to(at::kBFloat16),
                      p.v_pool.to(at::kBFloat16), p.tables, qs.seq, qs.first, qs.last, bs, 0.17);
  EXPECT_EQ(bf16.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::allclose(bf16.to(at::kFloat), f32, 5e-2, 5e-2))
      << (bf16.to(at::kFloat) - f32).abs().max();
  // float64 through the composite is float32 inside: close to the kernel's values.
  const at::Tensor f64 =
      paged_attention(qs.q.to(at::kDouble), p.k_pool.to(at::kDouble), p.v_pool.to(at::kDouble),
                      p.tables, qs.seq, qs.first, qs.last, bs, 0.17);
  EXPECT_TRUE(at::allclose(f64.to(at::kFloat), f32, 1e-5, 1e-5));

  EXPECT_THAT(testing::error_of([&] {
                paged_attention(qs.q, p.k_pool, p.v_pool, p.tables.to(at::kInt), qs.seq, qs.first,
                                qs.last, bs, 0.17);
              }),
              HasSubstr("gengraph::paged_attention: expected block_tables [S, max_blocks] int64, "
                        "got [2, 6] Int"));
  EXPECT_THAT(testing::error_of([&] {
                paged_attention(qs.q, p.k_pool, p.v_pool, p.tables, qs.seq, qs.last + 1, qs.last,
                                bs, 0.17);
              }),
              HasSubstr("expected 0 <= first <= last"));
  EXPECT_THAT(testing::error_of([&] {
                paged_attention(qs.q, p.k_pool, p.v_pool, p.tables, qs.seq.narrow(0, 0, 2),
                                qs.first, qs.last, bs, 0.17);
              }),
              HasSubstr("expected seq [43] int64 (one per query), got [2] Long"));
  at::Tensor broken = p.tables.clone();
  broken.index_put_({1, 0}, -1);
  EXPECT_THAT(testing::error_of([&] {
                paged_attention(qs.q, p.k_pool, p.v_pool, broken, qs.seq, qs.first, qs.last, bs,
                                0.17);
              }),
              HasSubstr("expected block_tables[1][0] in [0, "));
}

}  // namespace
}  // namespace gengraph::kernels
