#include "backends/trace/traced_step.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/codegen/fuser/interface.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/serialization/import.h>

#include <map>
#include <sstream>
#include <tuple>

#include "framework/backend/model_step.h"
#include "framework/backend/options.h"
#include "framework/cache/kv_cache.h"
#include "framework/model/causal_lm.h"
#include "framework/util/clock.h"
#include "framework/util/device.h"
#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/json_at.h"
#include "framework/util/strings.h"

namespace gengraph {
namespace {

const std::vector<std::string> kArgs = {"input_ids", "positions", "slots", "token_valid",
                                        "valid",     "keys",      "values"};

// Traces one step (T tokens per row) of `model` into method `name` of `m`: the last position's
// logits, or with `all_positions` every position's (a verify step).
void trace_method(torch::jit::Module& m, const std::string& name, const CausalLM& model,
                  std::vector<at::Tensor> args, bool all_positions = false) {
  torch::jit::Stack inputs(args.begin(), args.end());
  auto step = [&model, all_positions](torch::jit::Stack in) -> torch::jit::Stack {
    StaticCache cache(in[5].toTensor(), in[6].toTensor(), in[4].toTensor());
    at::Tensor logits = run_forward_step(model, cache, in[0].toTensor(), in[1].toTensor(),
                                         in[2].toTensor(), in[3].toTensor(), all_positions);
    return {logits};
  };
  auto traced = torch::jit::tracer::trace(
      std::move(inputs), step, [](const at::Tensor&) { return std::string(); },
      /*strict=*/false, /*force_outplace=*/false, &m, kArgs);
  auto fn = m._ivalue()->compilation_unit()->create_function(
      c10::QualifiedName(*m.type()->name(), name), traced.first->graph);
  m.type()->addMethod(fn);
}

// Example inputs of the contract's shapes (values do not matter for a trace of static shapes).
std::vector<at::Tensor> example_args(const CausalLM& model, const TraceMeta& meta, int64_t t) {
  const auto dev = model.device();
  const auto l = at::TensorOptions().dtype(at::kLong).device(dev);
  const auto b = at::TensorOptions().dtype(at::kBool).device(dev);
  const auto f = at::TensorOptions().dtype(model.dtype()).device(dev);
  return {at::zeros({meta.rows, t}, l),
          at::zeros({meta.rows, t}, l),
          at::arange(t, l),
          at::ones({meta.rows, t}, b),
          at::zeros({meta.rows, meta.max_length}, b),
          at::zeros({meta.layers, meta.rows, meta.kv_heads, meta.max_length, meta.head_dim}, f),
          at::zeros({meta.layers, meta.rows, meta.kv_heads, meta.max_length, meta.head_dim}, f)};
}

void compare(const std::string& file, const char* field, const std::string& want,
             const std::string& got) {
  if (want != got) {
    throw Error("trace file '" + file + "' was made for " + field + " " + got +
                ", but this run needs " + field + " " + want +
                " (delete the file or make a new trace)");
  }
}

// LibTorch's fuser switches and profiled-run count are process-wide, and the graph executor reads
// them when it optimizes a method (on the call that ends profiling). Each call sets this step's
// values and puts the previous ones back, so steps with other options in the same process (two
// rows of one experiment, say) do not change each other.
class JitSettingsScope {
 public:
  explicit JitSettingsScope(const TraceOptions& o)
      : te_(torch::jit::tensorExprFuserEnabled()),
        cpu_(torch::jit::canFuseOnCPU()),
        gpu_(torch::jit::canFuseOnGPU()),
        runs_(torch::jit::getNumProfiledRuns()) {
    if (o.fuser == TraceOptions::Fuser::kNone) torch::jit::setTensorExprFuserEnabled(false);
    if (o.fuser == TraceOptions::Fuser::kTe) {
      torch::jit::setTensorExprFuserEnabled(true);
      torch::jit::overrideCanFuseOnGPU(true);
      torch::jit::overrideCanFuseOnCPU(true);
    }
    if (o.profiling_runs > 0)
      torch::jit::getNumProfiledRuns() = static_cast<size_t>(o.profiling_runs);
  }
  ~JitSettingsScope() {
    torch::jit::setTensorExprFuserEnabled(te_);
    torch::jit::overrideCanFuseOnGPU(gpu_);
    torch::jit::overrideCanFuseOnCPU(cpu_);
    torch::jit::getNumProfiledRuns() = runs_;
  }
  JitSettingsScope(const JitSettingsScope&) = delete;
  JitSettingsScope& operator=(const JitSettingsScope&) = delete;

