// Hit table (DESIGN.md §1): one u16 counter per (layer, token) — how often attention selected the
// token, with decay — read by migration (promotion / demotion) in later work. 2 bytes per token
// and layer: 256 KiB per layer at 128K tokens.
#pragma once

#include <cstdint>
#include <vector>

namespace hill {

class hit_table {
public:
    hit_table(int32_t n_layer, int64_t n_ctx) : n_ctx_(n_ctx), counts_(size_t(n_layer) * size_t(n_ctx), 0) {}

    uint16_t get(int il, int64_t t) const { return counts_[index(il, t)]; }
    // Adds one hit, saturating at 65535.
    void hit(int il, int64_t t) {
        uint16_t & c = counts_[index(il, t)];
        if (c != UINT16_MAX) ++c;
    }
    // Sets a new token's counter (count 0 on append, DESIGN.md §3 step 1).
    void reset(int il, int64_t t) { counts_[index(il, t)] = 0; }
    // Halves every counter of layer il (the decay step).
    void decay(int il) {
        for (int64_t t = 0; t < n_ctx_; ++t) counts_[index(il, t)] >>= 1;
    }

private:
    size_t index(int il, int64_t t) const { return size_t(il) * size_t(n_ctx_) + size_t(t); }
    int64_t n_ctx_;
    std::vector<uint16_t> counts_;  // u16 [n_layer, n_ctx]
};

}  // namespace hill
