// The KV cache of one sequence across tiers: a hot pool in host DRAM (capacity
// --kv-host-budget) and a cold pool of pages on SSD (--kv-dir). Token map: (layer, token) ->
// (tier, slot). One thread owns the store (STYLE.md: one owner of cache metadata); the cold pool
// moves bytes.
//
// Placement (DESIGN.md §3, policy `full`): the first n_sinks tokens and the most recent ones stay
// hot; when a layer's hot slots are full, appending a token demotes the oldest hot non-sink token
// of that layer to the cold pool. Dense attention reads every token wherever it lives:
// for_each_segment() hands out the hot tokens in place and the cold tokens page batch by page
// batch, and the device tier (kv/device_tier.h) attends to each segment.
//
// A token is never seen half moved: its K and V rows are copied to the destination first, and
// its token-map entry changes after the copy, in the owner thread.
#pragma once

#include "compute/attention.h"
#include "core/aligned_buffer.h"
#include "kv/hit_table.h"
#include "kv/io_queue.h"
#include "kv/kv_layout.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace hill {

class cold_pool;
struct page_read;
struct page_result;

enum class kv_tier : uint8_t { none = 0, hot = 1, cold = 2 };

// What a segment visit reads: K and V rows, or K rows only (scoring).
enum class kv_part : uint8_t { k_and_v, k };

// Which tokens a segment visit covers: all of them; those in host memory (the hot pool and the cold
// group still being filled, which is written to the cold pool when full); or those in written cold
// pages, which the storage device holds (csd/device.h scores and reads them).
enum class kv_scope : uint8_t { all, in_memory, on_disk };

// A layer's written cold pages as the storage device sees them (csd/device.h). Valid until the store
// is next changed (append, move, truncate): the owner thread does not change it while a device works
// on the layer.
struct cold_layer_view {
    std::span<const std::pair<uint32_t, uint32_t>> groups;  // [n_groups] (K page, V page) ids, in slot order
    std::span<const int64_t> slot_token;  // [n_groups * page_tokens] token of each slot of those pages, -1: a hole
    int64_t page_tokens = 0;              // tokens per page
};

struct token_loc {
    kv_tier tier = kv_tier::none;
    uint32_t slot = 0;  // hot: slot in the layer's hot arena; cold: slot in the layer's cold slot space
};

struct kv_store_params {
    int32_t n_ctx = 0;                // tokens
    uint64_t host_budget_bytes = 0;   // hot pool capacity M0, all layers together
    int32_t n_sinks = 4;              // first tokens that stay hot
    std::string kv_dir;               // cold pool directory; empty: no cold pool (the budget must hold n_ctx)
    io_fault_hook io_faults;          // tests: injected I/O results of the cold pool (see kv/io_queue.h)
};

struct kv_store_stats {
    uint64_t cold_read_bytes = 0;     // bytes read from the cold pool (pages)
    uint64_t cold_write_bytes = 0;    // bytes written to the cold pool (pages)
    uint64_t demotions = 0;           // hot -> cold moves
    uint64_t promotions = 0;          // cold -> hot moves
};

class kv_store {
public:
    // Errors (hill::error): a budget below n_sinks + 1 tokens per layer; no kv_dir while the budget
    // does not hold n_ctx tokens (exit_code::usage, with the bytes needed); cold pool errors.
    kv_store(const kv_layout & layout, const kv_store_params & params);
    ~kv_store();

    const kv_layout & layout() const { return layout_; }
    int64_t hot_capacity() const { return hot_cap_; }  // hot slots per layer
    int64_t n_tokens(int il) const { return layers_[size_t(il)].n_tokens; }
    token_loc where(int il, int64_t t) const { return layers_[size_t(il)].map[size_t(t)]; }
    const kv_store_stats & stats() const { return stats_; }
    const cold_pool * cold() const { return cold_.get(); }  // nullptr when everything fits the host budget
    hit_table & hits() { return hits_; }
    int64_t n_cold(int il) const;  // tokens of layer il in the cold pool

    // Appends K, V rows (layout type) [n, n_embd_kv] as tokens [n_tokens(il), n_tokens(il) + n) of
    // layer il (placement above). Errors: more than n_ctx tokens (asserted: the session checks),
    // cold pool write errors (hill::error; the store keeps every token appended before).
    void append(int il, int64_t n, const void * k, const void * v);

    // Moves token t of layer il to tier `to`; false when `to` is full (hot) or absent (cold).
    bool move(int il, int64_t t, kv_tier to);

