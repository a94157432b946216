// The cold tier's logs (kv/cold_pool.h): per (sequence, layer) a cold log — the K and V
// rows of every token of the sequence in position order (DESIGN.md §3 "Scoring copy" / §5: the cold
// pool holds the whole KV, the hot pool caches what is read often). Rows are gathered in groups of
// page_tokens (kv_layout.h): a full group is written as one K page and one V page, or as one page of
// token records (kv_layout::cold). The newest rows (the open tail: up to open_groups groups) stay in
// RAM until the tail is full, and are then written together: a decode step appends one row per layer,
// and one write of 16 tokens every 16 steps costs far less than a 4 KiB write each step (a small
// synchronous write waits behind every read queued on the SSD; measured: up to 235 ms). So position t lives in group
// t / page_tokens, row t % page_tokens, once on disk: a token's cold location needs no map, only the
// group's page ids; rows from n_on_disk() on are rows of the open tail.
//
// Sliding-window layers (kv/kv_cells.h; issue 15 item 4) keep only their window: a log with a window of
// w tokens holds no page of a group wholly below n_tokens - w — apply() frees such groups, and prepare()
// does not write the groups of an append that the append itself moves out of the window. A dropped
// group's entry in groups is (no_page, no_page) so that position t still lives in group t / page_tokens;
// no reader asks for it (kv_cells::kept_from). Such a log holds at most groups_held() groups of pages.
//
// Every change is prepared, then applied (STYLE.md "prepare, then apply"): prepare() writes the
// groups an append fills to fresh pages and stages the rest, changing nothing a reader sees;
// apply() makes the append visible; discard() frees what a prepared append wrote. A failed write
// leaves the log as it was (and the pool: its fresh pages are freed), so the caller's step fails
// cleanly and can be retried once the fault is gone.
//
// Thread-safety: one owner thread (the cache's). Pages are written through a cold_writer
// (kv/cold_writer.h) and read back (truncation) through a cold_reader.
#pragma once

#include "core/aligned_buffer.h"
#include "kv/cold_pool.h"
#include "kv/cold_writer.h"
#include "kv/kv_layout.h"

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

namespace hill {

class cold_reader;

// One (sequence, layer)'s cold log as readers see it; valid until the writer next changes it.
struct cold_log_view {
    // [n_groups] (K page, V page) — token records: (page, cold_pool::no_page) — positions [g·pt, (g+1)·pt)
    std::span<const std::pair<uint32_t, uint32_t>> groups;
    const uint8_t * open_k = nullptr;  // layout type [n_open, n_embd_kv]: rows of positions [n_on_disk(), n_tokens())
    const uint8_t * open_v = nullptr;
    int64_t n_open = 0;                // rows of the open tail
    int64_t page_tokens = 0;
    int64_t n_on_disk() const { return int64_t(groups.size()) * page_tokens; }
    int64_t n_tokens() const { return n_on_disk() + n_open; }
};

// An append to one log, prepared and not applied yet.
struct cold_append {
    int seq = -1;
    int il = -1;
    int64_t n = 0;                                          // rows appended
    std::vector<std::pair<uint32_t, uint32_t>> new_groups;  // written to fresh pages, committed in the pool
    int64_t n_open_after = 0;                               // open rows after apply
    bool staged_next = false;  // the open tail after apply is the staging buffer (the current one filled)
};

class cold_logs {
public:
    // Logs for sequences [0, n_seq) of layout.n_layer layers each, up to n_ctx tokens per sequence, over
    // writer's pool (it must hold n_seq · pages_per_group · Σ_il groups_held(layout, n_ctx, window[il],
    // open_groups) pages of layout.page_bytes()); open tails of open_groups groups (at most
    // ⌈n_ctx / page_tokens⌉). window: [n_layer] each layer's sliding window in tokens, 0 for all tokens
    // (empty: none).
    cold_logs(cold_writer & writer, const kv_layout & layout, int n_seq, int64_t n_ctx, int64_t open_groups = 1,
              std::span<const int32_t> window = {});
    // The groups of pages one log holds at most: ⌈n_ctx / page_tokens⌉, or for a window of w tokens
    // those a window spans (⌈w / page_tokens⌉ + 1) twice — the groups held and, before apply frees the
    // old ones, those a prepared append wrote.
    static int64_t groups_held(const kv_layout & layout, int64_t n_ctx, int32_t window);

    // The open tail an engine uses: open_tail_tokens / page_tokens groups, at least one (a page write
    // every 16 decode steps or more: 64 KiB at 4 KiB per token and layer).
    static constexpr int64_t open_tail_tokens = 16;
    static int64_t open_groups_for(const kv_layout & layout);

