#include "backends/aoti/aoti_step.h"

#include <ATen/ATen.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "backends/aoti/aoti_package.h"
#include "framework/backend/model_step.h"
#include "framework/backend/options.h"
#include "framework/cache/kv_cache.h"
#include "framework/model/causal_lm.h"
#include "framework/quant/kernels.h"
#include "framework/util/clock.h"
#include "framework/util/device.h"
#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/json_at.h"
#include "framework/util/locks.h"

namespace gengraph {
namespace {

std::mutex g_builder_mutex;
struct BuilderSlot {
  AotiPackageBuilder build;
  std::string identity;
};
BuilderSlot& builder_slot() {
  static BuilderSlot slot;
  return slot;
}

// The first line of an exception's text (LibTorch's carry a C++ backtrace after it).
std::string first_line(const std::string& what) { return what.substr(0, what.find('\n')); }

std::string device_kind(const c10::Device& d) { return d.is_cuda() ? "cuda" : d.str(); }

// The file of the shared library this code is in (libgengraph_core.so), which registers gengraph's
// operators: the exporter of a quantized model loads it into its Python.
std::string core_library_path() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&kernels::vectorized), &info) == 0 || !info.dli_fname)
    return "";
  return std::filesystem::absolute(info.dli_fname).string();
}

std::filesystem::path sidecar(const std::filesystem::path& package) {
  return package.string() + ".build.json";
}

// LibTorch's loader unpacks a package into a fresh folder /tmp/XXXXXX (mkdtemp, always under
// /tmp) and removes it in its destructor; when its constructor throws, the folder stays. While a
// load runs, this holds a lock that gengraph processes of this user share (and a mutex for the
// threads of this one), so that no other gengraph load makes such folders meanwhile; after a
// failure it removes the folders made since that hold nothing but this package's files.
class UnpackedCopies {
 public:
  explicit UnpackedCopies(const PackageLayout& layout) : layout_(layout), guard_(mutex()) {
    try {
      lock_.emplace(std::filesystem::path("/tmp") /
                        ("gengraph-aoti-unpack-" + std::to_string(::geteuid()) + ".lock"),
                    "the lock on unpacking AOTInductor packages", lock_timeout_seconds(),
                    &std::cerr);
    } catch (const Error&) {
      // Without the lock another load may run meanwhile; its folder is recognised by its files
      // all the same, and one of the same package left alone only when it is not complete.
    }
    before_ = folders();
  }

  void remove_leftovers() const {
    std::unordered_set<std::string> ours;
    for (const auto& e : layout_.entries) {
      ours.insert(e.name);
      // Constants are unpacked into the model's folder.
      ours.insert(layout_.model_dir + "/" + e.name.substr(e.name.rfind('/') + 1));
    }
    for (const auto& dir : folders()) {
      if (before_.count(dir) || !holds_only(dir, ours)) continue;
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }

  // This user's folders /tmp/XXXXXX.
  static std::set<std::string> folders() {
    std::set<std::string> out;
    std::error_code ec;
    for (std::filesystem::directory_iterator it("/tmp", ec), end; !ec && it != end;
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      struct stat st {};
      if (name.size() != 6 || ::lstat(it->path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
          st.st_uid != ::geteuid()) {
        continue;
      }
      out.insert(it->path().string());
    }
    return out;
  }

  static bool holds_only(const std::string& dir, const std::unordered_set<std::string>& ours) {
    std::error_code ec;
    int files = 0;
    for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end;
         it.increment(ec)) {
      const auto st = it->symlink_status(ec);
      if (std::filesystem::is_directory(st)) continue;
      if (!std::filesystem::is_regular_file(st)) return false;
      if (!ours.count(it->path().lexically_relative(dir).generic_string())) return false;
      ++files;
    }
    return !ec && files > 0;
  }

  const PackageLayout& layout_;
  std::lock_guard<std::mutex> guard_;
  std::optional<FileLock> lock_;
  std::set<std::string> before_;
};

}  // namespace

void set_aoti_package_builder(AotiPackageBuilder builder, std::string identity) {
  std::lock_guard<std::mutex> lock(g_builder_mutex);
  builder_slot() = {std::move(builder), std::move(identity)};
}

bool has_aoti_package_builder() {
  std::lock_guard<std::mutex> lock(g_builder_mutex);
  return static_cast<bool>(builder_slot().build);
}

