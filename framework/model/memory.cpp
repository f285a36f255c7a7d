#include "framework/model/memory.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <new>
#include <sstream>

#include "framework/model/model_registry.h"
#include "framework/util/device.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

constexpr double kPerTensorOverhead = 2048;

// Calibration of estimate_generation_memory against the peak resident memory of generations
// measured on CPU (the figures and where they were measured: docs/reliability.md and
// docs/results/measurements-from-comments.md). What glibc keeps of freed blocks counts as used:
// the peak is what the machine must have.
constexpr double kWorkingBytes = 32e6;  // first-call overhead: kernels, thread pools
// Activations per prompt token, in float32 elements per MLP width (on CPU reduced precisions
// compute their norms and activations in float32, so they use as many bytes): the fused form
// and transformers' op-by-op one (gelu_new term by term, about twice as many).
constexpr double kPrefillWidthsFused = 6, kPrefillWidthsUnfused = 14;
constexpr double kPrefillHiddenWidths = 8;
// A decode step's activations per row (one token), in the same units.
constexpr double kStepWidths = 3, kStepHiddenWidths = 6;
// Float32 copies of a step's [rows, vocab] scores beside the logits themselves: their float
// form, log_softmax or softmax, the processors' and the strategy's (beam search also ranks the
// scores: kBeamTopkBytes), fitted to peaks measured with the KV cache and activations included.
constexpr double kScoreCopies = 5, kBeamTopkBytes = 8;
// Beam search's int64 token histories of max_length per row: running beams, 2 x beams
// candidates and their padded form, the finished hypotheses and their merge (beam_search.cpp).
constexpr double kBeamHistories = 10;

}  // namespace

double weight_bytes(const Architecture& arch, const ModelConfig& config, c10::ScalarType dtype) {
  auto bytes_with = [&](int64_t layers) {
    ModelConfig c = config;
    c.num_layers = layers;
    if (!c.sliding_layers.empty()) c.sliding_layers.resize(static_cast<size_t>(layers), false);
    double total = 0;
    for (const auto& spec : arch.weight_specs(c)) {
      double n = 1;
      for (const int64_t d : spec.shape) n *= static_cast<double>(d);
      // The data, and what each tensor costs beside it (its TensorImpl, storage, name, map entry).
      total += n * static_cast<double>(c10::elementSize(dtype)) + kPerTensorOverhead;
    }
    return total;
  };
  const double one = bytes_with(1);
  if (config.num_layers <= 1) return one;
  return one + (bytes_with(2) - one) * static_cast<double>(config.num_layers - 1);
}

double kv_cache_bytes(const ModelConfig& c, c10::ScalarType dtype, double rows, double max_length,
                      int64_t ring_spare) {
  const double per_slot = 2.0 * rows * static_cast<double>(c.num_kv_heads) *
                          static_cast<double>(c.head_dim) *
                          static_cast<double>(c10::elementSize(dtype));
  double windowed = 0;
  if (ring_spare >= 0 && c.sliding_window > 0 &&
      static_cast<double>(c.sliding_window + ring_spare) < max_length) {
    windowed =
        static_cast<double>(std::count(c.sliding_layers.begin(), c.sliding_layers.end(), true));
  }
  const double ring = static_cast<double>(c.sliding_window + ring_spare);
  return per_slot * ((static_cast<double>(c.num_layers) - windowed) * max_length + windowed * ring);
}

double MemoryEstimate::total() const {
  return weights + kv_cache + std::max(prefill, decode + search) + working;
}

std::string MemoryEstimate::breakdown() const {
  std::ostringstream out;
  if (weights > 0) out << "weights " << human_bytes(weights) << ", ";
  out << "KV cache " << human_bytes(kv_cache) << ", prefill " << human_bytes(prefill)
      << " (masks and attention for " << prefill_rows << " x " << prefill_queries << " x "
      << prefill_keys << " positions), decode step " << human_bytes(decode) << ", search "
      << human_bytes(search) << ", working memory " << human_bytes(working);
  return out.str();
}

