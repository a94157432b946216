// Shared by the suites that run the kernels in both modes (scalar reference and AVX2).
#pragma once

#include <vector>

#include "compute/kernel_mode.h"

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

}  // namespace hill::test