AotiMeta expected_aoti_meta(const CausalLM& model, bool freezing) {
  const auto& c = model.config();
  AotiMeta m;
  m.format = kAotiExportFormat;
  m.model_type = c.model_type;
  m.model_fingerprint = model_fingerprint(model);
  m.layers = c.num_layers;
  m.kv_heads = c.num_kv_heads;
  m.head_dim = c.head_dim;
  m.vocab_size = c.vocab_size;
  m.dtype = dtype_name(model.dtype());
  m.device = device_kind(model.device());
  m.freezing = freezing;
  m.weights = aoti_weights_tag(c.weights);
  m.torch_version = torch_version();
  return m;
}

std::filesystem::path default_aoti_cache_dir() {
  if (const char* p = std::getenv("GENGRAPH_AOTI_CACHE"); p && *p) return p;
  if (const char* p = std::getenv("XDG_CACHE_HOME"); p && *p)
    return std::filesystem::path(p) / "gengraph" / "aoti";
  if (const char* p = std::getenv("HOME"); p && *p)
    return std::filesystem::path(p) / ".cache" / "gengraph" / "aoti";
  return std::filesystem::temp_directory_path() / "gengraph-aoti";
}

void read_aoti_options(const BackendOptions& o, AotiStepOptions& out) {
  const std::string backend = o.backend();
  out.package = expand_home(o.get_string("package", ""));
  out.cache_dir = expand_home(o.get_string("cache_dir", ""));
  out.freezing = o.get_bool("freezing", false);
  out.max_rows = o.get_int("max_rows", 1024, 2, 1 << 20);
  if (!out.package.empty() && !out.cache_dir.empty()) {
    throw Error("backend '" + backend + "': options 'package' and 'cache_dir' exclude each other");
  }
  if (!out.package.empty() && !std::filesystem::is_regular_file(out.package)) {
    throw Error("backend '" + backend + "' option 'package': '" + out.package + "' " +
                (std::filesystem::exists(out.package) ? "is not a file" : "does not exist"));
  }
  if (!out.cache_dir.empty() && std::filesystem::exists(out.cache_dir) &&
      !std::filesystem::is_directory(out.cache_dir)) {
    throw Error("backend '" + backend + "' option 'cache_dir': '" + out.cache_dir +
                "' is not a folder");
  }
}

