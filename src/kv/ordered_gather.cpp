#include "kv/ordered_gather.h"

#include "core/error.h"

#include <cstring>
#include <limits>

namespace hill {

ordered_gather::ordered_gather(hot_arena & arena) : arena_(arena) {
    HILL_ASSERT(arena.n_stage() >= window_tokens && window_tokens % 64 == 0);
    rows_.reserve(size_t(window_tokens));
    pos_.reserve(size_t(window_tokens));
}

void ordered_gather::begin(int il, const kv_page_table & t, int64_t b, const kv_view & open, disk_source disk) {
    il_ = il;
    hot_pos_ = t.hot_pos_of(b);
    hot_slot_ = t.hot_slot_of(b);
    open_pos_ = t.open_pos_of(b);
    open_row_ = t.open_row_of(b);
    disk_pos_ = t.disk_pos_of(b);
    open_ = open;
    disk_ = std::move(disk);
    ih_ = io_ = id_ = 0;
    db_ = kv_batch{};
    dj_ = 0;
}

bool ordered_gather::next(kv_batch & out) {
    constexpr int32_t none = std::numeric_limits<int32_t>::max();
    const size_t rb = arena_.layout().row_bytes();
    rows_.clear();
    pos_.clear();
    int64_t n_stage = 0;
    while (int64_t(rows_.size()) < window_tokens) {
        const int32_t ph = ih_ < hot_pos_.size() ? hot_pos_[ih_] : none;
        const int32_t po = io_ < open_pos_.size() ? open_pos_[io_] : none;
        const int32_t pd = id_ < disk_pos_.size() ? disk_pos_[id_] : none;
        if (ph == none && po == none && pd == none) break;
        if (ph < po && ph < pd) {
            rows_.push_back(hot_slot_[ih_++]);
            pos_.push_back(ph);
            continue;
        }
        const uint8_t *k, *v;
        if (po < pd) {
            const int64_t r = open_row_[io_++];
            k = static_cast<const uint8_t *>(open_.k) + size_t(r) * rb;
            v = static_cast<const uint8_t *>(open_.v) + size_t(r) * rb;
            pos_.push_back(po);
        } else {
            while (dj_ == db_.view.n_kv) {
                const bool more = disk_(db_);
                HILL_ASSERT(more);  // the source delivers every disk token
                dj_ = 0;
            }
            HILL_ASSERT(db_.positions[dj_] == pd);
            const int64_t r = db_.rows != nullptr ? db_.rows[dj_] : dj_;
            k = static_cast<const uint8_t *>(db_.view.k) + size_t(r) * rb;
            v = static_cast<const uint8_t *>(db_.view.v) + size_t(r) * rb;
            ++dj_;
            ++id_;
            pos_.push_back(pd);
        }
        std::memcpy(arena_.stage_k(n_stage), k, rb);
        std::memcpy(arena_.stage_v(n_stage), v, rb);
        rows_.push_back(arena_.stage_row(il_, n_stage++));
    }
    if (rows_.empty()) return false;
    out.view = arena_.view(il_);
    out.view.n_kv = int64_t(rows_.size());
    out.rows = rows_.data();
    out.positions = pos_.data();
    return true;
}

}  // namespace hill
