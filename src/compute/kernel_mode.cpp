#include "compute/kernel_mode.h"

#include "core/error.h"

#include <cpuid.h>

#include <atomic>

namespace hill {

namespace {

bool detect_avx2() {
    // The compiler's detection also checks (via XGETBV) that the OS saves the YMM state. F16C from CPUID
    // leaf 1 (ECX bit 29): clang < 16, the fuzz preset's compiler, has no "f16c" for __builtin_cpu_supports.
    __builtin_cpu_init();
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

// AVX-VNNI from CPUID leaf 7, sub-leaf 1 (EAX bit 4; Intel SDM vol. 2A, CPUID): clang < 16, the fuzz
// preset's compiler, has no "avxvnni" for __builtin_cpu_supports. The YMM state it needs is AVX2's.
bool detect_avx_vnni() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return cpu_has_avx2() && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 4)) != 0;
}

// AVX-512 F, BW, VL and VNNI; the compiler's detection also checks that the OS saves the ZMM state.
bool detect_avx512_vnni() {
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

// Relaxed: the mode is chosen before kernels run (or between them, in tests); each kernel call reads
// it once and uses one implementation throughout.
std::atomic<kernel_mode> & mode_ref() {
    static std::atomic<kernel_mode> mode{cpu_has_avx2() ? kernel_mode::avx2 : kernel_mode::scalar};
    return mode;
}

std::atomic<matmul_mode> & matmul_mode_ref() {
    static std::atomic<matmul_mode> mode{matmul_mode::int8};
    return mode;
}

}  // namespace

bool cpu_has_avx2() {
    static const bool has = detect_avx2();
    return has;
}

bool cpu_has_avx_vnni() {
    static const bool has = detect_avx_vnni();
    return has;
}

bool cpu_has_avx512_vnni() {
    static const bool has = detect_avx512_vnni();
    return has;
}

kernel_mode kernel_mode_get() {
    return mode_ref().load(std::memory_order_relaxed);
}

void kernel_mode_set(kernel_mode m) {
    HILL_ASSERT(m == kernel_mode::scalar || cpu_has_avx2());
    mode_ref().store(m, std::memory_order_relaxed);
}

matmul_mode matmul_mode_get() {
    return matmul_mode_ref().load(std::memory_order_relaxed);
}

void matmul_mode_set(matmul_mode m) {
    matmul_mode_ref().store(m, std::memory_order_relaxed);
}

}  // namespace hill
