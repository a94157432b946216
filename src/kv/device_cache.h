// The device tier's cache of recently selected KV (DESIGN.md §1 "device tier", §3 step 4): rows of the
// hot arena (kv/hot_arena.h) set apart from the hot pool, holding copies of cold tokens a decode step
// read from the SSD, so that the next steps, which select about 90% of the same tokens, find them in
// memory instead of reading them again. Only the misses of a step are read. The decode step also fills
// it with the tokens its placement evicts from the hot pool (a victim cache: sched/decode_step.h).
//
// It is a cache, not a tier of the KV cells (kv/kv_cells.h): a cached token stays cold (its KV is in
// the cold pool, its hit count drives placement as before) and the hot pool's promotions and demotions
// are not changed by it. What it adds is recency: the hot pool follows hit rates slowly, on purpose (a
// token must be selected several times to displace a hot one, so that moves are not undone), while
// the cache keeps whatever the last steps read. A fill costs no I/O (the row was just read) and an
// eviction costs nothing (the cold pool has the token), so neither is a migration.
//
// Replacement: a step that will fill n rows of a layer first ranks the rows it has not used (looked up
// or filled) by a key the caller gives — the decode step's: the tokens' hit counts, so that a token
// selected often but not at this step outlives one selected once — and fills the lowest first; empty
// rows come before any. When a step read more tokens than that leaves rows for and the policy scored
// them, the decode step fills those rows with the highest-scored, and the rest may take the rows of
// cached tokens the step attended but scored lower (plan_replacements, replace). Rows are shared by the
// sequences of the cache.
//
//   device_cache c(n_layer, n_seq, n_ctx, first_slot, n_rows);
//   c.begin_step(step);
//   uint32_t s = c.slot(seq, il, t);     // arena slot or no_slot (kv_page_table::add looks it up)
//   c.use(il, s);                        // a hit: kept through this step's fills
//   int64_t m = c.prepare_fills(il, n, key);  // up to n rows to fill, lowest key(seq, t) first
//   uint32_t f = c.fill(seq, il, t);     // the next of them for token t (copy its K and V there)
//   c.plan_replacements(incoming, held); // the rest: which used rows they take, by this step's scores
//   c.replace(il, row, seq, t);          // once attention has read that row (copy t's K and V there)
//   c.forget(seq, n);                    // positions >= n of seq change (truncate, release)
//
// A cached row always holds the KV of the token the map names: fill() moves the map before the caller
// writes the row, and a token's KV never changes while it is cached (forget() runs before a position
// is written again). So a step that fails half-way leaves a valid cache, and results never depend on
// it: a hit reads the same bytes as a read from the SSD.
//
// Memory: the rows are the arena's; the map is 4 bytes per (sequence, layer, position) — allocated only
// when some layer has rows.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace hill {

class device_cache {
public:
    static constexpr uint32_t no_slot = UINT32_MAX;

    device_cache() = default;
    // first_slot, n_rows: [n_layer] each; layer il's rows are arena slots [first_slot[il],
    // first_slot[il] + n_rows[il]) of that layer.
    device_cache(int n_seq, int32_t n_ctx, std::vector<int64_t> first_slot, std::vector<int64_t> n_rows);

    int64_t n_rows(int il) const { return il < int(n_rows_.size()) ? n_rows_[size_t(il)] : 0; }
    int64_t first_slot(int il) const { return first_slot_[size_t(il)]; }
    bool empty() const { return map_.empty(); }
    // Whether arena slot `slot` of layer il is one of the cache's rows.
    bool holds(int il, uint32_t slot) const {
        return !map_.empty() && int64_t(slot) >= first_slot_[size_t(il)] &&
               int64_t(slot) < first_slot_[size_t(il)] + n_rows_[size_t(il)];
    }

    // The step whose uses protect rows from fill(); steps number forward (wrapping is harmless).
    void begin_step(uint32_t step) { step_ = step + 1; }
    // The arena slot of layer il holding token t of seq, or no_slot.
    uint32_t slot(int seq, int il, int64_t t) const {
        return map_.empty() ? no_slot : map_[index(seq, il, t)];
    }
    // Marks a cached row (holds(il, slot)) used at this step: no fill of this step replaces it.
    void use(int il, uint32_t slot);
    // Chooses the rows of layer il the next fills of this step take: of the rows not used at this step,
    // the n (at most) of lowest key(seq, position), empty rows first. Returns how many were chosen.
    int64_t prepare_fills(int il, int64_t n, const std::function<uint32_t(int, int32_t)> & key);
    // The next chosen row of layer il, now holding token t of seq (not cached): the map names t there,
    // and the caller copies t's K and V into that arena slot. no_slot when none is left.
    uint32_t fill(int seq, int il, int64_t t);
    // A token with its score at this step (higher: more important) and its cache row (or no_slot).
    struct scored_token {
        int32_t pos;
        uint32_t slot;
        float score;
    };
    // Which rows of cached tokens the step attended (`held`: their rows and scores) go to tokens the step
    // read from the SSD and found no free row for (`incoming`), both ascending by position: in position
    // order, each incoming token takes the row of the lowest-scored held token at a lower position not
    // taken yet, if that one scored lower (slot set; otherwise no_slot). A lower position, because
    // attention reads the tokens in position order: that row has been read when the incoming one arrives.
    // So the cache keeps the tokens the step scored highest, which the next step, whose query differs a
    // little, most likely selects again (a hit count says only how often a token was selected before).
    void plan_replacements(std::span<scored_token> incoming, std::span<const scored_token> held);
    // Row `slot` of layer il (holds(il, slot)), which this step used and no longer reads, now holds token
    // t of seq (not cached): the map names t there, the row counts as used at this step, and the caller
    // copies t's K and V into it.
    void replace(int il, uint32_t slot, int seq, int64_t t);
    // Drops every cached position >= n of seq (a truncated or released sequence).
    void forget(int seq, int64_t n);

private:
    struct row_info {
        int32_t seq = -1;  // -1: empty
        int32_t pos = 0;
        uint32_t used = 0;  // the step (+1) that last used it; 0 never
    };
    struct chosen {
        uint32_t key;
        uint32_t row;
    };
    size_t index(int seq, int il, int64_t t) const {
        return (size_t(seq) * n_rows_.size() + size_t(il)) * size_t(n_ctx_) + size_t(t);
    }

    int32_t n_ctx_ = 0;
    std::vector<int64_t> first_slot_, n_rows_;
    std::vector<std::vector<row_info>> rows_;  // [n_layer][n_rows]
    std::vector<std::vector<chosen>> chosen_;  // [n_layer] rows prepare_fills chose, taken from the back
    std::vector<uint32_t> map_;                // [n_seq, n_layer, n_ctx] arena slot or no_slot
    std::vector<scored_token> heap_;           // plan_replacements: the held tokens passed, lowest score on top
    uint32_t step_ = 1;
};

}  // namespace hill
