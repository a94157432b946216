#include "kv/page_table.h"

#include "core/error.h"

namespace hill {

void kv_page_table::clear() {
    seq.clear();
    hot_indptr.assign(1, 0);
    open_indptr.assign(1, 0);
    disk_indptr.assign(1, 0);
    hot_pos.clear();
    hot_slot.clear();
    open_pos.clear();
    open_row.clear();
    disk_pos.clear();
    n_cached = 0;
}

void kv_page_table::add(const kv_cells & cells, const cold_log_view * log, int s, int il,
                        std::span<const int32_t> positions, bool all, const device_cache * cache) {
    const int64_t t0 = all ? cells.n_dropped(s, il) : 0;  // the tokens a sliding window dropped are in no tier
    const int64_t n = all ? cells.n_tokens(s) - t0 : int64_t(positions.size());
    const std::span<const uint32_t> slots = cells.hot_slots(s, il);
    const int64_t n_on_disk = log != nullptr ? log->n_on_disk() : 0;
    if (cache != nullptr && cache->empty()) cache = nullptr;
    seq.push_back(s);
    for (int64_t i = 0; i < n; ++i) {
        const int32_t t = all ? int32_t(t0 + i) : positions[size_t(i)];
        HILL_ASSERT(t >= cells.n_dropped(s, il) && t < int64_t(slots.size()));
        const uint32_t slot = slots[size_t(t)];
        if (slot != kv_cells::no_slot) {
            hot_pos.push_back(t);
            hot_slot.push_back(int32_t(slot));
        } else if (t >= n_on_disk) {
            HILL_ASSERT(log != nullptr && t < log->n_tokens());  // without a cold tier every token is hot
            open_pos.push_back(t);
            open_row.push_back(int32_t(t - n_on_disk));
        } else if (const uint32_t c = cache != nullptr ? cache->slot(s, il, t) : device_cache::no_slot;
                   c != device_cache::no_slot) {
            hot_pos.push_back(t);
            hot_slot.push_back(int32_t(c));
            ++n_cached;
        } else {
            disk_pos.push_back(t);
        }
    }
    hot_indptr.push_back(int32_t(hot_pos.size()));
    open_indptr.push_back(int32_t(open_pos.size()));
    disk_indptr.push_back(int32_t(disk_pos.size()));
}

void kv_page_table::add_hot(int32_t pos, uint32_t slot) {
    HILL_ASSERT(!seq.empty());
    HILL_ASSERT(hot_pos.size() == size_t(hot_indptr[hot_indptr.size() - 2]) || hot_pos.back() < pos);
    hot_pos.push_back(pos);
    hot_slot.push_back(int32_t(slot));
    ++hot_indptr.back();
}

}  // namespace hill
