// Which instruction-set path the CPU kernels take: our own AVX-512 kernels,
// our own AVX2/FMA kernels, or the portable path (OpenBLAS for GEMM, plain
// loops elsewhere). By default the best this CPU runs; STRATA_CPU_ISA=avx512,
// avx2 or portable forces one (to measure or test a path on any machine),
// and is refused, naming the variable and what the CPU lacks, where the CPU
// cannot run it.
#pragma once

namespace strata {

enum class CpuIsa { kPortable, kAvx2, kAvx512 };

// The path in use: STRATA_CPU_ISA when set, else the best the CPU runs. The
// variable is read once; ConfigError for an unknown value or a path this CPU
// (or this build) cannot run.
CpuIsa cpu_isa();
const char* cpu_isa_name(CpuIsa isa);  // "avx512", "avx2", "portable"
// What STRATA_CPU_ISA=value asks for (null or empty: the best path here),
// with cpu_isa()'s checks.
CpuIsa parse_cpu_isa(const char* value);
// Whether this build has the path's kernels and this CPU can run them.
bool cpu_isa_supported(CpuIsa isa);

// For tests: takes the path (it must be supported) until reset_cpu_isa_for_testing().
// Set it while no CPU kernel runs.
void force_cpu_isa_for_testing(CpuIsa isa);
void reset_cpu_isa_for_testing();

}  // namespace strata
