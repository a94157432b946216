// Shared by the suites that run the kernels in both modes (scalar reference and AVX2).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "compute/kernel_mode.h"
#include "compute/q8_dot.h"

namespace hill::test {

// Restores the kernel mode a test started with.
struct mode_guard {
    kernel_mode saved = kernel_mode_get();
    ~mode_guard() { kernel_mode_set(saved); }
};

// The kernel modes a test runs its checks in: the scalar reference, and AVX2 where the CPU has it.
// The TSan build (test::tsan_build) runs one, the one the engine picks: the mode does not change the
// threads' interleavings.
inline std::vector<kernel_mode> kernel_modes_tested() {
#if defined(HILL_TSAN_BUILD)
    return {cpu_has_avx2() ? kernel_mode::avx2 : kernel_mode::scalar};
#else
    if (!cpu_has_avx2()) return {kernel_mode::scalar};
    return {kernel_mode::scalar, kernel_mode::avx2};
#endif
}

// Restores the int8 kernels' instruction set a test started with.
struct isa_guard {
    int8_isa saved = int8_isa_get();
    ~isa_guard() { int8_isa_set(saved); }
};

// The builds of the AVX2 int8 kernels this CPU can run (plain AVX2, AVX-VNNI, AVX-512), each with the
// name a failure gives.
inline std::vector<std::pair<int8_isa, std::string>> avx2_builds() {
    std::vector<std::pair<int8_isa, std::string>> builds;
    if (!cpu_has_avx2()) return builds;
    builds.emplace_back(int8_isa::avx2, " avx2");
    if (int8_isa_supported(int8_isa::avx_vnni)) builds.emplace_back(int8_isa::avx_vnni, " avx2 (avx-vnni)");
    if (int8_isa_supported(int8_isa::avx512_vnni)) builds.emplace_back(int8_isa::avx512_vnni, " avx2 (avx512-vnni)");
    return builds;
}

}  // namespace hill::test
