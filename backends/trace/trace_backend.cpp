#include "backends/trace/trace_backend.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>

#include "backends/trace/traced_step.h"
#include "framework/backend/options.h"
#include "framework/model/causal_lm.h"
#include "framework/util/clock.h"
#include "framework/util/device.h"
#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/path_errors.h"

namespace gengraph {
namespace {

struct Settings {
  TraceOptions trace;
  std::string cache_dir;
  std::string file;
  int64_t verify_bucket = 4;  // verify traces per multiple of this many positions
};

class TraceBackend final : public ForwardBackend {
 public:
  TraceBackend(std::shared_ptr<const CausalLM> model, Settings s)
      : ForwardBackend(std::move(model)), s_(std::move(s)), verify_steps_(this->model(), s_.trace) {
    if (!s_.cache_dir.empty()) fingerprint_ = model_fingerprint(this->model());
  }

  std::string name() const override { return "trace"; }

  BackendReport report() const override {
    return {{"trace_seconds", trace_s_ + verify_steps_.seconds()},
            {"warmup_seconds", warmup_s_},
            {"traces_built", double(built_)},
            {"traces_loaded", double(loaded_)},
            {"verify_traces", double(verify_steps_.size())},
            {"freeze", s_.trace.freeze ? 1.0 : 0.0},
            {"optimize_for_inference", s_.trace.optimize_for_inference ? 1.0 : 0.0},
            {"profiling_runs", double(s_.trace.profiling_runs)},
            {"reorder_bytes_per_step", cache_ ? cache_->reorder_bytes_per_step() : 0.0}};
  }

 protected:
  void do_prepare(int64_t rows, int64_t max_length) override {
    const auto f = at::TensorOptions().dtype(model().dtype()).device(model().device());
    reuse_or_allocate(cache_, model().cache_shape(rows, max_length), f, Reorder::kSwap);
  }

  at::Tensor do_prefill(const StepInputs& in, const at::Tensor& slots) override {
    current_ = &step_for(in.input_ids.size(1));
    auto run = [&] {
      return current_->prefill(in.input_ids, in.positions, slots, in.token_valid,
                               cache_->validity(), cache_->keys(), cache_->values());
    };
    // Prefill rewrites the same slots with the same values, so warm-up calls are harmless.
    if (warm_prefill_.insert(current_).second) warm_up(run);
    return run();
  }

  at::Tensor do_decode(const StepInputs& in, const at::Tensor& slots) override {
    if (in.parent_rows.defined()) cache_->reorder(in.parent_rows, length());
    auto run = [&] {
      return current_->decode(in.input_ids, in.positions, slots, in.token_valid, cache_->validity(),
                              cache_->keys(), cache_->values());
    };
    if (warm_decode_.insert(current_).second) warm_up(run);
    return run();
  }

  // Speculative decoding: a trace made here verifies the last token and its candidates in one
  // forward. Verify traces are made on first use, in this process (cache_dir keeps prefill and
  // decode only), per bucket of positions: the positions rounded up to a multiple of
  // verify_bucket (default 4; capped by the room left), the positions past the asked ones filled
  // with the last token, their logits dropped and their slots forgotten again
  // (StaticCache::truncate), so that a prompt lookup proposing 1 to 10 candidates needs three
  // traces, not ten; verify_bucket: 1 traces every count. One position is a decode step. A trace
  // loaded from a file has prefill and decode only, and verifies one decode step per position (the
  // base class's way).
  bool verifies_at_once() const override { return s_.file.empty(); }
  at::Tensor do_verify(const StepInputs& in, const at::Tensor& slots) override {
    const int64_t t = in.input_ids.size(1);
    if (t == 1) return do_decode(in, slots).unsqueeze(1);
    const int64_t bucket = verify_positions(t, s_.verify_bucket, max_length() - length());
    bool made = false;
    TracedStep& step = verify_steps_.get(rows(), bucket, max_length(), &made);
    const StepInputs padded = pad_verify_inputs(in, bucket);
    const at::Tensor written =
        bucket > t ? at::arange(length(), length() + bucket, slots.options()) : slots;
    auto run = [&] {
      return step.verify(padded.input_ids, padded.positions, written, padded.token_valid,
                         cache_->validity(), cache_->keys(), cache_->values());
    };
    // Like prefill, a verify rewrites the same slots with the same values: warm-up is harmless.
    if (made) warm_up(run);
    at::Tensor logits = run();
    if (bucket > t) {
      cache_->truncate(length() + t);  // the filler positions are not part of the history
      logits = logits.narrow(1, 0, t);
    }
    return logits;
  }
  void do_rewind(int64_t length) override { cache_->truncate(length); }