    // Forgets tokens from position n on in every layer. Their hot slots are freed, and the cold pages
    // past the last remaining cold token go back to the pool (a page that still holds remaining tokens
    // stays, and the next cold token starts a new page), so a sequence can be truncated and regrown
    // any number of times. Never does I/O; never throws.
    void truncate(int64_t n);

    // Calls fn(view, rows, tokens) for segments that together cover tokens [0, n_tokens(il)) of
    // layer il once each: view.k/view.v are K/V rows (view.type = layout type, row_stride =
    // n_embd_kv); the segment's j-th token (j < view.n_kv) is token position tokens[j], whose rows
    // are row rows[j] of the view. The hot tokens come first, in place; the cold ones page batch by
    // page batch (checksums checked). part = k: only K pages are read and view.v is nullptr
    // (scoring needs no V). The pointers are valid during the call. Errors: cold read failures
    // (hill::error naming the page).
    using segment_fn = std::function<void(const kv_view & view, const int32_t * rows, const int32_t * tokens)>;
    // scope: only the tokens of that scope are visited.
    void for_each_segment(int il, const segment_fn & fn, kv_part part = kv_part::k_and_v,
                          kv_scope scope = kv_scope::all);

    // for_each_segment over the given tokens of layer il only (each < n_tokens(il), no repeats) that
    // are in `scope`: a gather. Cold pages that hold none of them are not read.
    void for_each_segment_of(int il, std::span<const int32_t> tokens, const segment_fn & fn,
                             kv_part part = kv_part::k_and_v, kv_scope scope = kv_scope::all);

    // Whether token t of layer il is in a written cold page (kv_scope::on_disk).
    bool on_disk(int il, int64_t t) const;
    // The written cold pages of layer il (see cold_layer_view); empty without a cold pool.
    cold_layer_view cold_layer(int il) const;

    // Rows of token t of layer il copied into k_out, v_out (row_bytes() each).
    void read_token(int il, int64_t t, void * k_out, void * v_out);

    // K and V rows of tokens [0, n_tokens(il)) of layer il, in token order, into k_out, v_out
    // (layout type [n_tokens, n_embd_kv] each): the hot rows copied, the cold pages read in batches.
    void export_layer(int il, void * k_out, void * v_out);

private:
    struct layer_state {
        int64_t n_tokens = 0;
        std::vector<token_loc> map;                  // [n_ctx]
        std::unique_ptr<uint8_t[]> hot_k, hot_v;     // layout type [hot_cap, n_embd_kv]
        std::vector<int64_t> hot_token;              // [hot_cap] slot -> token, -1: free
        std::vector<uint32_t> hot_free;              // free hot slots (stack)
        int64_t hot_hwm = 0;                         // slots [hot_hwm, hot_cap) have never been used
        std::deque<int64_t> hot_fifo;                // hot non-sink tokens, oldest first (stale entries skipped)
        std::vector<int64_t> cold_token;             // [cold slots] slot -> token, -1: hole
        std::vector<std::pair<uint32_t, uint32_t>> groups;  // written groups: (K page, V page) ids
        aligned_buffer open_k, open_v;               // layout type [page_tokens, n_embd_kv]: the group being filled
        int64_t n_cold = 0;                          // live cold tokens
    };
    void demote_one(int il);
    uint32_t take_hot_slot(layer_state & L);
    uint32_t put_cold(int il, int64_t t, const uint8_t * k, const uint8_t * v);
    void flush_open_group(int il);
    // After a truncate: gives the cold pages of the forgotten tail back to the pool.
    void release_cold_tail(layer_state & L);
    // Hands out the hot rows in rows_/tokens_ and the cold slots in cold_slots_ (ascending), as segments.
    void visit(int il, kv_part part, const segment_fn & fn);

    kv_layout layout_;
    kv_store_params params_;
    int64_t hot_cap_ = 0;
    std::vector<layer_state> layers_;
    std::unique_ptr<cold_pool> cold_;
    hit_table hits_;
    kv_store_stats stats_;
    // Cold reads in batches of batch_groups_ groups: K pages [batch, page_bytes], V pages likewise.
    int64_t batch_groups_ = 0;
    aligned_buffer staging_k_, staging_v_;
    aligned_buffer token_k_, token_v_;  // one K and one V page for read_token
    std::vector<int32_t> rows_;         // index list scratch for segments
    std::vector<int32_t> tokens_;       // token positions of rows_
    std::vector<uint32_t> cold_slots_;  // cold slots of a visit, ascending
    std::vector<page_read> reads_;      // cold read batch scratch
    std::vector<page_result> results_;
};

}  // namespace hill
