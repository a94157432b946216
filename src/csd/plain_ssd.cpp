#include "csd/plain_ssd.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/sys_info.h"
#include "score/selector.h"

namespace hill::csd {

plain_ssd::plain_ssd(const storage_params & p, const cold_pool * pool, const kv_layout & layout,
                     const attention_shape & s, thread_pool & threads)
    : device(p.profile), params_(p), threads_(threads), layout_(layout) {
    const double caps[2] = {p.profile.internal_read_bps, p.profile.link_bps};
    double rate = 0.0;
    for (const double c : caps) {
        if (c > 0.0) rate = rate > 0.0 ? std::min(rate, c) : c;
    }
    bucket_ = token_bucket(rate);
    block_.resize(score_block_bytes(p.block_tokens, std::max(1, s.n_head_kv)));
    if (pool != nullptr) {
        io_queue_params io;
        io.fault_hook = p.io_faults;
        reader_ = std::make_unique<cold_reader>(*pool, io);
        gather_ = std::make_unique<cold_gather>(*reader_, layout);
        if (p.prefetch) prefetch_ = std::make_unique<cold_prefetch>(*pool, layout, 4, size_t(32) << 20, io);
        chunk_rows_ = std::max<int64_t>(1, int64_t((size_t(8) << 20) / layout.token_layer_bytes()));
        merge_k_ = aligned_buffer(size_t(chunk_rows_) * layout.row_bytes());
        merge_v_ = aligned_buffer(size_t(chunk_rows_) * layout.row_bytes());
    }
}

void plain_ssd::charge(uint64_t bytes, uint64_t & link_bytes) {
    const auto stop = [this] { return params_.stop_requested && params_.stop_requested(); };
    counters_.internal_read_bytes += bytes;
    link_bytes += bytes;
    if (stop() || !bucket_.take(bytes, stop, &counters_.t_throttle_us)) {
        cancel();
        throw error(exit_code::interrupted, "interrupted while the storage device was working");
    }
}

bool plain_ssd::next_batch(kv_batch & out, uint64_t & link_bytes) {
    const uint64_t before = gather_->read_bytes();
    const int64_t t0 = time_us();
    bool more = false;
    try {
        more = gather_->next(out);
    } catch (const error & e) {
        // A failed or corrupt page read fails this pass only (csd/device.h): the device is ready again.
        ++counters_.n_errors;
        forget_pass();
        fail_input("plain SSD: layer {}: {}", il_, e.what());
    }
    if (!more) return false;
    counters_.t_read_us += uint64_t(time_us() - t0);
    charge(gather_->read_bytes() - before, link_bytes);
    return true;
}

void plain_ssd::score_begin(const device_pass & pass, host_scorer & scorer) {
    HILL_ASSERT(gather_ != nullptr && scorer_ == nullptr && !reading_);
    il_ = pass.il;
    scorer_ = &scorer;
    gather_->begin(pass.groups, pass.positions, false);
    batch_ = kv_batch{};
    cursor_ = 0;
    ++counters_.n_score_passes;
}

const score_block_view * plain_ssd::score_next() {
    HILL_ASSERT(scorer_ != nullptr);
    const int n_group = scorer_->n_group();
    HILL_ASSERT(n_group <= score_block_max_group);
    if (cursor_ == batch_.view.n_kv) {
        if (!next_batch(batch_, counters_.link_score_bytes)) {
            scorer_ = nullptr;
            return nullptr;
        }
        const int64_t t0 = time_us();
        seg_scores_.resize(size_t(n_group) * size_t(batch_.view.n_kv));
        scorer_->score(batch_.view, batch_.rows, seg_scores_.data(), batch_.view.n_kv, threads_);
        counters_.t_kernel_us += uint64_t(time_us() - t0);
        counters_.tokens_scored += uint64_t(batch_.view.n_kv);
        cursor_ = 0;
    }
    score_block_writer w(block_.data(), il_, n_group);
    f16_bits tuple[score_block_max_group];
    const int64_t n = batch_.view.n_kv;
    for (; cursor_ < n && w.n_tokens() < params_.block_tokens; ++cursor_) {
        for (int g = 0; g < n_group; ++g) tuple[g] = score_to_f16(seg_scores_[size_t(g) * size_t(n) + size_t(cursor_)]);
        w.add(uint32_t(batch_.positions[cursor_]), tuple);
    }
    w.seal();
    ++counters_.score_blocks;
    view_.emplace(block_.data());
    return &*view_;
}

void plain_ssd::read_begin(const device_pass & pass) {
    HILL_ASSERT(gather_ != nullptr && scorer_ == nullptr && !reading_);
    il_ = pass.il;
    reading_ = true;
    ++counters_.n_read_passes;
    job_key_ = key_of(pass);
    first_misses_read_ = false;
    if (prefetch_ != nullptr) {
        if (const std::span<const int32_t> planned = prefetch_->planned(job_key_); !planned.empty()) {
            // While the job runs, read the first chunk's tokens it lacks: both queues busy at once.
            groups_.assign(pass.groups.begin(), pass.groups.end());
            read_pos_.assign(pass.positions.begin(), pass.positions.end());
            read_misses(0, std::min(read_pos_.size(), size_t(chunk_rows_)), planned);
            first_misses_read_ = true;
        }
    }
    const int64_t t0 = time_us();
    job_ = prefetch_ != nullptr ? prefetch_->wait(job_key_) : nullptr;
    counters_.t_read_us += uint64_t(time_us() - t0);
    if (job_ == nullptr && prefetch_ != nullptr) prefetch_->release(job_key_);
    if (job_ == nullptr && !first_misses_read_) {
        gather_->begin(pass.groups, pass.positions, true);  // no job: every token is read now
        return;
    }
    // Over the job, or over a failed job whose first-chunk misses were read above: the rest is read
    // chunk by chunk (merged_next).
    merged_ = true;
    early_.assign(misses_.begin(), misses_.end());
    if (!first_misses_read_) {
        groups_.assign(pass.groups.begin(), pass.groups.end());
        read_pos_.assign(pass.positions.begin(), pass.positions.end());
    }
    read_i_ = 0;
    job_j_ = 0;
    if (job_ != nullptr) charge(job_->bytes_read, counters_.link_kv_bytes);
}

void plain_ssd::read_misses(size_t begin, size_t end, std::span<const int32_t> have) {
    const size_t rb = layout_.row_bytes();
    misses_.clear();
    miss_row_.clear();
    size_t j = size_t(std::lower_bound(have.begin(), have.end(), begin < end ? read_pos_[begin] : 0) - have.begin());
    for (size_t i = begin; i < end; ++i) {
        const int32_t t = read_pos_[i];
        while (j < have.size() && have[j] < t) ++j;
        if (j == have.size() || have[j] != t) {
            misses_.push_back(t);
            miss_row_.push_back(int32_t(i - begin));
        }
    }
    if (misses_.empty()) return;
    gather_->begin(groups_, misses_, true);
    kv_batch b;
    size_t m = 0;
    while (next_batch(b, counters_.link_kv_bytes)) {
        for (int64_t r = 0; r < b.view.n_kv; ++r, ++m) {
            const size_t src = size_t(b.rows != nullptr ? b.rows[r] : r) * rb;
            const size_t dst = size_t(miss_row_[m]) * rb;
            std::memcpy(merge_k_.data() + dst, static_cast<const uint8_t *>(b.view.k) + src, rb);
            std::memcpy(merge_v_.data() + dst, static_cast<const uint8_t *>(b.view.v) + src, rb);
        }
    }
    HILL_ASSERT(m == misses_.size());
}

bool plain_ssd::merged_next(kv_batch & out) {
    if (read_i_ == read_pos_.size()) {
        forget_pass();
        return false;
    }
    const size_t rb = layout_.row_bytes();
    const size_t begin = read_i_, end = std::min(read_pos_.size(), begin + size_t(chunk_rows_));
    const std::span<const int32_t> have = job_ != nullptr ? std::span<const int32_t>(job_->positions) : std::span<const int32_t>{};
    if (begin != 0 || !first_misses_read_) {
        read_misses(begin, end, have);
    } else if (job_ == nullptr) {
        read_misses(begin, end, early_);  // a failed job: the first chunk's tokens not read early
    }
    uint64_t hits = 0;
    for (size_t i = begin; job_ != nullptr && i < end; ++i) {
        const auto * jk = static_cast<const uint8_t *>(job_->view.k);
        const auto * jv = static_cast<const uint8_t *>(job_->view.v);
        const int32_t t = read_pos_[i];
        while (job_j_ < have.size() && have[job_j_] < t) ++job_j_;
        if (job_j_ < have.size() && have[job_j_] == t) {
            const size_t row = i - begin;
            std::memcpy(merge_k_.data() + row * rb, jk + job_j_ * rb, rb);
            std::memcpy(merge_v_.data() + row * rb, jv + job_j_ * rb, rb);
            ++hits;
        }
    }
    read_i_ = end;
    counters_.prefetch_hits += hits;
    out.view = kv_view{layout_.type, merge_k_.data(), merge_v_.data(), int64_t(end - begin), layout_.n_embd_kv};
    out.rows = nullptr;
    out.positions = read_pos_.data() + begin;
    return true;
}

bool plain_ssd::read_next(kv_batch & out) {
    HILL_ASSERT(reading_);
    const bool more = merged_ ? merged_next(out) : next_batch(out, counters_.link_kv_bytes);
    if (!more) {
        reading_ = false;
        return false;
    }
    counters_.tokens_read += uint64_t(out.view.n_kv);
    return true;
}

int64_t plain_ssd::prefetch(const device_pass & pass, bool next_step) {
    if (prefetch_ == nullptr) return 0;
    const int64_t n = prefetch_->start(key_of(pass), pass.groups, pass.positions, next_step);
    counters_.tokens_prefetched += uint64_t(n);
    return n;
}

void plain_ssd::count_untaken(uint64_t bytes) {
    // Read ahead for a pass that never came: still read.
    counters_.internal_read_bytes += bytes;
    counters_.link_kv_bytes += bytes;
}

void plain_ssd::end_step() {
    if (prefetch_ != nullptr) count_untaken(prefetch_->end_step());
}

void plain_ssd::drop_prefetches() {
    if (prefetch_ != nullptr) count_untaken(prefetch_->drop_all());
}

void plain_ssd::cancel() {
    // Nothing runs between the calls: forget the pass.
    if (scorer_ != nullptr || reading_) ++counters_.n_cancelled;
    forget_pass();
}

void plain_ssd::forget_pass() {
    if (reading_ && prefetch_ != nullptr) prefetch_->release(job_key_);  // taken, failed or not waited for yet
    job_ = nullptr;
    merged_ = false;
    first_misses_read_ = false;
    scorer_ = nullptr;
    reading_ = false;
}

}  // namespace hill::csd
