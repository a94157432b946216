// Score blocks (DESIGN.md §1, HillInfer paper §4.2 "Hierarchical Importance Evaluation"): what a scorer
// streams back to the host — the scores of n tokens as `<u32 token position, f16 score>` tuples, so
// that raw keys never cross the link to be ranked.
//
// Wire format (little-endian, packed, no padding):
//   header  8 bytes: u32 n_tokens, u16 layer, u8 n_group, u8 reserved (0)
//   tuples  n_tokens × (4 + 2·n_group) bytes: u32 position, then f16 score[n_group]
// n_group is 1 for one token set per layer (6 bytes per token) and n_head_kv for one set per KV head
// (select_granularity::kv_head). Scores are rounded with score_to_f16 (score/selector.h).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/fp16.h"

namespace hill::csd {

static_assert(std::endian::native == std::endian::little, "score blocks are little-endian, as the host is");

constexpr size_t score_block_header_bytes = 8;

// Most scores per tuple: n_group is a u8, and select_granularity::kv_head takes at most 64 KV heads.
constexpr int score_block_max_group = 64;

// Bytes of one tuple: u32 position + n_group f16 scores.
constexpr size_t score_tuple_bytes(int n_group) {
    return 4 + 2 * size_t(n_group);
}

// Bytes of a block of n tuples, header included.
constexpr size_t score_block_bytes(int64_t n, int n_group) {
    return score_block_header_bytes + size_t(n) * score_tuple_bytes(n_group);
}

// Writes a block into caller memory of score_block_bytes(capacity, n_group) bytes.
class score_block_writer {
public:
    score_block_writer() = default;
    score_block_writer(uint8_t * bytes, int layer, int n_group) : bytes_(bytes), layer_(layer), n_group_(n_group) {}
    void add(uint32_t position, const f16_bits * scores) {
        uint8_t * t = bytes_ + score_block_header_bytes + size_t(n_) * score_tuple_bytes(n_group_);
        std::memcpy(t, &position, 4);
        std::memcpy(t + 4, scores, 2 * size_t(n_group_));
        ++n_;
    }
    int64_t n_tokens() const { return n_; }
    // Writes the header; returns the block's size in bytes.
    size_t seal() {
        const auto n = uint32_t(n_);
        const auto layer = uint16_t(layer_);
        const auto g = uint8_t(n_group_);
        std::memcpy(bytes_, &n, 4);
        std::memcpy(bytes_ + 4, &layer, 2);
        bytes_[6] = g;
        bytes_[7] = 0;
        return score_block_bytes(n_, n_group_);
    }
    void clear() { n_ = 0; }

private:
    uint8_t * bytes_ = nullptr;
    int layer_ = 0;
    int n_group_ = 1;
    int64_t n_ = 0;
};

// Reads a sealed block.
class score_block_view {
public:
    explicit score_block_view(const uint8_t * bytes) : bytes_(bytes) {
        uint32_t n = 0;
        uint16_t layer = 0;
        std::memcpy(&n, bytes, 4);
        std::memcpy(&layer, bytes + 4, 2);
        n_ = n;
        layer_ = layer;
        n_group_ = bytes[6];
    }
    int64_t n_tokens() const { return n_; }
    int layer() const { return layer_; }
    int n_group() const { return n_group_; }
    size_t size_bytes() const { return score_block_bytes(n_, n_group_); }
    uint32_t position(int64_t j) const {
        uint32_t p = 0;
        std::memcpy(&p, tuple(j), 4);
        return p;
    }
    float score(int64_t j, int g) const {
        f16_bits h = 0;
        std::memcpy(&h, tuple(j) + 4 + 2 * size_t(g), 2);
        return fp16_to_fp32(h);
    }

private:
    const uint8_t * tuple(int64_t j) const {
        return bytes_ + score_block_header_bytes + size_t(j) * score_tuple_bytes(n_group_);
    }
    const uint8_t * bytes_;
    int64_t n_ = 0;
    int layer_ = 0;
    int n_group_ = 1;
};

}  // namespace hill::csd
