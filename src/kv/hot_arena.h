// The hot pool's storage (DESIGN.md §1 "hot pool"): K and V rows of `n_slots` slots per layer in host
// DRAM, shared by every sequence of the cache, plus `n_stage` staging rows where a step copies the rows
// it reads from the cold tier. Which token a slot holds is the KV cells' business (kv/kv_cells.h: hot
// slot per token, free lists); the arena is bytes only.
//
// Layout: one K array and one V array of [Σ_il n_slots(il) + n_stage, n_embd_kv] rows — layer il's
// slots at rows [first(il), first(il) + n_slots(il)), first(il) = Σ_{j<il} n_slots(j), the staging after
// every layer's slots — so that
// a layer's hot rows and the staging rows are rows of one kv_view (view(il), row r = slot r, row
// stage_row(il, j) = staging row j): attention reads a window of selected tokens, hot in place and
// cold copied, in one call, in position order (kv/ordered_gather.h).
#pragma once

#include "compute/attention.h"
#include "kv/kv_layout.h"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace hill {

class hot_arena {
public:
    // n_slots: [n_layer] slots of each layer (a sliding-window layer may need fewer, kv/kv_cells.h). The
    // memory is not zero-filled (pages are touched as slots fill). Asserted: every row index fits int32.
    hot_arena(const kv_layout & layout, std::span<const int64_t> n_slots, int64_t n_stage);

    int64_t n_slots(int il) const { return first_[size_t(il) + 1] - first_[size_t(il)]; }
    int64_t n_stage() const { return n_stage_; }
    const kv_layout & layout() const { return layout_; }
    // K and V rows (layout type [n_embd_kv]) of slot `slot` of layer il.
    uint8_t * k(int il, uint32_t slot) { return row(k_.get(), first_[size_t(il)] + slot); }
    uint8_t * v(int il, uint32_t slot) { return row(v_.get(), first_[size_t(il)] + slot); }
    // Staging row j (< n_stage).
    uint8_t * stage_k(int64_t j) { return row(k_.get(), first_.back() + j); }
    uint8_t * stage_v(int64_t j) { return row(v_.get(), first_.back() + j); }
    // Layer il's rows as a kv_view whose row r is slot r (n_kv = n_slots(il)).
    kv_view view(int il) const;
    // The row of view(il) that is staging row j.
    int32_t stage_row(int il, int64_t j) const { return int32_t(first_.back() - first_[size_t(il)] + j); }

private:
    uint8_t * row(uint8_t * base, int64_t r) const { return base + size_t(r) * layout_.row_bytes(); }
    kv_layout layout_;
    std::vector<int64_t> first_;  // [n_layer + 1] first row of each layer's slots; first_[n_layer]: the staging
    int64_t n_stage_;
    std::unique_ptr<uint8_t[]> k_, v_;  // layout type [n_layer · n_slots + n_stage, n_embd_kv]
};

}  // namespace hill
