// Tensor element types as GGUF numbers them (ggml_type), with their block layouts.
//
// Block layouts (GGUF spec, "Quantization types"):
//   Q8_0: 32 weights per block: f16 scale d, int8 q[32];            w = d * q
//   Q4_0: 32 weights per block: f16 scale d, u8 qs[16] (two nibbles);
//         weight j (j < 16) is the low nibble of qs[j], weight j+16 its high nibble; w = d * (nib - 8)
#pragma once

#include "core/fp16.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace hill {

enum class ggml_type : uint32_t {
    f32 = 0,
    f16 = 1,
    q4_0 = 2,
    q8_0 = 8,
    bf16 = 30,
};

constexpr int64_t qk8_0 = 32;
constexpr int64_t qk4_0 = 32;

struct block_q8_0 {
    f16_bits d;      // scale
    int8_t qs[qk8_0];
};
static_assert(sizeof(block_q8_0) == 34);

struct block_q4_0 {
    f16_bits d;      // scale
    uint8_t qs[qk4_0 / 2];
};
static_assert(sizeof(block_q4_0) == 18);

// The types HillInfer reads and writes; anything else is "unsupported" (not "unknown").
std::optional<ggml_type> ggml_type_from_u32(uint32_t v);
std::string_view ggml_type_name(ggml_type t);
std::optional<ggml_type> ggml_type_from_name(std::string_view name);  // "f32", "q8_0", ... (case-insensitive)

// Weights per block (1 for float types) and bytes per block.
int64_t ggml_block_size(ggml_type t);
size_t ggml_block_bytes(ggml_type t);

// Bytes of a row of n elements; nullopt when n is negative, not a multiple of the block size, or
// the byte count overflows size_t.
std::optional<size_t> ggml_row_bytes(ggml_type t, int64_t n);

}  // namespace hill
