// The KV cells (DESIGN.md §1 "KV cells"): the cache's metadata, no KV bytes — per (sequence, layer,
// token) whether the token has a copy in the hot pool and in which slot, its hit count and when
// placement last moved it; per layer the hot pool's free slots and capacity; per sequence its length.
// llama.cpp's KV cells are the model: a small class of asserted, documented methods, changed only by
// the owner thread (STYLE.md "Concurrency") when a step or a prefill applies what it prepared.
//
// Tiers. Every token of a sequence has a copy in the cold tier when the cache has one — its cold
// log (kv/cold_writer.h) holds position t in group t / page_tokens, so no cold slot is stored — and
// may have a copy in the hot pool (a slot of the hot arena, kv/hot_arena.h). A token is hot when it
// has a hot slot: it is read from DRAM; otherwise it is read from the cold tier (its open tail in
// RAM, or a page on SSD). Without a cold tier every token is hot. The device tier of the CPU build
// aliases host memory, so no cell is in it; its cache of recently selected KV (kv/device_cache.h)
// keeps copies of cold tokens in arena rows apart from the cells' slots, and those tokens stay cold here.
//
// Hit table (HillInfer paper §4.2 "Bidirectional KV Cache Pools"; DESIGN.md §1): one u16 per cell,
// an exponential moving average of how often attention selected the token:
//     h ← h − ⌊h / 8⌋ + (selected ? hit_increment : 0)      (saturating at 65535)
// so a token selected at every step converges to about 8 · hit_increment, and one hit decays to
// half in 5 steps. 2 bytes per token and layer.
//
// Sliding-window layers (model/model.h hparams::window: a query attends to keys (pos - w, pos]): such a
// layer keeps only the last w tokens of each sequence (issue 15 item 4): positions below kept_from(seq,
// il) = n_tokens - w are dropped, in no tier — drop_outside_windows() frees their hot slots (the cold
// logs free their pages, kv/cold_logs.h). No policy selects a dropped token: a sliding layer's
// selection is its window (sched/decode_step.h). A dropped token has no hot slot and is not cold either:
// n_cold() counts kept tokens only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace hill {

struct kv_cells_params {
    int32_t n_layer = 0;
    int32_t n_seq = 1;         // sequences the cache holds at once: ids [0, n_seq)
    int32_t n_ctx = 0;         // tokens per sequence at most
    int64_t hot_slots = 0;     // hot arena slots per layer, shared by the sequences
    std::vector<int32_t> window;  // [n_layer] sliding window of each layer in tokens, 0: all tokens (empty: none)
    // [n_layer] hot arena slots of each layer, each <= hot_slots (empty: hot_slots each): a sliding layer
    // needs no more than its windows (hot_arena.h).
    std::vector<int64_t> layer_slots;
};

class kv_cells {
public:
    static constexpr uint32_t no_slot = UINT32_MAX;
    static constexpr uint32_t never_moved = UINT32_MAX;
    // Bytes of a cell (sequence, layer, token): its hot slot, hit count and last move.
    static constexpr uint64_t cell_bytes = sizeof(uint32_t) + sizeof(uint16_t) + sizeof(uint32_t);
    static constexpr uint16_t hit_increment = 8191;

    explicit kv_cells(const kv_cells_params & p);

    int n_layer() const { return p_.n_layer; }
    int n_seq() const { return p_.n_seq; }
    int32_t n_ctx() const { return p_.n_ctx; }
    int64_t n_tokens(int seq) const { return n_tokens_[size_t(seq)]; }
    // The hot slots the next decode step's appends take: one per sequence that holds tokens and has room
    // for another (0 < n_tokens < n_ctx; a sequence at n_ctx appends no more), where the sequences in
    // `after` (sequence id, tokens) are counted as holding those many tokens.
    int64_t n_appending(std::span<const std::pair<int, int64_t>> after = {}) const;

    // The sliding window of layer il in tokens (0: the layer keeps every token).
    int32_t window(int il) const { return p_.window.empty() ? 0 : p_.window[size_t(il)]; }
    // The first position layer il keeps of seq: n_tokens - window for a sliding layer (at least 0), else 0.
    // Tokens below it are dropped once drop_outside_windows() has run.
    int64_t kept_from(int seq, int il) const {
        const int32_t w = window(il);
        return w > 0 ? std::max<int64_t>(0, n_tokens(seq) - w) : 0;
    }
    // Tokens [0, n_dropped) of layer il of seq are dropped (drop_outside_windows; 0 for a full layer).
    int64_t n_dropped(int seq, int il) const { return dropped_[size_t(seq) * size_t(p_.n_layer) + size_t(il)]; }
    // Whether truncate(seq, n) leaves every sliding layer the window position n needs, [n - w, n): n is 0,
    // n >= n_tokens, or no token has been dropped.
    bool can_truncate(int seq, int64_t n) const;

