// DRAM read bandwidth: the yardstick the benchmark programs set their streams beside.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "compute/kernel_mode.h"
#include "core/sys_info.h"
#include "core/thread_pool.h"

namespace hill::bench {

// Sums n 64-bit words with AVX2 loads and four independent accumulators: the fastest plain read
// of memory this machine does, so it is the yardstick the benchmarks measure their streams against.
__attribute__((target("avx2"))) inline uint64_t read_sum_avx2(const uint64_t * p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 12)));
    }
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i *>(lanes),
                       _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    uint64_t s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    for (; i < n; ++i) s += p[i];
    return s;
}

// Read bandwidth over n 64-bit words at p (32-byte aligned): every pool thread sums its share; the
// best of `reps` runs, in GB/s.
inline double read_gbps(thread_pool & pool, const uint64_t * p, size_t n, int reps) {
    std::vector<uint64_t> sink(size_t(pool.n_threads()));
    double best = 0.0;
    for (int r = 0; r < reps; ++r) {
        const int64_t t0 = time_us();
        pool.run([&](int ith, int nth) {
            const size_t i0 = n * size_t(ith) / size_t(nth) / 4 * 4,
                         i1 = ith + 1 == nth ? n : n * size_t(ith + 1) / size_t(nth) / 4 * 4;
            sink[size_t(ith)] =
                cpu_has_avx2() ? read_sum_avx2(p + i0, i1 - i0) : std::accumulate(p + i0, p + i1, uint64_t(0));
        });
        best = std::max(best, double(n * 8) / (double(time_us() - t0) * 1e3));
    }
    return best;
}

// DRAM read bandwidth over a fresh buffer of `bytes` (1 GiB: far beyond the caches).
inline double dram_read_gbps(thread_pool & pool, size_t bytes, int reps) {
    const size_t n = bytes / sizeof(uint64_t);
    auto * buf = static_cast<uint64_t *>(std::aligned_alloc(64, n * sizeof(uint64_t)));
    pool.parallel_for(int64_t(n), [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) buf[i] = uint64_t(i);
    });
    const double gbps = read_gbps(pool, buf, n, reps);
    std::free(buf);
    return gbps;
}

}  // namespace hill::bench
