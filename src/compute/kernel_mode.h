// Which kernel implementation runs: the AVX2/FMA/F16C path when this CPU has it (chosen once at
// run time), or the scalar reference. Tests switch to `scalar` to compare both on one input.
#pragma once

namespace hill {

enum class kernel_mode { scalar, avx2 };

bool cpu_has_avx2();                 // AVX2 + FMA + F16C, detected at run time
kernel_mode kernel_mode_get();       // default: avx2 if cpu_has_avx2(), else scalar
void kernel_mode_set(kernel_mode m); // asserts avx2 is only chosen when supported

}  // namespace hill
