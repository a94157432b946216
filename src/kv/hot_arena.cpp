#include "kv/hot_arena.h"

#include "core/error.h"

namespace hill {

hot_arena::hot_arena(const kv_layout & layout, std::span<const int64_t> n_slots, int64_t n_stage)
    : layout_(layout), n_stage_(n_stage) {
    HILL_ASSERT(n_slots.size() == size_t(layout.n_layer) && n_stage >= 0 && layout.n_layer > 0);
    first_.assign(1, 0);
    for (const int64_t n : n_slots) {
        HILL_ASSERT(n >= 0);
        first_.push_back(first_.back() + n);
    }
    const int64_t rows = first_.back() + n_stage;
    HILL_ASSERT(rows < INT32_MAX);
    k_ = std::make_unique_for_overwrite<uint8_t[]>(size_t(rows) * layout.row_bytes());
    v_ = std::make_unique_for_overwrite<uint8_t[]>(size_t(rows) * layout.row_bytes());
}

kv_view hot_arena::view(int il) const {
    const size_t off = size_t(first_[size_t(il)]) * layout_.row_bytes();
    return kv_view{layout_.type, k_.get() + off, v_.get() + off, n_slots(il), layout_.n_embd_kv};
}

}  // namespace hill
