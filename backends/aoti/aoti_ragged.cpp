// The ragged form of an aoti package (tools/export_aoti_ragged.py): one forward over a ragged
// batch whose keys and values live in a PagedCache, for continuous batching (docs/serving.md).
#include <ATen/ATen.h>
#include <gengraph/ext/backend.h>
#include <gengraph/ext/paged_cache.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <string>
#include <vector>

#include "backends/aoti/aoti_step.h"
#include "framework/util/error.h"

namespace gengraph {

at::Tensor AotiStep::run_ragged(const RaggedBatch& batch, const PagedCache& cache) {
  const std::string package = "package '" + path_.string() + "'";
  if (meta_.form != "ragged") {
    throw Error("backend '" + backend_ + "': " + package + " has no ragged form (it holds the " +
                meta_.form +
                " form); continuous batching needs one made by tools/export_aoti.py --ragged "
                "(the option ragged: true builds it)");
  }
  const PagedCache::Step& st = cache.step();
  const PagedLayout& layout = cache.layout();
  const int64_t n = batch.input_ids.numel();
  const auto fail = [&](const std::string& what) {
    throw Error("backend '" + backend_ + "' (" + package + "): " + what);
  };
  if (!st.write_slots.defined() || !st.block_tables.defined() || !st.seq.defined() ||
      !st.first.defined() || !st.last.defined()) {
    fail("the paged cache has no step laid out (PagedCache::set_step before forward_ragged)");
  }
  if (batch.positions.numel() != n || st.write_slots.numel() != n || st.seq.numel() != n ||
      st.first.numel() != n || st.last.numel() != n) {
    fail("a ragged batch of " + std::to_string(n) + " tokens, but positions, write_slots, seq, " +
         "first and last hold " + std::to_string(batch.positions.numel()) + ", " +
         std::to_string(st.write_slots.numel()) + ", " + std::to_string(st.seq.numel()) + ", " +
         std::to_string(st.first.numel()) + " and " + std::to_string(st.last.numel()));
  }
  if (st.block_tables.dim() != 2) {
    fail("expected block_tables [sequences, max_blocks], got " + c10::str(st.block_tables.sizes()));
  }
  if (st.block_tables.size(0) > meta_.max_rows) {
    fail(std::to_string(st.block_tables.size(0)) +
         " sequences in one step exceed the package's bound " + std::to_string(meta_.max_rows) +
         "; raise the option 'max_rows'");
  }
  if (layout.layers != meta_.layers || layout.kv_heads != meta_.kv_heads ||
      layout.head_dim != meta_.head_dim) {
    fail("the paged cache holds " + std::to_string(layout.layers) + " layers of " +
         std::to_string(layout.kv_heads) + " kv heads x " + std::to_string(layout.head_dim) +
         ", the package " + std::to_string(meta_.layers) + " of " + std::to_string(meta_.kv_heads) +
         " x " + std::to_string(meta_.head_dim));
  }
  const at::Tensor& keys = cache.keys();
  const at::Tensor& values = cache.values();
  // Each layer's pool goes in as an input of its own, [blocks, block_size, kv_heads, head_dim]
  // (the block size is read from its shape), written in place: views made once per pool.
  LayerViews& lv = pool_views_;
  if (lv.keys != keys.data_ptr() || lv.values != values.data_ptr() || lv.sizes != keys.sizes()) {
    TORCH_INTERNAL_ASSERT(keys.is_contiguous() && values.is_contiguous());
    lv.views.clear();
    const std::vector<int64_t> shape = {layout.blocks, layout.block_size, layout.kv_heads,
                                        layout.head_dim};
    for (int64_t l = 0; l < layout.layers; ++l) {
      lv.views.push_back(keys.select(0, l).view(shape));
      lv.views.push_back(values.select(0, l).view(shape));
    }
    lv.keys = keys.data_ptr();
    lv.values = values.data_ptr();
    lv.sizes = keys.sizes().vec();
  }
  const auto ints = [](const at::Tensor& t) { return t.to(at::kLong).contiguous(); };
  std::vector<at::Tensor> inputs = {ints(batch.input_ids).view({1, n}),
                                    ints(batch.positions).view({1, n}),
                                    ints(st.write_slots),
                                    ints(st.block_tables),
                                    ints(st.seq),
                                    ints(st.first),
                                    ints(st.last),
                                    ints(batch.logit_rows)};
  inputs.insert(inputs.end(), lv.views.begin(), lv.views.end());
  std::vector<at::Tensor> out;
  try {
    out = loader_->run(inputs);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    fail("the program failed: " + what.substr(0, what.find('\n')));
  }
  const at::Tensor logits = out.at(0);
  const int64_t k = batch.logit_rows.numel();
  if (logits.dim() != 2 || logits.size(0) != k || logits.size(1) != meta_.vocab_size) {
    fail("the program returned logits of shape " + c10::str(logits.sizes()) + ", expected [" +
         std::to_string(k) + ", " + std::to_string(meta_.vocab_size) + "]");
  }
  return logits;
}

}  // namespace gengraph
