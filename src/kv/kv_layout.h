// How a sequence's KV cache is laid out in the tiers.
//
// Each layer's K and V are kept per token as rows of n_head_kv · head_dim elements (f16 by
// default; f32 for exactness tests): K and V rows of a token live in the same tier and slot, in
// separate arrays in RAM, so that scoring reads keys without values. Residency is per
// (layer, token): attention selects tokens per layer, so a token may be hot in one layer and cold
// in another.
//
// Cold pages: the cold pool stores a layer's rows in groups of `page_tokens` consecutive positions,
// in one of two record layouts (cold_records):
//   split  a K page and a V page per group, each [page_tokens, n_embd_kv]: a pass that scores the cold
//          keys where they live (the storage device emulator; the host when there is no scoring copy)
//          reads the K pages alone;
//   token  one page per group, [page_tokens] records of (K row, V row): where nothing scans the cold
//          keys (the host scores from the scoring copy in DRAM, score/quant_copy.h), a gathered token
//          costs one aligned read of its K and V together instead of a K page and a V page — for a
//          row pair of 4 KiB (8 KV heads of 128, f16), one 4 KiB read per token instead of two, and
//          half the bytes (issue 13 item 3).
// page_tokens is the smallest count whose page fills a whole number of 4096-byte blocks, the O_DIRECT
// unit (and at least 1): reading one token costs one page (split: two), so smaller pages waste less
// bandwidth on gathers, while 4096-byte multiples keep every read aligned without bounce buffers.
// Small rows share a page with their neighbours in position order, which tokens selected together
// (runs of a passage) tend to be.
#pragma once

#include "compute/ops.h"
#include "core/ggml_type.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>

namespace hill {

enum class cold_records : uint8_t { split, token };

struct kv_layout {
    int32_t n_layer = 0;
    int64_t n_embd_kv = 0;               // n_head_kv * head_dim
    ggml_type type = ggml_type::f16;     // f16 or f32
    cold_records cold = cold_records::split;

    size_t row_bytes() const { return size_t(n_embd_kv) * ggml_block_bytes(type); }
    // Bytes of one token's part of a cold page: a row (split) or a row pair (token).
    size_t record_bytes() const { return cold == cold_records::token ? 2 * row_bytes() : row_bytes(); }
    // Tokens per cold group, and so per page (see the file comment).
    int64_t page_tokens() const {
        return int64_t(4096 / std::gcd(size_t(4096), record_bytes()));
    }
    size_t page_bytes() const { return size_t(page_tokens()) * record_bytes(); }
    // Cold pages per group: a K page and a V page (split), or one (token).
    int pages_per_group() const { return cold == cold_records::token ? 1 : 2; }
    // Token records: page (layout [n, (K row, V row)]) from, or into, n K rows and n V rows
    // (layout type [n, n_embd_kv] each; v may be null when only keys are wanted).
    void pack_records(const uint8_t * k, const uint8_t * v, int64_t n, uint8_t * page) const {
        const size_t rb = row_bytes();
        for (int64_t t = 0; t < n; ++t) {
            std::memcpy(page + size_t(t) * 2 * rb, k + size_t(t) * rb, rb);
            std::memcpy(page + size_t(t) * 2 * rb + rb, v + size_t(t) * rb, rb);
        }
    }
    void unpack_records(const uint8_t * page, int64_t n, uint8_t * k, uint8_t * v) const {
        const size_t rb = row_bytes();
        for (int64_t t = 0; t < n; ++t) {
            std::memcpy(k + size_t(t) * rb, page + size_t(t) * 2 * rb, rb);
            if (v != nullptr) std::memcpy(v + size_t(t) * rb, page + size_t(t) * 2 * rb + rb, rb);
        }
    }
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