    // ---- per token (t < n_tokens(seq)) ----
    uint32_t hot_slot(int seq, int il, int64_t t) const { return col(hot_, seq, il)[t]; }
    bool is_hot(int seq, int il, int64_t t) const { return hot_slot(seq, il, t) != no_slot; }
    uint16_t hits(int seq, int il, int64_t t) const { return col(hits_, seq, il)[t]; }
    // The step of the token's last move by placement, with bit 31 set for a promotion (cold → hot);
    // never_moved when placement never moved it.
    uint32_t last_move(int seq, int il, int64_t t) const { return col(moved_, seq, il)[t]; }
    // Whole columns of layer il, [n_tokens(seq)] each.
    std::span<const uint32_t> hot_slots(int seq, int il) const { return {col(hot_, seq, il), size_t(n_tokens(seq))}; }
    std::span<const uint16_t> hit_counts(int seq, int il) const { return {col(hits_, seq, il), size_t(n_tokens(seq))}; }

    // The hit table's rule (file comment): the count after one step.
    static uint16_t hit_next(uint16_t h, bool selected) {
        const uint32_t d = uint32_t(h) - (uint32_t(h) >> 3) + (selected ? hit_increment : 0u);
        return uint16_t(d > 65535u ? 65535u : d);
    }

    // ---- the hot pool of layer il ----
    int64_t hot_slots() const { return p_.hot_slots; }        // arena slots per layer (the most of any layer)
    int64_t hot_slots(int il) const { return p_.layer_slots.empty() ? p_.hot_slots : p_.layer_slots[size_t(il)]; }
    int64_t hot_capacity() const { return capacity_; }        // slots each layer may use, <= hot_slots()
    int64_t n_hot(int il) const { return n_hot_[size_t(il)]; }
    // Slots take_hot() can still hand out: free ones within the capacity.
    int64_t n_hot_free(int il) const;
    // The slot the k-th next take_hot() of layer il will return (k < n_hot_free(il)): a reservation
    // that changes nothing, for a step that fills slots before it applies.
    uint32_t peek_free(int il, int64_t k) const;
    // Changes the capacity (the planner's β; DESIGN.md §4). Lowering it below n_hot() takes slots only
    // as placement frees them (n_hot_free() is 0 until n_hot() <= capacity). n <= hot_slots() (asserted).
    void set_hot_capacity(int64_t n);

    // ---- changes (the owner thread, applying a prepared step) ----
    // Tokens [n_tokens, n_tokens + n) of seq join every layer: no hot slot, hit count 0, never moved.
    void grow(int seq, int64_t n);
    // Gives token t of layer il the next free hot slot (n_hot_free(il) > 0 and not hot: asserted); returns it.
    uint32_t take_hot(int seq, int il, int64_t t);
    // Frees token t's hot slot (hot: asserted).
    void drop_hot(int seq, int il, int64_t t);
    void set_hits(int seq, int il, int64_t t, uint16_t h) { col(hits_, seq, il)[t] = h; }
    // Applies hit_next to tokens [0, n_tokens(seq)) of layer il; `selected` (ascending, no repeats) are
    // the tokens selected at this step.
    void update_hits(int seq, int il, std::span<const int32_t> selected);
    void set_last_move(int seq, int il, int64_t t, uint32_t step, bool promoted) {
        col(moved_, seq, il)[t] = (step & 0x7fffffffu) | (promoted ? 0x80000000u : 0u);
    }
    // Sliding layers: frees the hot slots of seq's tokens below kept_from (dropped: in no tier). Called
    // after a step's or a prefill's changes are applied (a slot freed earlier would disturb the slots the
    // step reserved with peek_free). Never fails.
    void drop_outside_windows(int seq);
    // Forgets tokens [n, n_tokens(seq)) of seq (their hot slots are freed); can_truncate(seq, n)
    // (asserted). Never fails.
    void truncate(int seq, int64_t n);

private:
    template <class T>
    T * col(std::vector<T> & v, int seq, int il) {
        return v.data() + (size_t(seq) * size_t(p_.n_layer) + size_t(il)) * size_t(p_.n_ctx);
    }
    template <class T>
    const T * col(const std::vector<T> & v, int seq, int il) const {
        return v.data() + (size_t(seq) * size_t(p_.n_layer) + size_t(il)) * size_t(p_.n_ctx);
    }

    kv_cells_params p_;
    int64_t capacity_;
    std::vector<int64_t> n_tokens_;          // [n_seq]
    std::vector<uint32_t> hot_;              // u32 [n_seq, n_layer, n_ctx]: hot slot or no_slot
    std::vector<uint16_t> hits_;             // u16 [n_seq, n_layer, n_ctx]: the hit table
    std::vector<uint32_t> moved_;            // u32 [n_seq, n_layer, n_ctx]: last move (see last_move)
    std::vector<std::vector<uint32_t>> free_;  // [n_layer] free hot slots, a stack (the next one last)
    std::vector<int64_t> n_hot_;             // [n_layer] hot slots in use
    std::vector<int64_t> dropped_;           // [n_seq, n_layer] tokens below this one were dropped (sliding layers)
};

}  // namespace hill
