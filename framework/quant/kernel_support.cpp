// Which instruction sets this CPU runs (and the switches tests and benchmarks turn them off
// with), int4's float16 scales widened to float32, and rows per task.
#include <ATen/Parallel.h>

#include <atomic>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "framework/quant/kernels.h"
#include "framework/quant/kernels_internal.h"

namespace gengraph::kernels::detail {

#ifdef GENGRAPH_X86_AVX2
GENGRAPH_AVX2_FN void halves_f16c(const at::Half* h, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(h[i].x);
}

// Whether this CPU has AMX-INT8 and Linux gave this process the tile data state (asked once).
bool amx_granted() {
  static const bool granted = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool tile = (edx >> 24) & 1u, int8 = (edx >> 25) & 1u;
    if (!tile || !int8 || !__builtin_cpu_supports("avx512bw")) return false;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // <asm/prctl.h>
    return ::syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
}
#endif  // GENGRAPH_X86_AVX2

void halves_to_floats(const at::Half* h, int64_t n, float* dst) {
#ifdef GENGRAPH_X86_AVX2
  if (cpu_has_avx2()) return halves_f16c(h, n, dst);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(h[i]);
}

std::atomic<bool> g_plain{false};
std::atomic<bool> g_no_vnni{false};
std::atomic<bool> g_no_amx{false};

bool cpu_has_avx2() {
#ifdef GENGRAPH_X86_AVX2
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return has && !g_plain.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

bool cpu_has_avx512_vnni() {
#ifdef GENGRAPH_X86_AVX2
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni");
  return has && !g_plain.load(std::memory_order_relaxed) &&
         !g_no_vnni.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

bool cpu_has_amx() {
#ifdef GENGRAPH_X86_AVX2
  return cpu_has_avx512_vnni() && !g_no_amx.load(std::memory_order_relaxed) && amx_granted();
#else
  return false;
#endif
}

int64_t grain_rows(int64_t N, int64_t K) {
  const int64_t rows_per_64k = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, K));
  return std::max<int64_t>(4, std::min(rows_per_64k, N / std::max(1, at::get_num_threads())));
}

}  // namespace gengraph::kernels::detail

namespace gengraph::kernels {

bool vectorized() { return detail::cpu_has_avx2(); }

void use_plain_loops(bool plain) { detail::g_plain.store(plain); }

namespace {
thread_local bool t_batch_invariant = false;
}  // namespace

BatchInvariant::BatchInvariant(bool on) : saved_(t_batch_invariant) { t_batch_invariant = on; }
BatchInvariant::~BatchInvariant() { t_batch_invariant = saved_; }
bool BatchInvariant::active() { return t_batch_invariant; }

void allow_vnni(bool allowed) { detail::g_no_vnni.store(!allowed); }
void allow_amx(bool allowed) { detail::g_no_amx.store(!allowed); }

bool integer_dot_vnni() { return detail::cpu_has_avx512_vnni(); }
bool integer_dot_amx() { return detail::cpu_has_amx(); }

void release_openmp_threads() {
#ifdef _OPENMP
  omp_pause_resource_all(omp_pause_soft);
#endif
}

}  // namespace gengraph::kernels
