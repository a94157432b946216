// IEEE 754 binary16 and bfloat16 conversions (scalar; SIMD paths live in src/compute).
// Rounding: round to nearest, ties to even, for both; NaN stays NaN, overflow becomes infinity.
#pragma once

#include <cstdint>
#include <cstring>

namespace hill {

using f16_bits = uint16_t;   // IEEE binary16 bit pattern
using bf16_bits = uint16_t;  // bfloat16 bit pattern (upper half of a binary32)

inline float bits_to_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t f32_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float fp16_to_fp32(f16_bits h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (mant << 13));  // inf / nan
    if (exp != 0) return bits_to_f32(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0) return bits_to_f32(sign);
    // subnormal: value = mant * 2^-24
    float v = float(mant) * 5.9604644775390625e-08f;
    return (sign != 0) ? -v : v;
}

inline f16_bits fp32_to_fp16(float f) {
    const uint32_t u = f32_to_bits(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return f16_bits(sign | 0x7e00u);            // nan
    if (abs >= 0x477ff000u) return f16_bits(sign | 0x7c00u);           // rounds to >= 65520: inf
    if (abs < 0x38800000u) {                                           // below 2^-14: subnormal or 0
        // value / 2^-24 rounded to nearest even, computed exactly in float
        const float v = bits_to_f32(abs) * 16777216.0f;                // * 2^24, exact
        const uint32_t m = uint32_t(v);
        const float rem = v - float(m);
        uint32_t r = m + ((rem > 0.5f || (rem == 0.5f && (m & 1u))) ? 1u : 0u);
        return f16_bits(sign | r);                                     // r == 0x400 is the smallest normal
    }
    const uint32_t exp = (abs >> 23) - 112u;
    const uint32_t mant = abs & 0x7fffffu;
    uint32_t h = (exp << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h += 1;       // carry into exp is correct
    return f16_bits(sign | h);
}

inline float bf16_to_fp32(bf16_bits h) { return bits_to_f32(uint32_t(h) << 16); }

inline bf16_bits fp32_to_bf16(float f) {
    uint32_t u = f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_bits((u >> 16) | 0x40u);  // quiet nan
    u += 0x7fffu + ((u >> 16) & 1u);
    return bf16_bits(u >> 16);
}

}  // namespace hill
