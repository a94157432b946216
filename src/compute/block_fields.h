// Fields of the quantized weight blocks (layouts: core/ggml_type.h, from the GGUF spec), read the same
// way by every kernel that decodes them: the f32 products (matmul.cpp, kernels_avx2.cpp) and the integer
// dot products (q8_dot.cpp).
#pragma once

#include <cstdint>
#include <cstring>

namespace hill {

// A little-endian u16 at any alignment (an f16 scale).
inline uint16_t load_u16(const uint8_t * p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

// Q4_K/Q5_K: the 6-bit scale and min of sub-block u (0..7) from the 12 packed bytes s.
inline void scale_min_k4(const uint8_t * s, int u, int & sc, int & mn) {
    if (u < 4) {
        sc = s[u] & 63;
        mn = s[u + 4] & 63;
    } else {
        sc = (s[u + 4] & 15) | (s[u - 4] >> 6) << 4;
        mn = (s[u + 4] >> 4) | (s[u] >> 6) << 4;
    }
}

}  // namespace hill
