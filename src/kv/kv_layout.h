// How a sequence's KV cache is laid out in the tiers.
//
// Each layer's K and V are kept per token as rows of n_head_kv · head_dim elements (f16 by
// default; f32 for exactness tests): K and V rows of a token live in the same tier and slot, in
// separate arrays, so that scoring (later work) reads keys without values. Residency is per
// (layer, token): attention selects tokens per layer, so a token may be hot in one layer and cold
// in another.
//
// Cold pages: the cold pool stores rows in pages of `page_tokens` tokens of one layer — a K page
// and a V page per group of page_tokens cold slots. page_tokens is the smallest count whose rows
// fill a whole number of 4096-byte blocks, the O_DIRECT unit (and at least 1): reading one token
// costs one page, so smaller pages waste less bandwidth on gathers, while 4096-byte multiples keep
// every read aligned without bounce buffers.
#pragma once

#include "compute/ops.h"
#include "core/ggml_type.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>

namespace hill {

struct kv_layout {
    int32_t n_layer = 0;
    int64_t n_embd_kv = 0;               // n_head_kv * head_dim
    ggml_type type = ggml_type::f16;     // f16 or f32

    size_t row_bytes() const { return size_t(n_embd_kv) * ggml_block_bytes(type); }
    // Tokens per cold page (see the file comment).
    int64_t page_tokens() const {
        return int64_t(4096 / std::gcd(size_t(4096), row_bytes()));
    }
    size_t page_bytes() const { return size_t(page_tokens()) * row_bytes(); }
    // K and V of one token in one layer.
    size_t token_layer_bytes() const { return 2 * row_bytes(); }
    // dst (layout type [n]) = the f32 values src[n], as the cache stores them (f16: round to nearest even).
    void store_row(const float * src, int64_t n, void * dst) const {
        if (type == ggml_type::f32) {
            std::memcpy(dst, src, size_t(n) * 4);
        } else {
            fp32_to_fp16_row(src, static_cast<uint16_t *>(dst), n);
        }
    }
};

}  // namespace hill
