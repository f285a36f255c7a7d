#include "framework/model/weights.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/accumulate.h>

#include <cstdio>
#include <set>

#include "framework/model/safetensors.h"
#include "framework/util/device.h"
#include "framework/util/error.h"
#include "framework/util/strings.h"

namespace gengraph {
namespace {

// The first `most` names and how many more: a config with a million layers names 20 missing
// tensors, not a million.
std::string join_at_most(const std::vector<std::string>& names, size_t most) {
  if (names.size() <= most) return join(names, ", ");
  std::vector<std::string> head(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(most));
  return join(head, ", ") + " and " + std::to_string(names.size() - most) + " more";
}

}  // namespace
std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

namespace {

// Draws normal(0, std) for `shape` in `dtype`. ATen's CPU normal_ is vectorised for float32 only;
// drawing bfloat16/float16 directly is several times slower (minutes for a large preset), so
// reduced precisions are drawn in float32 into `scratch` (reused, so large draws do not fault in
// fresh pages every time) and rounded. float32 and float64 draws are unchanged.
at::Tensor draw_normal(const std::vector<int64_t>& shape, double std, at::ScalarType dtype,
                       at::Generator& gen, at::Tensor& scratch) {
  if (dtype != at::kBFloat16 && dtype != at::kHalf) {
    return at::empty(shape, at::TensorOptions().dtype(dtype)).normal_(0.0, std, gen);
  }
  const int64_t n = c10::multiply_integers(shape);
  if (!scratch.defined() || scratch.numel() < n) scratch = at::empty({n}, at::kFloat);
  return scratch.narrow(0, 0, n).view(shape).normal_(0.0, std, gen).to(dtype);
}

// Whether every value of a floating tensor is finite: one reduction to the minimum and maximum,
// which NaN and infinities reach (ATen's min/max propagate NaN), without a boolean copy.
bool all_finite(const at::Tensor& t) {
  if (t.numel() == 0) return true;
  const auto [lo, hi] = at::aminmax(t);
  const at::Tensor both = at::stack({lo.to(at::kDouble), hi.to(at::kDouble)});
  return at::isfinite(both).all().item<bool>();
}

// Refuses `loaded` (tensor `key` of `file`, converted from `stored`) when it holds a value that is
// not finite: NaN or infinite in the file, or too large for the dtype it was converted to.
void check_finite(const at::Tensor& loaded, const at::Tensor& stored, const std::string& key,
                  const std::filesystem::path& file) {
  if (all_finite(loaded)) return;
  const std::string where = "'" + file.string() + "': tensor '" + key + "'";
  const std::string skip = "; set model.check_weights: false to load it anyway";
  if (!all_finite(stored)) {
    const int64_t nan = at::isnan(stored).sum().item<int64_t>();
    const int64_t inf = at::isinf(stored).sum().item<int64_t>();
    throw Error(where + " holds " + std::to_string(nan) + " NaN and " + std::to_string(inf) +
                " Inf values (of " + std::to_string(stored.numel()) +
                "): the checkpoint is damaged or was saved from a diverged run, and would generate "
                "garbage (NaN scores)" +
                skip);
  }
  const int64_t inf = at::isinf(loaded).sum().item<int64_t>();
  char largest[32];
  std::snprintf(largest, sizeof largest, "%g", stored.abs().max().item<double>());
  throw Error(where + " holds values up to " + largest + " that " +
              dtype_name(loaded.scalar_type()) + " cannot hold: " + std::to_string(inf) +
              " become infinite; load it in a wider dtype (model.dtype: bfloat16 or float32)" +
              skip);
}

}  // namespace

WeightMap load_weights(const Checkpoint& ckpt, const std::vector<TensorSpec>& specs,
                       const NameRules& rules, const LoadOptions& options) {
  std::map<std::string, std::string> by_canonical;  // canonical -> checkpoint key
  std::vector<std::string> unexpected;
  std::set<std::string> wanted;
  for (const auto& s : specs) wanted.insert(s.name);
  for (const auto& key : ckpt.names()) {
    const std::string canon = rules.canonical ? rules.canonical(key) : key;
    if (wanted.count(canon)) {
      by_canonical[canon] = key;
    } else if (!(rules.ignorable && rules.ignorable(canon))) {
      unexpected.push_back(key);
    }
  }
  if (!unexpected.empty()) {
    throw Error(ckpt.description() +
                ": unexpected tensor(s) for this architecture: " + join_at_most(unexpected, 20));
  }
  std::vector<std::string> missing;
  for (const auto& s : specs) {
    if (!by_canonical.count(s.name)) missing.push_back(s.name);
  }
  if (!missing.empty()) {
    throw Error(ckpt.description() + ": missing tensor(s): " + join_at_most(missing, 20));
  }
  WeightMap out;
  for (const auto& s : specs) {
    const std::string& key = by_canonical.at(s.name);
    const TensorEntry& e = ckpt.entry(key);
    if (at::IntArrayRef(e.shape) != at::IntArrayRef(s.shape)) {
      throw Error("'" + ckpt.file_of(key).string() + "': tensor '" + key + "' has shape " +
                  shape_str(e.shape) + " but the config expects " + shape_str(s.shape));
    }
    const auto dt = safetensors_dtype(e.dtype, "tensor '" + key + "'");
    if (!at::isFloatingType(dt) || at::isFloat8Type(dt)) {
      // FP8 checkpoints store per-block scales beside their weights; a plain cast without them
      // would load a different model, silently.
      throw Error(
          "'" + ckpt.file_of(key).string() + "': tensor '" + key + "' has dtype " + e.dtype +
          ", expected F32, F16, BF16 or F64" +
          (at::isFloat8Type(dt)
               ? " (FP8-quantized checkpoints need their scales, which gengraph does not apply)"
               : ""));
    }
    at::Tensor view = ckpt.view(key);
    // Same dtype on CPU keeps the zero-copy view of the mapped file; otherwise one converted copy.
    at::Tensor loaded = view.to(options.device, options.dtype);
    if (options.check_weights) check_finite(loaded, view, key, ckpt.file_of(key));
    out[s.name] = std::move(loaded);
  }
  return out;
}

WeightMap random_weights(const std::vector<TensorSpec>& specs, double std, uint64_t seed,
                         const LoadOptions& options) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  WeightMap out;
  const auto cpu = at::TensorOptions().dtype(options.dtype);
  at::Tensor scratch;  // float32 draws for reduced precisions, grown to the largest tensor
  for (const auto& s : specs) {
    at::Tensor t;
    switch (s.init) {
      case Init::kNormal:
        t = draw_normal(s.shape, std, options.dtype, gen, scratch);
        if (options.check_weights && !all_finite(t)) {
          char deviation[32];
          std::snprintf(deviation, sizeof deviation, "%g", std);
          throw Error("random weights: tensor '" + s.name + "' drawn from normal(0, " + deviation +
                      ") holds values " + dtype_name(options.dtype) +
                      " cannot hold (infinite); lower model.config.initializer_range");
        }
        break;
      case Init::kZeros:
        t = at::zeros(s.shape, cpu);
        break;
      case Init::kOnes:
        t = at::ones(s.shape, cpu);
        break;
    }
    out[s.name] = t.to(options.device);
  }
  return out;
}

}  // namespace gengraph