 private:
  template <typename F>
  void warm_up(F&& run) {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < s_.trace.profiling_runs; ++i) run();
    synchronize(model().device());
    warmup_s_ += since(t0);
  }

  TracedStep& step_for(int64_t prompt_length) {
    const auto key = std::make_tuple(rows(), prompt_length, max_length());
    auto it = steps_.find(key);
    if (it != steps_.end()) return it->second;
    TraceMeta meta = expected_meta(model(), rows(), prompt_length, max_length());
    const auto t0 = Clock::now();
    if (!s_.file.empty()) {
      // A trace carries its weights. One gengraph made (from a cache_dir) records their
      // fingerprint, checked here; a Python trace records none, and is not checked.
      if (file_fingerprint_.empty()) file_fingerprint_ = model_fingerprint(model());
      meta.model_fingerprint = file_fingerprint_;
      it = steps_.emplace(key, TracedStep::load(s_.file, model().device(), meta, s_.trace)).first;
      ++loaded_;
    } else if (!s_.cache_dir.empty()) {
      meta.model_fingerprint = fingerprint_;
      const std::filesystem::path path =
          std::filesystem::path(s_.cache_dir) /
          (fingerprint_ + "-r" + std::to_string(meta.rows) + "-p" + std::to_string(prompt_length) +
           "-m" + std::to_string(meta.max_length) + "-" + meta.dtype + "-" +
           model().device().str() + (s_.trace.freeze ? "-frozen" : "") +
           (s_.trace.optimize_for_inference ? "-ofi" : "") +
           (model().config().fused ? "" : "-unfused") + ".pt");
      std::error_code ec;
      if (std::filesystem::exists(std::filesystem::symlink_status(path, ec))) {
        // A FIFO, device or folder in its place is refused by name, not opened (a FIFO blocks).
        check_regular_file(path, "trace cache file '" + path.string() + "'",
                           "a TorchScript file (remove it: the trace is made again)");
        it = steps_.emplace(key, TracedStep::load(path, model().device(), meta, s_.trace)).first;
        ++loaded_;
      } else {
        it = steps_.emplace(key, TracedStep::trace(model(), meta, s_.trace)).first;
        it->second.save(path);
        ++built_;
      }
    } else {
      it = steps_.emplace(key, TracedStep::trace(model(), meta, s_.trace)).first;
      ++built_;
    }
    trace_s_ += since(t0);
    return it->second;
  }

  Settings s_;
  std::string fingerprint_;
  std::string file_fingerprint_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, TracedStep> steps_;  // (rows, prompt, max_length)
  VerifyTraces verify_steps_;
  TracedStep* current_ = nullptr;
  std::set<const TracedStep*> warm_prefill_, warm_decode_;
  std::unique_ptr<StaticCache> cache_;  // what the traced steps read and write in place
  double trace_s_ = 0, warmup_s_ = 0;
  int64_t built_ = 0, loaded_ = 0;
};

Settings read_settings(const BackendOptions& o) {
  Settings s;
  read_step_options(o, s.trace);
  s.trace.optimize_for_inference = o.get_bool("optimize_for_inference", false);
  s.trace.profiling_runs = o.get_int("profiling_runs", 1, 0, 100);
  s.verify_bucket = o.get_int("verify_bucket", 4, 1, 1024);
  s.cache_dir = expand_home(o.get_string("cache_dir", ""));
  s.file = expand_home(o.get_string("file", ""));
  if (!s.cache_dir.empty() && checked_exists(s.cache_dir, "backend 'trace' option 'cache_dir'") &&
      !std::filesystem::is_directory(s.cache_dir)) {
    throw Error("backend 'trace' option 'cache_dir': '" + s.cache_dir + "' is not a folder");
  }
  if (!s.file.empty() && !s.cache_dir.empty()) {
    throw Error("backend 'trace': options 'file' and 'cache_dir' exclude each other");
  }
  if (!s.file.empty() &&
      !std::filesystem::is_regular_file(checked_status(s.file, "backend 'trace' option 'file'"))) {
    throw Error("backend 'trace' option 'file': '" + s.file + "' " +
                (std::filesystem::exists(s.file) ? "is not a file" : "does not exist"));
  }
  return s;
}

}  // namespace

BackendInfo trace_backend_info() {
  BackendInfo info;
  info.name = "trace";
  info.description =
      "TorchScript trace of the step over a static cache; options freeze, optimize_for_inference, "
      "fuser, "
      "profiling_runs, cache_dir, file, verify_bucket";
  info.check_options = [](const BackendOptions& o, const c10::Device&) { read_settings(o); };
  info.create = [](std::shared_ptr<const CausalLM> model, const BackendOptions& o) {
    return std::make_unique<TraceBackend>(std::move(model), read_settings(o));
  };
  return info;
}

}  // namespace gengraph
