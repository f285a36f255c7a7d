// The attention a continuous-batching step runs over a paged KV cache: every query token of the
// batch reads the keys and values of its own sequence, kept in fixed-size blocks of one pool that
// a block table per sequence lists. Registered as gengraph::paged_attention.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>

namespace gengraph::kernels {

// Attention of N query tokens, each over the keys of its own sequence in a paged cache (keys and
// values in blocks of block_size positions; a block table per sequence says which blocks).
//   q: [N, heads, hd] (last dim contiguous; other strides free)
//   k_pool, v_pool: [slots, kv_heads, hd] contiguous, one layer; slots = blocks * block_size.
//     Sequence s's key at position l is at slot block_tables[s][l / block_size] * block_size
//     + l % block_size.
//   block_tables: [S, max_blocks] int64; seq: [N] int64 (each query's sequence);
//   first, last: [N] int64: the query reads the keys at positions first[n] .. last[n] of its
//     sequence (last is its own position; first > 0 for left padding or a sliding window;
//     first <= last always)
//   scale: the scores' scale. heads a multiple of kv_heads (grouped-query attention).
//   -> [N, heads * hd], q's dtype
// Only the blocks that hold positions first .. last are read: table entries outside them may be
// anything (a freed block, -1).
//
// float32 on CPU takes gengraph's kernel, which is batch invariant to the bit: a query's values
// depend only on its q and its sequence's keys and values at first .. last, never on N, the other
// queries, the thread that ran it or where its blocks lie in the pool. They equal
// decode_attention's for that query over the positions 0 .. last laid out in order with a boolean
// mask allowing first .. last, bit for bit, on the AVX2 and on the plain path. Every other dtype or
// device takes a composite of ATen ops (keys gathered through the table, float32 scores, a masked
// softmax), which makes no such promise. Off the CPU (CUDA) the composite reads nothing back to the
// host and its shapes follow block_tables' width, not the positions' values, so that a CUDA graph
// can capture it; it then gathers every position of that width for every query.
at::Tensor paged_attention(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool,
                           const at::Tensor& block_tables, const at::Tensor& seq,
                           const at::Tensor& first, const at::Tensor& last, int64_t block_size,
                           double scale);

}  // namespace gengraph::kernels
