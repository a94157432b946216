// The page table of one layer for a batch of sequences (DESIGN.md §3 step 2): where each token the
// step reads lives, as plain index arrays with one batch index (FlashInfer's `indptr` style), built
// from the KV cells and the cold logs before a step reads anything, and handed alike to the host
// scorer, the storage device and the attention kernel.
//
// Batch entry b's tokens are split by where their K and V are read from:
//   hot   [hot_indptr[b], hot_indptr[b+1]):   hot_pos (positions) and hot_slot (rows of the layer's
//         hot arena, kv/hot_arena.h): the hot pool's tokens and, when add() is given the device
//         tier's cache (kv/device_cache.h), the cold tokens it holds (n_cached counts those);
//   open  [open_indptr[b], open_indptr[b+1]): tokens without a hot copy in the cold log's open tail
//         in RAM: open_pos and open_row (rows of that log's open tail, kv/cold_logs.h);
//   disk  [disk_indptr[b], disk_indptr[b+1]): tokens without a hot copy in written cold pages:
//         disk_pos (the storage device or a cold_gather finds their pages through the cold log).
// Within each class positions ascend. Every array is reused between steps (no allocation once warm).
#pragma once

#include "kv/cold_logs.h"
#include "kv/device_cache.h"
#include "kv/kv_cells.h"

#include <cstdint>
#include <span>
#include <vector>

namespace hill {

struct kv_page_table {
    std::vector<int32_t> seq;                       // [n_batch] sequence ids
    std::vector<int32_t> hot_indptr{0}, hot_pos, hot_slot;
    std::vector<int32_t> open_indptr{0}, open_pos, open_row;
    std::vector<int32_t> disk_indptr{0}, disk_pos;
    int64_t n_cached = 0;  // hot entries that are device-cache rows, over every entry

    int64_t n_batch() const { return int64_t(seq.size()); }
    void clear();
    // Appends batch entry seq with the given positions of layer il (ascending, each < cells.n_tokens(seq)
    // and not dropped by a sliding window: >= cells.n_dropped(seq, il)), or with every token it keeps,
    // [n_dropped, n_tokens(seq)), when `positions` is empty and `all` is set. log: seq's cold
    // log of layer il, nullptr without a cold tier (every token is then hot). cache: the device tier's
    // cache, whose rows serve the cold tokens it holds, or nullptr (every cold token is then read).
    void add(const kv_cells & cells, const cold_log_view * log, int seq, int il, std::span<const int32_t> positions,
             bool all, const device_cache * cache = nullptr);
    // Appends one hot token to the last entry (a step's own token, in the slot it reserved): it must
    // come after every hot position of the entry.
    void add_hot(int32_t pos, uint32_t slot);

    std::span<const int32_t> hot_pos_of(int64_t b) const { return range(hot_pos, hot_indptr, b); }
    std::span<const int32_t> hot_slot_of(int64_t b) const { return range(hot_slot, hot_indptr, b); }
    std::span<const int32_t> open_pos_of(int64_t b) const { return range(open_pos, open_indptr, b); }
    std::span<const int32_t> open_row_of(int64_t b) const { return range(open_row, open_indptr, b); }
    std::span<const int32_t> disk_pos_of(int64_t b) const { return range(disk_pos, disk_indptr, b); }

private:
    static std::span<const int32_t> range(const std::vector<int32_t> & v, const std::vector<int32_t> & ptr, int64_t b) {
        return {v.data() + ptr[size_t(b)], size_t(ptr[size_t(b) + 1] - ptr[size_t(b)])};
    }
};

}  // namespace hill
