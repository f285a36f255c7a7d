// The generator sampling draws from. By default LibTorch's default generator of the device, which
// Engine::manual_seed seeds (so one generation's draws follow the seed). A scheduled request draws
// from its own instead, seeded with its own seed (docs/serving.md): a SamplingGeneratorScope puts
// it in place on the scheduler's thread while that request's tokens are chosen, so its draws are
// those it makes alone after manual_seed(seed), whatever other requests draw in between.
#pragma once

#include <ATen/core/Generator.h>

#include <optional>
#include <utility>

namespace gengraph {

inline std::optional<at::Generator>& sampling_generator_slot() {
  static thread_local std::optional<at::Generator> generator;
  return generator;
}

// The generator to pass to a draw (nullopt: the device's default).
inline std::optional<at::Generator> sampling_generator() { return sampling_generator_slot(); }

class SamplingGeneratorScope {
 public:
  explicit SamplingGeneratorScope(at::Generator generator)
      : saved_(std::exchange(sampling_generator_slot(), std::move(generator))) {}
  ~SamplingGeneratorScope() { sampling_generator_slot() = std::move(saved_); }
  SamplingGeneratorScope(const SamplingGeneratorScope&) = delete;
  SamplingGeneratorScope& operator=(const SamplingGeneratorScope&) = delete;

 private:
  std::optional<at::Generator> saved_;
};

}  // namespace gengraph
