#include "kv/cold_gather.h"

#include "core/error.h"
#include "core/trace.h"

#include <algorithm>

namespace hill {

cold_gather::cold_gather(cold_reader & reader, const kv_layout & layout, bool stream)
    : reader_(reader), layout_(layout), stream_(stream) {
    const size_t group_rows = size_t(layout.page_tokens()) * layout.row_bytes();
    batch_groups_ = std::max<int64_t>(1, int64_t((size_t(8) << 20) / group_rows));
    staging_k_ = aligned_buffer(size_t(batch_groups_) * group_rows, aligned_buffer::uninitialized);
    staging_v_ = aligned_buffer(size_t(batch_groups_) * group_rows, aligned_buffer::uninitialized);
    if (layout.cold == cold_records::token) records_ = aligned_buffer(size_t(batch_groups_) * layout.page_bytes(), aligned_buffer::uninitialized);
}

cold_gather::~cold_gather() { end(); }

void cold_gather::end() {
    if (in_flight_) reader_.abandon_pages();
    in_flight_ = false;
    positions_.clear();
    next_ = 0;
}

void cold_gather::begin(std::span<const std::pair<uint32_t, uint32_t>> groups, std::span<const int32_t> positions,
                        bool with_v) {
    end();  // the last pass's reads, not needed now
    groups_.assign(groups.begin(), groups.end());
    positions_.assign(positions.begin(), positions.end());
    next_ = 0;
    with_v_ = with_v;
}

void cold_gather::plan_batch() {
    const int64_t pt = layout_.page_tokens();
    const size_t pb = layout_.page_bytes(), group_rows = size_t(pt) * layout_.row_bytes();
    const bool token = layout_.cold == cold_records::token;
    reads_.clear();
    rows_.clear();
    batch_pos_.clear();
    group_end_.clear();
    int64_t n_groups = 0, last = -1;
    for (; next_ < positions_.size(); ++next_) {
        const int32_t t = positions_[next_];
        const int64_t g = t / pt;
        HILL_ASSERT(g < int64_t(groups_.size()) && g >= last);
        if (g != last) {
            if (n_groups == batch_groups_) break;
            if (n_groups > 0) group_end_.push_back(uint32_t(rows_.size()));
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
    group_end_.push_back(uint32_t(rows_.size()));
    results_.resize(reads_.size());
}

void cold_gather::settle(size_t r0, size_t r1) {
    const std::span<const page_result> res(results_.data() + r0, r1 - r0);
    for (const page_result & r : res) {
        if (r.status != page_status::ok) {
            end();
            reader_.check(res, "reading KV pages");
        }
    }
    const int64_t pt = layout_.page_tokens();
    const size_t pb = layout_.page_bytes(), group_rows = size_t(pt) * layout_.row_bytes();
    if (layout_.cold == cold_records::token) {
        for (size_t i = r0; i < r1; ++i) {
            layout_.unpack_records(records_.data() + i * pb, pt, staging_k_.data() + i * group_rows,
                                   with_v_ ? staging_v_.data() + i * group_rows : nullptr);
        }
    }
    read_bytes_ += uint64_t(r1 - r0) * pb;
}

bool cold_gather::next(kv_batch & out) {
    if (!in_flight_ && next_ >= positions_.size()) return false;
    trace_scope span("cold read", "io");
    // Reads per group: one page of token records, or a K page (and a V page).
    const size_t per_group = layout_.cold == cold_records::token || !with_v_ ? 1 : 2;
    size_t r0 = 0, r1 = 0;  // the reads handed out now
    if (!stream_) {
        plan_batch();
        if (reader_.read_pages(reads_, results_) != 0) reader_.check(results_, "reading KV pages");
        r1 = reads_.size();
    } else {
        if (!in_flight_) {
            plan_batch();
            reader_.start_pages(reads_, results_);
            in_flight_ = true;
            reads_done_ = 0;
        }
        r0 = reads_done_;
        r1 = reader_.pages_done(r0 + per_group) / per_group * per_group;
        reads_done_ = r1;
        if (r1 == reads_.size()) {
            reader_.finish_pages();
            in_flight_ = false;
        }
    }
    settle(r0, r1);
    const size_t t0 = r0 == 0 ? 0 : group_end_[r0 / per_group - 1], t1 = group_end_[r1 / per_group - 1];
    span.arg("pages", int64_t(r1 - r0));
    span.arg("bytes", int64_t((r1 - r0) * layout_.page_bytes()));
    span.arg("tokens", int64_t(t1 - t0));
    out.view = kv_view{layout_.type, staging_k_.data(), with_v_ ? staging_v_.data() : nullptr, int64_t(t1 - t0),
                       layout_.n_embd_kv};
    out.rows = rows_.data() + t0;
    out.positions = batch_pos_.data() + t0;
    return true;
}

}  // namespace hill
