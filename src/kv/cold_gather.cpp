#include "kv/cold_gather.h"

#include "core/error.h"
#include "core/trace.h"

#include <algorithm>

namespace hill {

cold_gather::cold_gather(cold_reader & reader, const kv_layout & layout) : reader_(reader), layout_(layout) {
    const size_t group_rows = size_t(layout.page_tokens()) * layout.row_bytes();
    batch_groups_ = std::max<int64_t>(1, int64_t((size_t(8) << 20) / group_rows));
    staging_k_ = aligned_buffer(size_t(batch_groups_) * group_rows);
    staging_v_ = aligned_buffer(size_t(batch_groups_) * group_rows);
    if (layout.cold == cold_records::token) records_ = aligned_buffer(size_t(batch_groups_) * layout.page_bytes());
}

void cold_gather::begin(std::span<const std::pair<uint32_t, uint32_t>> groups, std::span<const int32_t> positions,
                        bool with_v) {
    groups_.assign(groups.begin(), groups.end());
    positions_.assign(positions.begin(), positions.end());
    next_ = 0;
    with_v_ = with_v;
}

bool cold_gather::next(kv_batch & out) {
    if (next_ >= positions_.size()) return false;
    trace_scope span("cold read", "io");
    const int64_t pt = layout_.page_tokens();
    const size_t pb = layout_.page_bytes(), group_rows = size_t(pt) * layout_.row_bytes();
    const bool token = layout_.cold == cold_records::token;
    reads_.clear();
    rows_.clear();
    batch_pos_.clear();
    int64_t n_groups = 0, last = -1;
    for (; next_ < positions_.size(); ++next_) {
        const int32_t t = positions_[next_];
        const int64_t g = t / pt;
        HILL_ASSERT(g < int64_t(groups_.size()) && g >= last);
        if (g != last) {
            if (n_groups == batch_groups_) break;
            if (token) {
                reads_.push_back({groups_[size_t(g)].first, records_.data() + size_t(n_groups) * pb});
            } else {
                reads_.push_back({groups_[size_t(g)].first, staging_k_.data() + size_t(n_groups) * group_rows});
                if (with_v_) reads_.push_back({groups_[size_t(g)].second, staging_v_.data() + size_t(n_groups) * group_rows});
            }
            last = g;
            ++n_groups;
        }
        rows_.push_back(int32_t((n_groups - 1) * pt + t % pt));
        batch_pos_.push_back(t);
    }
    results_.resize(reads_.size());
    if (reader_.read_pages(reads_, results_) != 0) reader_.check(results_, "reading KV pages");
    if (token) {
        for (int64_t i = 0; i < n_groups; ++i) {
            layout_.unpack_records(records_.data() + size_t(i) * pb, pt, staging_k_.data() + size_t(i) * group_rows,
                                   with_v_ ? staging_v_.data() + size_t(i) * group_rows : nullptr);
        }
    }
    read_bytes_ += uint64_t(reads_.size()) * pb;
    span.arg("pages", int64_t(reads_.size()));
    span.arg("bytes", int64_t(reads_.size() * pb));
    span.arg("tokens", int64_t(rows_.size()));
    out.view = kv_view{layout_.type, staging_k_.data(), with_v_ ? staging_v_.data() : nullptr, int64_t(rows_.size()),
                       layout_.n_embd_kv};
    out.rows = rows_.data();
    out.positions = batch_pos_.data();
    return true;
}

}  // namespace hill