    cold_log_view log(int seq, int il) const;
    // Called before a page leaves a log (a sliding window's drop, truncate, restore, discard): the owner
    // stops reads of written pages in flight on other threads — the storage device's prefetches, which
    // may outlive a decode step (csd::device::drop_prefetches) — so that no read meets a page freed, or
    // freed and written again, under it. Default: nothing.
    void set_before_free(std::function<void()> f) { before_free_ = std::move(f); }
    const kv_layout & layout() const { return layout_; }
    const cold_pool & pool() const { return pool_; }

    // Prepares the append of n rows k, v (layout type [n, n_embd_kv]) as positions [n_tokens, n_tokens + n)
    // of log (seq, il): when the append fills the open tail, the tail and the whole groups of the rest
    // are written to fresh pages now (one page write batch of about 16 MiB at a time) and the last
    // partial group is staged; otherwise the rows are staged in the tail. At most one prepared append per log
    // (asserted). Errors (hill::error, bad_input): a failed write, naming the page, file and cause
    // ("No space left on device"); nothing is changed then (the fresh pages are freed).
    void prepare(int seq, int il, int64_t n, const void * k, const void * v, cold_append & out);
    // Makes a prepared append visible. Never fails.
    void apply(const cold_append & a);
    // Forgets a prepared append (frees its fresh pages). Never fails.
    void discard(const cold_append & a);

    // Forgets positions [n, ..) of sequence seq in every layer: groups wholly past n go back to the
    // pool; when n falls inside a written group, that group's first n % page_tokens rows are read back
    // into the open tail (through `reader`) and its pages freed (a dropped group: asserted not). All
    // reads happen before anything changes: on a read error (hill::error naming the page) the logs are
    // as they were.
    void truncate(int seq, int64_t n, cold_reader & reader);

    // Copies of every layer's open tail of sequence seq, taken before an operation that may have to
    // be undone (a prefill of several segments), and the undo: back to the logs as they were at the
    // snapshot (groups written since are freed; groups a sliding window dropped since stay dropped: the
    // caller then empties the sequence, kv_cells::can_truncate). Never does I/O.
    struct snapshot {
        int seq = -1;
        std::vector<int64_t> n_groups, n_open;  // [n_layer]
        std::vector<std::vector<uint8_t>> open_k, open_v;  // [n_layer] layout type [n_open, n_embd_kv]: the open rows
    };
    void take_snapshot(int seq, snapshot & s) const;
    void restore(const snapshot & s);


private:
    struct log_state {
        std::vector<std::pair<uint32_t, uint32_t>> groups;
        aligned_buffer open_k, open_v;  // layout type [open_groups · page_tokens, n_embd_kv]
        aligned_buffer next_k, next_v;  // the open tail after an append that fills the current one
        int64_t n_open = 0;
        int64_t n_dropped = 0;          // groups [0, n_dropped) are dropped (sliding window): no pages
        bool pending = false;           // a prepared append is not applied yet
    };
    log_state & state(int seq, int il) { return logs_[size_t(seq) * size_t(layout_.n_layer) + size_t(il)]; }
    const log_state & state(int seq, int il) const { return logs_[size_t(seq) * size_t(layout_.n_layer) + size_t(il)]; }
    // Writes groups (k_rows[g], v_rows[g]: page_tokens rows each, layout type) to fresh pages through the
    // staging buffer (at most batch_groups_ groups), appended to out. Errors: as prepare; the pages of
    // this call are freed then.
    void write_groups(std::span<const uint8_t * const> k_rows, std::span<const uint8_t * const> v_rows,
                      std::vector<std::pair<uint32_t, uint32_t>> & out);
    void free_group(const std::pair<uint32_t, uint32_t> & g);

    cold_writer & writer_;
    cold_pool & pool_;
    std::function<void()> before_free_;
    kv_layout layout_;
    int n_seq_;
    std::vector<log_state> logs_;  // [n_seq, n_layer]
    std::vector<int32_t> window_;  // [n_layer] sliding window in tokens, 0: all tokens
    int64_t open_groups_ = 1;       // groups of the open tail
    int64_t batch_groups_ = 1;      // groups per page write batch (about 16 MiB of pages, >= open_groups_)
    aligned_buffer staging_;        // [batch_groups, pages_per_group, page_bytes]: the pages being written
    std::vector<page_write> writes_;        // per-batch scratch
    std::vector<page_result> results_;
};

}  // namespace hill
