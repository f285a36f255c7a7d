#include "backends/aoti/aoti_step.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/file.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/headeronly/version.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>

#include "backends/trace/traced_step.h"
#include "framework/backend/options.h"
#include "framework/model/causal_lm.h"
#include "framework/util/clock.h"
#include "framework/util/device.h"
#include "framework/util/error.h"

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

// An exclusive advisory lock on `path` (created if missing), released on destruction, so that
// two processes needing the same package build it once.
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& path)
      : fd_(::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644)) {
    if (fd_ < 0) throw Error("cannot create the lock file '" + path.string() + "'");
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) throw Error("cannot lock '" + path.string() + "'");
    }
  }
  ~FileLock() { ::close(fd_); }  // closing releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

std::string device_kind(const c10::Device& d) { return d.is_cuda() ? "cuda" : d.str(); }

std::filesystem::path sidecar(const std::filesystem::path& package) {
  return package.string() + ".build.json";
}

}  // namespace

std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

void set_aoti_package_builder(AotiPackageBuilder builder, std::string identity) {
  std::lock_guard<std::mutex> lock(g_builder_mutex);
  builder_slot() = {std::move(builder), std::move(identity)};
}

bool has_aoti_package_builder() {
  std::lock_guard<std::mutex> lock(g_builder_mutex);
  return static_cast<bool>(builder_slot().build);
}

AotiMeta AotiMeta::read(const std::filesystem::path& path) {
  if (!std::filesystem::is_regular_file(path)) {
    throw Error("AOTInductor package '" + path.string() + "' " +
                (std::filesystem::exists(path) ? "is not a file" : "does not exist"));
  }
  std::unordered_map<std::string, std::string> raw;
  try {
    raw =
        torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path.string(), "model");
  } catch (const std::exception& e) {
    throw Error("'" + path.string() + "' is not a readable AOTInductor package (" +
                first_line(e.what()) + ")");
  }
  auto text = [&](const std::string& key) -> std::string {
    auto it = raw.find("gengraph." + key);
    if (it == raw.end()) {
      throw Error("AOTInductor package '" + path.string() + "' has no metadata 'gengraph." + key +
                  "': it was not made by tools/export_aoti.py");
    }
    return it->second;
  };
  auto number = [&](const std::string& key) -> int64_t {
    const std::string v = text(key);
    try {
      size_t used = 0;
      const int64_t n = std::stoll(v, &used);
      if (used == v.size()) return n;
    } catch (const std::exception&) {
    }
    throw Error("AOTInductor package '" + path.string() + "': metadata 'gengraph." + key +
                "' should be an integer, found '" + v + "'");
  };
  AotiMeta m;
  m.format = static_cast<int>(number("format"));
  m.model_type = text("model_type");
  m.model_fingerprint = text("model_fingerprint");
  m.layers = number("layers");
  m.kv_heads = number("kv_heads");
  m.head_dim = number("head_dim");
  m.vocab_size = number("vocab_size");
  m.dtype = text("dtype");
  m.device = text("device");
  m.max_rows = number("max_rows");
  m.context = number("context");
  m.freezing = text("freezing") == "True";
  m.torch_version = text("torch_version");
  m.made_by = text("made_by");
  return m;
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
  const AotiMeta want = expected_aoti_meta(model, o.freezing);
  if (!o.package.empty()) {
    path_ = o.package;
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
             (builder.identity.empty() ? "" : "-b" + builder.identity) + ".pt2");
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      throw Error("backend '" + backend + "': cannot create the package cache folder '" +
                  dir.string() + "': " + ec.message());
    }
    FileLock lock(path_.string() + ".lock");
    if (!std::filesystem::exists(path_)) {
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
      build_ = builder.build(model, request, path_);
      built_ = true;
      if (!std::filesystem::is_regular_file(path_)) {
        throw Error("backend '" + backend + "': the package builder wrote no package at '" +
                    path_.string() + "'");
      }
      write_file_atomically(sidecar(path_),
                            nlohmann::json{{"export_seconds", build_.export_seconds},
                                           {"compile_seconds", build_.compile_seconds}}
                                .dump(),
                            "the package's build record");
    } else if (std::filesystem::is_regular_file(sidecar(path_))) {
      // The recorded build times of a cached package; a damaged record only loses the figures.
      try {
        const auto j = nlohmann::json::parse(
            read_regular_file(sidecar(path_), "build record", "a JSON file", 1 << 16));
        build_.export_seconds = j.at("export_seconds").template get<double>();
        build_.compile_seconds = j.at("compile_seconds").template get<double>();
      } catch (const std::exception&) {
        build_ = {};
      }
    }
  }

  meta_ = AotiMeta::read(path_);
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

  const auto t0 = Clock::now();
  const c10::Device d = model.device();
  try {
    loader_ = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        path_.string(), "model", false, 1, d.is_cuda() ? (d.has_index() ? d.index() : 0) : -1);
  } catch (const std::exception& e) {
    throw Error("backend '" + backend + "': package '" + path_.string() +
                "' could not be loaded: " + first_line(e.what()));
  }
  load_s_ = since(t0);
}

AotiStep::~AotiStep() = default;

at::Tensor AotiStep::run(const at::Tensor& input_ids, const at::Tensor& positions,
                         const at::Tensor& slots, const at::Tensor& token_valid,
                         const at::Tensor& valid, const at::Tensor& keys, const at::Tensor& values,
                         void* cuda_stream) {
  const int64_t rows = input_ids.size(0), max_length = valid.size(1);
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
  std::vector<at::Tensor> inputs = {input_ids.contiguous(), positions.contiguous(),
                                    slots.contiguous(), token_valid.contiguous(), valid};
  inputs.insert(inputs.end(), lv->views.begin(), lv->views.end());
  std::vector<at::Tensor> out;
  try {
    out = loader_->run(inputs, cuda_stream);
  } catch (const std::exception& e) {
    throw Error("backend '" + backend_ + "': the program of package '" + path_.string() +
                "' failed: " + first_line(e.what()));
  }
  return out.at(0);
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

}  // namespace gengraph