MemoryEstimate estimate_generation_memory(const ModelConfig& c, c10::ScalarType dtype,
                                          const GenerationShape& s, const Architecture* arch) {
  const double elem = static_cast<double>(c10::elementSize(dtype));
  const double act = std::max(elem, 4.0);  // activations computed in float32 at least
  const double d = static_cast<double>(c.hidden_size);
  const double ffn = static_cast<double>(std::max<int64_t>(c.intermediate_size, c.hidden_size));
  const double vocab = static_cast<double>(c.vocab_size);
  const double rows = s.inputs * s.rows_per_input;
  const double t = s.prompt_length, max_len = std::max(s.max_length, s.prompt_length);

  MemoryEstimate m;
  if (arch) m.weights = weight_bytes(*arch, c, dtype);
  m.kv_cache = kv_cache_bytes(c, dtype, rows, max_len, s.ring_spare);

  // The prefill: one forward over the prompt, once per input (shared) or per row.
  const double p = s.shared_prefill ? s.inputs : rows;
  const double keys = s.static_cache ? max_len : t;
  m.prefill_rows = p;
  m.prefill_queries = t;
  m.prefill_keys = keys;
  // Masks over [p, 1, t, keys] cells: the boolean mask and the one it is built from
  // (attention_mask()), and the additive one in the compute dtype (the fused forms make it once a
  // step, the unfused form's SDPA converts the boolean one in each layer), a second one for
  // sliding-window layers; and the causal and self masks, [t, keys]. SDPA's CPU kernel is the
  // fused (flash) one for every architecture here, so no [heads, t, keys] scores are held.
  const double windowed = c.sliding_window > 0 ? 1.0 : 0.0;
  m.prefill = p * t * keys * (2.0 + elem * (1.0 + windowed)) + 2.0 * t * keys;
  m.prefill +=
      p * t * act *
      ((c.fused ? kPrefillWidthsFused : kPrefillWidthsUnfused) * ffn + kPrefillHiddenWidths * d);
  m.prefill += p * vocab * (elem + 4.0);  // the last position's logits, and in float32

  // One decode step over every row: masks over max_len slots, activations, and the logits with
  // their float32 copies.
  m.decode = rows * max_len * (2.0 + elem * (1.0 + windowed)) +
             rows * act * (kStepWidths * ffn + kStepHiddenWidths * d) +
             rows * vocab * (elem + 4.0 * kScoreCopies);
  // A beam reorder gathers into a second buffer (a growing cache's new buffers, a static one's
  // swap) or a temporary (in place). A growing cache writes in place otherwise: it has the room
  // of max_len from the first write.
  if (s.beam_search) m.decode += m.kv_cache;

  // The strategy's state: token histories ([rows, max_len] int64, and their copies as they
  // grow); beam search's candidates and finished hypotheses, and its ranking of every row's scores.
  m.search = rows * max_len * 8.0 * 3.0;
  if (s.beam_search)
    m.search += rows * max_len * 8.0 * kBeamHistories + rows * vocab * kBeamTopkBytes;
  m.working = kWorkingBytes;
  return m;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (bytes >= 1000 && u < 6) {
    bytes /= 1000;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, bytes >= 100 || u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

namespace {

std::string available_text(const AvailableMemory& a, const c10::Device& device) {
  return human_bytes(static_cast<double>(a.bytes)) + " available on " + device.str();
}

// The advice, and when a limit (not the machine) decided what is available, that limit too:
// "...; or raise the process's address-space limit (ulimit -v 4000000)".
std::string advice_with(const std::string& advice, const AvailableMemory& a) {
  return a.bound.empty() ? advice : advice + "; or raise " + a.bound;
}

// The size LibTorch's CPU allocator says it was asked for ("... you tried to allocate N bytes"),
// or -1.
double bytes_asked(const std::string& message) {
  const std::string key = "tried to allocate ";
  const auto at = message.find(key);
  if (at == std::string::npos) return -1;
  const std::string rest = message.substr(at + key.size());
  size_t used = 0;
  try {
    const double n = std::stod(rest, &used);
    if (rest.compare(used, 6, " bytes") == 0) return n;
  } catch (const std::exception&) {
  }
  return -1;
}

}  // namespace

void check_memory(const std::string& what, double bytes, const c10::Device& device,
                  const std::string& advice) {
  const AvailableMemory available = available_memory(device);
  if (available.bytes <= 0 || bytes <= static_cast<double>(available.bytes)) return;
  throw Error(what + " needs about " + human_bytes(bytes) + ", more than the " +
              available_text(available, device) + "; " + advice_with(advice, available));
}

bool is_allocation_failure(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) || dynamic_cast<const c10::OutOfMemoryError*>(&e))
    return true;
  const auto* c = dynamic_cast<const c10::Error*>(&e);
  if (!c) return false;
  const std::string m = c->what_without_backtrace();
  return m.find("can't allocate") != std::string::npos ||
         m.find("out of memory") != std::string::npos ||
         m.find("Cannot allocate memory") != std::string::npos;
}

void rethrow_allocation_failure(const std::string& what, double estimate_bytes,
                                const c10::Device& device, const std::string& advice) {
  std::string message;
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    if (!is_allocation_failure(e)) throw;
    const auto* c = dynamic_cast<const c10::Error*>(&e);
    message = c ? c->what_without_backtrace() : e.what();
  }
  const double asked = bytes_asked(message);
  std::string out = what + " ran out of memory on " + device.str() + ": an allocation" +
                    (asked > 0 ? " of " + human_bytes(asked) : std::string()) + " failed";
  if (estimate_bytes > 0) out += "; gengraph estimated about " + human_bytes(estimate_bytes);
  const AvailableMemory available = available_memory(device);
  if (available.bytes > 0) out += "; " + available_text(available, device) + " now";
  throw Error(out + "; " + advice_with(advice, available));
}

}  // namespace gengraph
