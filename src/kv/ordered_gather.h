// The tokens a step attends to, of one (sequence, layer), in position order and window by window, as
// rows of one kv_view — the layer's hot arena (kv/hot_arena.h): hot tokens in place, the others copied
// into the arena's staging rows as they come (the cold log's open tail from RAM; pages from a disk
// source that delivers them in ascending position order: the storage device's read pass, or a
// cold_gather).
//
// Why one order: an online softmax (compute/attention.h) sums in the order it is fed. Fed in position
// order, in windows of window_tokens keys (a multiple of the kernels' 64-key chunks, so the windows cut
// exactly where one pass would), attention gives the same bits wherever each token lived — hot, in
// RAM or on SSD — and in whatever batch the sequence ran: tiered attention equals all-in-RAM, and a
// batch decodes what each sequence decodes alone (batch invariance).
#pragma once

#include "compute/attention.h"
#include "kv/cold_gather.h"
#include "kv/hot_arena.h"
#include "kv/page_table.h"

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace hill {

class ordered_gather {
public:
    // Keys per window: a multiple of 64; 4096 keeps the staging at 4096 rows of K and of V.
    static constexpr int64_t window_tokens = 4096;
    // The next batch of the disk tokens' rows, in ascending position order; false when there are no more.
    using disk_source = std::function<bool(kv_batch &)>;

    explicit ordered_gather(hot_arena & arena);

    // Starts entry b of page table t (layer il): its hot tokens, its open-tail tokens (rows of
    // `open`: the cold log's open tail) and its disk tokens, whose rows `disk` delivers (each exactly
    // once, in t.disk_pos_of(b) order). The table must outlive the gather.
    void begin(int il, const kv_page_table & t, int64_t b, const kv_view & open, disk_source disk);
    // The next window: out.view is the layer's arena view with n_kv = the window's tokens, out.rows
    // their rows, out.positions their positions (ascending). False when every token was handed out.
    // Errors: what the disk source throws.
    bool next(kv_batch & out);

private:
    hot_arena & arena_;
    int il_ = 0;
    std::span<const int32_t> hot_pos_, hot_slot_, open_pos_, open_row_, disk_pos_;
    kv_view open_;
    disk_source disk_;
    size_t ih_ = 0, io_ = 0, id_ = 0;
    kv_batch db_;          // the disk batch being consumed
    int64_t dj_ = 0;       // its next row
    std::vector<int32_t> rows_, pos_;
};

}  // namespace hill