 private:
  bool te_, cpu_, gpu_;
  size_t runs_;
};

}  // namespace

void read_step_options(const BackendOptions& o, TraceOptions& out) {
  out.freeze = o.get_bool("freeze", true);
  const std::string fuser = o.get_string("fuser", "default", {"default", "none", "te"});
  out.fuser = fuser == "none" ? TraceOptions::Fuser::kNone
              : fuser == "te" ? TraceOptions::Fuser::kTe
                              : TraceOptions::Fuser::kDefault;
}

nlohmann::json TraceMeta::to_json() const {
  return {{"format", format},
          {"model_type", model_type},
          {"model_fingerprint", model_fingerprint},
          {"layers", layers},
          {"kv_heads", kv_heads},
          {"head_dim", head_dim},
          {"vocab_size", vocab_size},
          {"dtype", dtype},
          {"rows", rows},
          {"prompt_length", prompt_length},
          {"max_length", max_length},
          {"made_by", made_by}};
}

TraceMeta TraceMeta::from_json(const nlohmann::json& j, const std::string& source) {
  const JsonAt doc(j, source + ": gengraph.json");
  doc.object("an object (the trace's metadata, docs/tracing.md)");
  TraceMeta m;
  m.format = static_cast<int>(doc["format"].integer_in(1, 1, "1 (the format this gengraph reads)"));
  m.model_type = doc["model_type"].string();
  m.model_fingerprint = doc.string_or("model_fingerprint", "");
  m.layers = doc["layers"].integer();
  m.kv_heads = doc["kv_heads"].integer();
  m.head_dim = doc["head_dim"].integer();
  m.vocab_size = doc["vocab_size"].integer();
  m.dtype = doc["dtype"].string();
  m.rows = doc["rows"].integer();
  m.prompt_length = doc["prompt_length"].integer();
  m.max_length = doc["max_length"].integer();
  m.made_by = doc.string_or("made_by", "");
  return m;
}

TraceMeta TraceMeta::parse(std::string_view text, const std::string& source) {
  return from_json(parse_json_text(text, source + ": gengraph.json"), source);
}

TraceMeta expected_meta(const CausalLM& model, int64_t rows, int64_t prompt_length,
                        int64_t max_length) {
  const auto& c = model.config();
  TraceMeta m;
  m.model_type = c.model_type;
  m.layers = c.num_layers;
  m.kv_heads = c.num_kv_heads;
  m.head_dim = c.head_dim;
  m.vocab_size = c.vocab_size;
  m.dtype = dtype_name(model.dtype());
  m.rows = rows;
  m.prompt_length = prompt_length;
  m.max_length = max_length;
  m.made_by = "gengraph";
  return m;
}

TracedStep TracedStep::trace(const CausalLM& model, const TraceMeta& meta,
                             const TraceOptions& options) {
  at::AutoGradMode no_grad(false);
  auto m =
      std::make_shared<torch::jit::Module>(c10::QualifiedName("__torch__.gengraph.TracedStep"));
  m->register_attribute("training", c10::BoolType::get(), false);
  trace_method(*m, "prefill", model, example_args(model, meta, meta.prompt_length));
  trace_method(*m, "decode", model, example_args(model, meta, 1));
  // torch::jit::freeze and optimize_for_inference start from `forward`; give them one (decode).
  m->type()->addMethod(m->_ivalue()->compilation_unit()->create_function(
      c10::QualifiedName(*m->type()->name(), "forward"),
      torch::jit::toGraphFunction(m->get_method("decode").function()).graph()->copy()));
  if (options.freeze || options.optimize_for_inference) {
    *m = torch::jit::freeze(*m, std::vector<std::string>{"prefill", "decode"}, true);
  }
  if (options.optimize_for_inference) {
    *m = torch::jit::optimize_for_inference(*m, {"prefill", "decode"});
  }
  TracedStep s;
  s.module_ = std::move(m);
  s.meta_ = meta;
  s.options_ = options;
  s.source_ = "traced in C++";
  return s;
}

TracedStep TracedStep::trace_verify(const CausalLM& model, const TraceMeta& meta, int64_t t,
                                    const TraceOptions& options) {
  at::AutoGradMode no_grad(false);
  auto m =
      std::make_shared<torch::jit::Module>(c10::QualifiedName("__torch__.gengraph.TracedVerify"));
  m->register_attribute("training", c10::BoolType::get(), false);
  trace_method(*m, "verify", model, example_args(model, meta, t), /*all_positions=*/true);
  m->type()->addMethod(m->_ivalue()->compilation_unit()->create_function(
      c10::QualifiedName(*m->type()->name(), "forward"),
      torch::jit::toGraphFunction(m->get_method("verify").function()).graph()->copy()));
  if (options.freeze || options.optimize_for_inference) {
    *m = torch::jit::freeze(*m, std::vector<std::string>{"verify"}, true);
  }
  if (options.optimize_for_inference) *m = torch::jit::optimize_for_inference(*m, {"verify"});
  TracedStep s;
  s.module_ = std::move(m);
  s.meta_ = meta;
  s.options_ = options;
  s.source_ = "traced in C++ (verify, " + std::to_string(t) + " positions)";
  s.verify_positions_ = t;
  return s;
}

TracedStep TracedStep::load(const std::filesystem::path& path, const c10::Device& device,
                            const TraceMeta& expected, const TraceOptions& options) {
  const std::string file = path.string();
  if (!std::filesystem::exists(path)) throw Error("trace file '" + file + "' does not exist");
  // Before LibTorch opens it: a FIFO in its place would block the open forever.
  check_regular_file(path, "trace file '" + file + "'", "a TorchScript file");
  torch::jit::ExtraFilesMap extra{{"gengraph.json", ""}};
  auto m = std::make_shared<torch::jit::Module>();
  try {
    *m = torch::jit::load(file, device, extra);
  } catch (const c10::Error& e) {
    throw Error("trace file '" + file +
                "' is not a readable TorchScript archive: " + e.what_without_backtrace());
  }
  if (extra["gengraph.json"].empty()) {
    throw Error("trace file '" + file +
                "' has no gengraph.json extra file (see docs/tracing.md for the contract)");
  }
  const TraceMeta got = TraceMeta::parse(extra["gengraph.json"], "trace file '" + file + "'");
  compare(file, "model_type", expected.model_type, got.model_type);
  compare(file, "layers", std::to_string(expected.layers), std::to_string(got.layers));
  compare(file, "kv_heads", std::to_string(expected.kv_heads), std::to_string(got.kv_heads));
  compare(file, "head_dim", std::to_string(expected.head_dim), std::to_string(got.head_dim));
  compare(file, "vocab_size", std::to_string(expected.vocab_size), std::to_string(got.vocab_size));
  compare(file, "dtype", expected.dtype, got.dtype);
  compare(file, "rows", std::to_string(expected.rows), std::to_string(got.rows));
  compare(file, "prompt_length", std::to_string(expected.prompt_length),
          std::to_string(got.prompt_length));
  compare(file, "max_length", std::to_string(expected.max_length), std::to_string(got.max_length));
  if (!expected.model_fingerprint.empty() && !got.model_fingerprint.empty()) {
    compare(file, "model weights (fingerprint)", expected.model_fingerprint, got.model_fingerprint);
  }
  std::vector<std::string> missing;
  for (const char* method : {"prefill", "decode"}) {
    if (!m->find_method(method)) missing.push_back(method);
  }
  if (!missing.empty()) {
    throw Error("trace file '" + file + "' lacks method(s) " + join(missing, ", ") +
                "; the contract needs prefill and decode (docs/tracing.md)");
  }
  TracedStep s;
  s.module_ = std::move(m);
  s.meta_ = got;
  s.options_ = options;
  s.source_ = file;
  return s;
}

void TracedStep::save(const std::filesystem::path& path) const {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  // Serialised in memory first: LibTorch's file writer throws from a destructor when the disk is
  // full (which aborts the process) and leaves a truncated file; here a write error is an Error
  // naming the file and the reason, and only a complete file is ever renamed into the cache.
  torch::jit::ExtraFilesMap extra{{"gengraph.json", meta_.to_json().dump()}};
  std::ostringstream bytes;
  module_->save(bytes, extra);
  write_file_atomically(path, bytes.str(), "the trace cache file");
}

at::Tensor TracedStep::call(const char* method, const std::vector<at::Tensor>& args,
                            bool& checked) {
  std::vector<c10::IValue> in(args.begin(), args.end());
  c10::IValue out;
  try {
    JitSettingsScope scope(options_);
    out = module_->get_method(method)(std::move(in));
  } catch (const std::exception& e) {  // c10::Error, or what TensorExpr throws (std::runtime_error)
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    const std::string what = c10_error ? c10_error->what_without_backtrace() : e.what();
    const bool no_llvm =
        options_.fuser == TraceOptions::Fuser::kTe && what.find("LLVM") != std::string::npos;
    throw Error(
        "trace '" + source_ + "' method " + method + " failed: " + what +
        (no_llvm ? " (fuser: te fuses on CPU only in a LibTorch built with LLVM, which the PyPI "
                   "wheels are not; use fuser: default or none on CPU)"
                 : ""));
  }
  if (!out.isTensor()) {
    throw Error("trace '" + source_ + "' method " + method + " returned a " + out.tagKind() +
                ", the contract needs one logits tensor [rows, vocab]");
  }
  at::Tensor logits = out.toTensor();
  if (!checked) {  // the contract's output shape, checked on the first call of each method
    const bool verify = verify_positions_ > 0;
    const bool shape_ok = logits.dim() == (verify ? 3 : 2) && logits.size(0) == meta_.rows &&
                          (!verify || logits.size(1) == verify_positions_) &&
                          logits.size(-1) == meta_.vocab_size;
    if (!shape_ok) {
      throw Error("trace '" + source_ + "' " + method + " returned " + shape_str(logits.sizes()) +
                  ", expected [" + std::to_string(meta_.rows) + ", " +
                  (verify ? std::to_string(verify_positions_) + ", " : "") +
                  std::to_string(meta_.vocab_size) + "]");
    }
    if (!at::isFloatingType(logits.scalar_type())) {
      throw Error("trace '" + source_ + "' " + method + " returned " +
                  std::string(c10::toString(logits.scalar_type())) +
                  " logits, expected floating-point scores (the model's dtype)");
    }
    checked = true;
  }
  return logits;
}

at::Tensor TracedStep::prefill(const at::Tensor& ids, const at::Tensor& pos,
                               const at::Tensor& slots, const at::Tensor& tv,
                               const at::Tensor& valid, const at::Tensor& keys,
                               const at::Tensor& values) {
  return call("prefill", {ids, pos, slots, tv, valid, keys, values}, checked_prefill_);
}

at::Tensor TracedStep::decode(const at::Tensor& ids, const at::Tensor& pos, const at::Tensor& slots,
                              const at::Tensor& tv, const at::Tensor& valid, const at::Tensor& keys,
                              const at::Tensor& values) {
  return call("decode", {ids, pos, slots, tv, valid, keys, values}, checked_decode_);
}

at::Tensor TracedStep::verify(const at::Tensor& ids, const at::Tensor& pos, const at::Tensor& slots,
                              const at::Tensor& tv, const at::Tensor& valid, const at::Tensor& keys,
                              const at::Tensor& values) {
  if (verify_positions_ == 0) {
    throw Error("internal: trace '" + source_ +
                "' has no verify method (TracedStep::trace_verify)");
  }
  return call("verify", {ids, pos, slots, tv, valid, keys, values}, checked_verify_);
}

TracedStep& VerifyTraces::get(int64_t rows, int64_t positions, int64_t max_length, bool* made) {
  const auto key = std::make_tuple(rows, positions, max_length);
  auto found = steps_.find(key);
  if (made) *made = found == steps_.end();
  if (found != steps_.end()) return found->second;
  const auto t0 = Clock::now();
  found = steps_
              .emplace(key, TracedStep::trace_verify(
                                model_, expected_meta(model_, rows, positions, max_length),
                                positions, options_))
              .first;
  seconds_ += since(t0);
  return found->second;
}

namespace {

// Traces as a model step: a trace is made per row count (and prompt length), on first use or in
// prepare_rows(). A fresh prefill trace runs `warmup` times before its result counts (LibTorch's
// profiling runs rewrite the same slots with the same values); decode is warmed by the wrapping
// backend (cuda_graph's warm-up before each capture).
class TraceModelStep final : public ModelStep {
 public:
  TraceModelStep(const CausalLM& model, TraceOptions options, int64_t warmup)
      : model_(model), options_(options), warmup_(warmup), verifies_(model, options) {}
  std::string kind() const override { return "trace"; }
  bool shares_prefill() const override { return false; }
  void prepare_rows(int64_t rows, int64_t max_length) override { get(rows, 1, max_length); }
  at::Tensor prefill(const StepArgs& a) override { return run(a, false); }
  at::Tensor decode(const StepArgs& a) override { return run(a, true); }
  // A verify trace per (rows, positions, max_length), made on first use (a capture's warm-up
  // calls come first, so it is never made inside a capture).
  bool verifies() const override { return true; }
  at::Tensor verify(const StepArgs& a) override {
    const StaticCache& c = *a.cache;
    TracedStep& step = verifies_.get(a.input_ids.size(0), a.input_ids.size(1), c.keys().size(3));
    return step.verify(a.input_ids, a.positions, a.slots, a.token_valid, c.validity(), c.keys(),
                       c.values());
  }
  BackendReport report() const override {
    return {{"traces", double(traces_.size())},
            {"verify_traces", double(verifies_.size())},
            {"trace_seconds", trace_s_ + verifies_.seconds()}};
  }

