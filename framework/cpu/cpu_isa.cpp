#include "framework/cpu/cpu_isa.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "framework/error.h"
#include "framework/cpu/gemm_avx2.h"
#include "framework/cpu/gemm_avx512.h"

namespace strata {

namespace {

constexpr int kUnset = -1;
std::atomic<int> g_forced{kUnset};

CpuIsa best_supported() {
  if (cpu_isa_supported(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
  if (cpu_isa_supported(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
  return CpuIsa::kPortable;
}

}  // namespace

CpuIsa parse_cpu_isa(const char* value) {
  if (!value || !*value) return best_supported();
  const std::string s = value;
  CpuIsa isa;
  if (s == "avx512") {
    isa = CpuIsa::kAvx512;
  } else if (s == "avx2") {
    isa = CpuIsa::kAvx2;
  } else if (s == "portable") {
    isa = CpuIsa::kPortable;
  } else {
    fail<ConfigError>("STRATA_CPU_ISA='", s, "' is not a CPU path: use avx512, avx2 or portable (or leave it unset "
                      "for the best this CPU runs, ", cpu_isa_name(best_supported()), " here)");
  }
  if (!cpu_isa_supported(isa)) {
    fail<ConfigError>("STRATA_CPU_ISA=", s, ": this CPU (or this build) cannot run the ", s,
                      " kernels (", s == "avx512" ? "it needs AVX-512 F, DQ, BW and VL" : "it needs AVX2 and FMA",
                      "); the best path here is ", cpu_isa_name(best_supported()), ", and portable runs anywhere");
  }
  return isa;
}

bool cpu_isa_supported(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512: return gemm_internal::cpu_has_avx512();
    case CpuIsa::kAvx2: return gemm_internal::cpu_has_avx2();
    case CpuIsa::kPortable: return true;
  }
  return false;
}

CpuIsa cpu_isa() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  if (forced != kUnset) return static_cast<CpuIsa>(forced);
  static const CpuIsa chosen = parse_cpu_isa(std::getenv("STRATA_CPU_ISA"));  // a ConfigError: again next call
  return chosen;
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kPortable: return "portable";
  }
  return "?";
}

void force_cpu_isa_for_testing(CpuIsa isa) {
  STRATA_CHECK(cpu_isa_supported(isa), "force_cpu_isa_for_testing: this CPU cannot run ", cpu_isa_name(isa));
  g_forced.store(static_cast<int>(isa), std::memory_order_relaxed);
}

void reset_cpu_isa_for_testing() { g_forced.store(kUnset, std::memory_order_relaxed); }

}  // namespace strata