AotiStep::AotiStep(const CausalLM& model, const AotiStepOptions& o, const std::string& backend)
    : backend_(backend) {
  const WeightFormat& weights = model.config().weights;
  if (weights.quantized() && !model.device().is_cpu()) {
    // The exported projections call gengraph's weight-only operators (gengraph::linear_int8,
    // ...), which have CPU kernels only.
    throw Error("backend '" + backend + "': model.weights " + weights.name() + " on " +
                model.device().str() +
                " is not exported yet (a package calls gengraph's weight-only operators, which "
                "run on CPU only); use eager, trace or cuda_graph (step: eager), or "
                "model.weights: float");
  }
  if (weights.int8_activation_rows > 0 && weights.int8_activation_block == 0 &&
      model.config().model_type == "gptj") {
    // gengraph's GPT-J runs out_proj and fc_out as one product over their joined inputs, one
    // activation scale per joined row; transformers' modules, which the package is exported
    // from, run them apart (blocks fall inside one part or the other, so blocks give the same).
    throw Error("backend '" + backend +
                "': model.int8_activation_rows with a scale per row (int8_activation_block: 0) "
                "is not exported for gptj (gengraph scales out_proj and fc_out's joined input "
                "row as one; the exported model runs them apart); set model."
                "int8_activation_block (e.g. 32), or use eager, trace or cuda_graph");
  }
  const AotiMeta want = expected_aoti_meta(model, o.freezing);
  PackageLayout layout;  // what the checks found in the package, before it is loaded
  if (!o.package.empty()) {
    path_ = o.package;
    try {
      layout = inspect_package(path_, true);
    } catch (const Error& e) {
      throw Error("backend '" + backend + "' option 'package': " + e.what());
    }
  } else {
    const std::filesystem::path dir =
        o.cache_dir.empty() ? default_aoti_cache_dir() : std::filesystem::path(o.cache_dir);
    BuilderSlot builder;
    {
      std::lock_guard<std::mutex> guard(g_builder_mutex);
      builder = builder_slot();
    }
    path_ = dir /
            (want.model_type + "-" + want.model_fingerprint + "-" + want.dtype + "-" + want.device +
             "-f" + std::to_string(kAotiExportFormat) + "-torch" + want.torch_version + "-r" +
             std::to_string(o.max_rows) + (o.freezing ? "-frozen" : "") +
             // The fingerprint is the loaded (float) weights': the format keeps a quantized
             // model's package apart from the float one's.
             (want.weights == "float" ? "" : "-w" + want.weights) +
             (o.ragged ? (o.invariant ? "-ragged-invariant" : "-ragged") : "") +
             (builder.identity.empty() ? "" : "-b" + builder.identity) + ".pt2");
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      throw Error("backend '" + backend + "': cannot create the package cache folder '" +
                  dir.string() + "': " + ec.message());
    }
    // A cached package, checked: its whole file against the SHA-256 its build record holds (then
    // its structure), or without a record against its manifest. Returns what is wrong ("" when
    // nothing), filling `out` and the recorded build figures.
    const auto read_cached = [&](PackageLayout& out) -> std::string {
      std::string recorded;
      const std::filesystem::path record_file = sidecar(path_);
      std::error_code status_error;
      if (std::filesystem::exists(std::filesystem::symlink_status(record_file, status_error))) {
        try {
          const std::string source = "the package's build record '" + record_file.string() + "'";
          const nlohmann::json j = parse_json_text(
              read_regular_file(record_file, source, "a JSON file", 1 << 16), source);
          const JsonAt doc(j, source);
          doc.object("an object (written when the package was built)");
          const std::string seconds = "a number of seconds >= 0";
          const double most = std::numeric_limits<double>::max();
          build_.export_seconds = doc["export_seconds"].number_in(0, most, seconds);
          build_.compile_seconds = doc["compile_seconds"].number_in(0, most, seconds);
          if (const auto sum = doc.find("sha256")) recorded = sha256_digest(*sum);
        } catch (const Error& e) {
          // A damaged record loses its figures; the package is checked against its manifest.
          std::cerr << "gengraph: " << e.what()
                    << "; checking the package against its own manifest instead\n";
          build_ = {};
          recorded.clear();
        }
      }
      try {
        if (!recorded.empty() && sha256_of_file(path_) != recorded) {
          return "AOTInductor package '" + path_.string() +
                 "' is damaged: its SHA-256 is not the one recorded in '" +
                 sidecar(path_).string() + "' when it was built";
        }
        out = inspect_package(path_, recorded.empty());
      } catch (const Error& e) {
        return e.what();
      }
      return "";
    };
    // One process builds a package; the others wait for it (saying whom for), up to the lock
    // timeout.
    FileLock lock(path_.string() + ".lock", "the lock on building the package",
                  lock_timeout_seconds(), &std::cerr);
    if (std::filesystem::exists(std::filesystem::symlink_status(path_, ec))) {
      if (!std::filesystem::is_regular_file(std::filesystem::status(path_, ec))) {
        throw Error("backend '" + backend + "': the package cache entry '" + path_.string() +
                    "' is not a regular file (a FIFO, device, socket or folder); remove it to "
                    "rebuild the package");
      }
      const std::string damage = read_cached(layout);
      if (!damage.empty()) {
        if (!builder.build) {
          throw Error("backend '" + backend + "': " + damage +
                      " (a cached package: remove it to rebuild it)");
        }
        std::cerr << "gengraph: " << damage << "; rebuilding the cached package\n";
        std::filesystem::remove(path_, ec);
        std::filesystem::remove(sidecar(path_), ec);
        build_ = {};
      }
    }
    if (!std::filesystem::exists(std::filesystem::symlink_status(path_, ec))) {
      if (!builder.build) {
        throw Error("backend '" + backend + "': no package at '" + path_.string() +
                    "' and no package builder installed (gengraph's CLI installs one that runs "
                    "tools/export_aoti.py; an embedding program can pass the option 'package')");
      }
      AotiExportRequest request;
      request.dtype = want.dtype;
      request.device = want.device;
      request.fingerprint = want.model_fingerprint;
      request.freezing = o.freezing;
      request.max_rows = o.max_rows;
      request.weights = weights;
      request.ragged = o.ragged;
      request.invariant = o.invariant;
      // A quantized or ragged package calls gengraph's operators, which this library registers.
      if (weights.quantized() || o.ragged) request.ops_library = core_library_path();
      build_ = builder.build(model, request, path_);
      built_ = true;
      if (!std::filesystem::is_regular_file(path_)) {
        throw Error("backend '" + backend + "': the package builder wrote no package at '" +
                    path_.string() + "'");
      }
      try {
        layout = inspect_package(path_, true);
      } catch (const Error& e) {
        std::filesystem::remove(path_, ec);
        throw Error("backend '" + backend + "': the package builder wrote a damaged package " +
                    "(removed): " + e.what());
      }
      // The package's checksum, checked before each later load of it from the cache.
      write_file_atomically(sidecar(path_),
                            nlohmann::json{{"export_seconds", build_.export_seconds},
                                           {"compile_seconds", build_.compile_seconds},
                                           {"sha256", sha256_of_file(path_)}}
                                .dump(),
                            "the package's build record");
    }
  }

  meta_ = AotiMeta::from(layout.meta, path_);
  auto refuse = [&](const std::string& what, const std::string& found, const std::string& need) {
    if (found == need) return;
    throw Error("backend '" + backend + "': package '" + path_.string() + "' was made for " + what +
                " '" + found + "', but this run needs '" + need + "'" +
                (o.package.empty() ? " (remove it from the cache to rebuild it)"
                                   : " (make one with tools/export_aoti.py)"));
  };
  refuse("export format", std::to_string(meta_.format), std::to_string(want.format));
  refuse("torch", meta_.torch_version, want.torch_version);
  refuse("model type", meta_.model_type, want.model_type);
  refuse("layers", std::to_string(meta_.layers), std::to_string(want.layers));
  refuse("kv_heads", std::to_string(meta_.kv_heads), std::to_string(want.kv_heads));
  refuse("head_dim", std::to_string(meta_.head_dim), std::to_string(want.head_dim));
  refuse("vocab_size", std::to_string(meta_.vocab_size), std::to_string(want.vocab_size));
  // A package made outside gengraph without --fingerprint carries none: unchecked, as Python
  // traces are (docs/aoti.md).
  if (!meta_.model_fingerprint.empty())
    refuse("model weights (fingerprint)", meta_.model_fingerprint, want.model_fingerprint);
  refuse("dtype", meta_.dtype, want.dtype);
  refuse("device", meta_.device, want.device);
  refuse("model.weights", meta_.weights, want.weights);
  // The ragged form (continuous batching) or the step (generate, cuda_graph): options ragged and
  // invariant choose.
  if (meta_.form != (o.ragged ? "ragged" : "step") || (o.invariant && !meta_.invariant)) {
    throw Error("backend '" + backend + "': package '" + path_.string() + "' holds the " +
                (meta_.invariant ? "invariant " : "") + meta_.form + " form, but " +
                (o.ragged ? std::string("options ragged") + (o.invariant ? ", invariant" : "") +
                                " need one made by tools/export_aoti.py --ragged" +
                                (o.invariant ? " --invariant" : "")
                          : "this run needs the step form (made without --ragged; a ragged "
                            "package serves continuous batching with the option ragged: true)"));
  }

  const auto t0 = Clock::now();
  const c10::Device d = model.device();
  {
    UnpackedCopies copies(layout);
    try {
      loader_ = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
          path_.string(), "model", false, 1, d.is_cuda() ? (d.has_index() ? d.index() : 0) : -1);
    } catch (const std::exception& e) {
      copies.remove_leftovers();
      throw Error("backend '" + backend + "': package '" + path_.string() +
                  "' could not be loaded: " + first_line(e.what()));
    }
  }
  load_s_ = since(t0);
}