 private:
  struct Entry {
    TracedStep step;
    bool warm = false;  // its prefill has run its warm-up calls
  };
  Entry& get(int64_t rows, int64_t t, int64_t max_length) {
    const auto key = std::make_tuple(rows, t, max_length);
    auto found = traces_.find(key);
    if (found == traces_.end()) {
      const auto t0 = Clock::now();
      found = traces_
                  .emplace(key, Entry{TracedStep::trace(
                                    model_, expected_meta(model_, rows, t, max_length), options_)})
                  .first;
      trace_s_ += since(t0);
    }
    return found->second;
  }
  at::Tensor run(const StepArgs& a, bool decode) {
    const StaticCache& c = *a.cache;
    Entry& e = get(a.input_ids.size(0), a.input_ids.size(1), c.keys().size(3));
    if (decode) {
      return e.step.decode(a.input_ids, a.positions, a.slots, a.token_valid, c.validity(), c.keys(),
                           c.values());
    }
    const auto call = [&] {
      return e.step.prefill(a.input_ids, a.positions, a.slots, a.token_valid, c.validity(),
                            c.keys(), c.values());
    };
    for (int64_t i = 0; !e.warm && i < warmup_; ++i) call();
    e.warm = true;
    return call();
  }

  const CausalLM& model_;
  TraceOptions options_;
  int64_t warmup_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, Entry> traces_;  // (rows, T, max_length)
  VerifyTraces verifies_;
  double trace_s_ = 0;
};

}  // namespace

ModelStepInfo trace_step_info() {
  ModelStepInfo info;
  info.name = "trace";
  info.description =
      "a TorchScript trace of the model's step, made per row count; options "
      "freeze (true), fuser (default|none|te)";
  info.option_keys = {"freeze", "fuser"};
  info.check_options = [](const BackendOptions& o) {
    TraceOptions t;
    read_step_options(o, t);
  };
  info.create = [](const CausalLM& model, const BackendOptions& o, int64_t warmup) {
    TraceOptions t;
    read_step_options(o, t);
    return std::make_unique<TraceModelStep>(model, t, warmup);
  };
  return info;
}

}  // namespace gengraph
