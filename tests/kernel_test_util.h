// Shared by the suites that run the kernels in both modes (scalar reference and AVX2).
#pragma once

#include "compute/kernel_mode.h"

namespace hill::test {

// Restores the kernel mode a test started with.
struct mode_guard {
    kernel_mode saved = kernel_mode_get();
    ~mode_guard() { kernel_mode_set(saved); }
};

}  // namespace hill::test