AotiStep::~AotiStep() = default;

at::Tensor AotiStep::run(const at::Tensor& input_ids, const at::Tensor& positions,
                         const at::Tensor& slots, const at::Tensor& token_valid,
                         const at::Tensor& valid, const at::Tensor& keys, const at::Tensor& values,
                         bool all_positions, void* cuda_stream) {
  const int64_t rows = input_ids.size(0), max_length = valid.size(1), t = input_ids.size(1);
  if (rows > meta_.max_rows) {
    throw Error("backend '" + backend_ + "': " + std::to_string(rows) +
                " rows (batch x beams) exceed the package's bound " +
                std::to_string(meta_.max_rows) + "; raise the option 'max_rows'");
  }
  if (max_length > meta_.context) {
    throw Error("backend '" + backend_ + "': " + std::to_string(max_length) +
                " cache positions exceed the package's bound (the model's context, " +
                std::to_string(meta_.context) + ")");
  }
  // The compiled program computes strides from the sizes: every input must be contiguous, and
  // the cache buffers are the ones written in place, so they must be too (they are: StaticCache,
  // or its first rows, whose per-layer slices are contiguous).
  const auto layer_contiguous = [](const at::Tensor& t) {
    return t.size(0) == 0 || t.select(0, 0).is_contiguous();
  };
  TORCH_INTERNAL_ASSERT(valid.is_contiguous() && layer_contiguous(keys) &&
                        layer_contiguous(values));
  // The cache goes in per layer (export format 2): views of the stacked buffers, written in place.
  // The views are made once per buffer (the cache outlives many steps), not 2 x layers ops a step;
  // those of a buffer's first rows (a shared prefill, once a generation) are made for the call.
  LayerViews once;
  LayerViews* lv = nullptr;
  for (auto& c : layer_views_) {
    if (c.keys == keys.data_ptr() && c.values == values.data_ptr() && c.sizes == keys.sizes()) {
      lv = &c;
    }
  }
  if (!lv) {
    const bool whole_buffers = keys.is_contiguous();
    lv = whole_buffers ? &layer_views_[next_views_] : &once;
    if (whole_buffers) next_views_ = 1 - next_views_;
    lv->views.clear();
    for (int64_t l = 0; l < keys.size(0); ++l) {
      lv->views.push_back(keys.select(0, l));
      lv->views.push_back(values.select(0, l));
    }
    lv->keys = keys.data_ptr();
    lv->values = values.data_ptr();
    lv->sizes = keys.sizes().vec();
  }
  if (!positions_.defined() || positions_.device() != input_ids.device()) {
    positions_ = at::arange(meta_.context, input_ids.options().dtype(at::kLong));
  }
  // t <= max_length <= context (checked above, and by the backend before).
  const at::Tensor keep =
      all_positions ? positions_.narrow(0, 0, t) : positions_.narrow(0, t - 1, 1);
  std::vector<at::Tensor> inputs = {input_ids.contiguous(),
                                    positions.contiguous(),
                                    slots.contiguous(),
                                    token_valid.contiguous(),
                                    valid,
                                    keep};
  inputs.insert(inputs.end(), lv->views.begin(), lv->views.end());
  std::vector<at::Tensor> out;
  try {
    out = loader_->run(inputs, cuda_stream);
  } catch (const std::exception& e) {
    throw Error("backend '" + backend_ + "': the program of package '" + path_.string() +
                "' failed: " + first_line(e.what()));
  }
  at::Tensor logits = out.at(0);
  if (logits.dim() != 3 || logits.size(0) != rows || logits.size(1) != keep.size(0)) {
    throw Error("backend '" + backend_ + "': the program of package '" + path_.string() +
                "' returned logits of shape " + c10::str(logits.sizes()) + ", expected [" +
                std::to_string(rows) + ", " + std::to_string(keep.size(0)) + ", vocab]");
  }
  return all_positions ? logits : logits.select(1, 0);
}

std::map<std::string, double> AotiStep::report() const {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path_, ec);
  return {{"aoti_built", built_ ? 1.0 : 0.0},
          {"aoti_export_seconds", build_.export_seconds},
          {"aoti_compile_seconds", build_.compile_seconds},
          {"aoti_load_seconds", load_s_},
          {"aoti_package_bytes", ec ? 0.0 : double(bytes)},
          {"aoti_freezing", meta_.freezing ? 1.0 : 0.0}};
}

namespace {

// A package as a model step: one program for every row count and prompt length.
class AotiModelStep final : public ModelStep {
 public:
  AotiModelStep(const CausalLM& model, const AotiStepOptions& o, const std::string& backend)
      : step_(model, o, backend) {}
  std::string kind() const override { return "aoti"; }
  bool runs_own_attention() const override { return false; }
  at::Tensor prefill(const StepArgs& a) override { return run(a, false); }
  at::Tensor decode(const StepArgs& a) override { return run(a, false); }
  // The same program with every position's logits kept: one forward over the candidates.
  bool verifies() const override { return true; }
  at::Tensor verify(const StepArgs& a) override { return run(a, true); }
  BackendReport report() const override { return step_.report(); }

 private:
  at::Tensor run(const StepArgs& a, bool all_positions) {
    const StaticCache& c = *a.cache;
    return step_.run(a.input_ids, a.positions, a.slots, a.token_valid, c.validity(), c.keys(),
                     c.values(), all_positions, a.cuda_stream);
  }
  AotiStep step_;
};

}  // namespace

ModelStepInfo aoti_step_info() {
  ModelStepInfo info;
  info.name = "aoti";
  info.description =
      "the model's step compiled ahead of time by AOTInductor, one package for every shape; "
      "options package, cache_dir, freezing, max_rows (as the aoti backend's)";
  info.option_keys = {"package", "cache_dir", "freezing", "max_rows"};
  info.check_options = [](const BackendOptions& o) {
    AotiStepOptions a;
    read_aoti_options(o, a);
  };
  info.create = [](const CausalLM& model, const BackendOptions& o, int64_t) {
    AotiStepOptions a;
    read_aoti_options(o, a);
    return std::make_unique<AotiModelStep>(model, a, o.backend());
  };
  return info;
}

}  // namespace gengraph
