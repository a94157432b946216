#include "csd/plain_ssd.h"

#include <algorithm>

#include "core/error.h"
#include "core/sys_info.h"
#include "score/selector.h"

namespace hill::csd {

plain_ssd::plain_ssd(const storage_params & p, const cold_pool * pool, const kv_layout & layout,
                     const attention_shape & s, thread_pool & threads)
    : device(p.profile), params_(p), threads_(threads) {
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
    }
}

bool plain_ssd::next_batch(kv_batch & out, uint64_t & link_bytes) {
    const auto stop = [this] { return params_.stop_requested && params_.stop_requested(); };
    const uint64_t before = gather_->read_bytes();
    const int64_t t0 = time_us();
    bool more = false;
    try {
        more = gather_->next(out);
    } catch (const error & e) {
        // A failed or corrupt page read fails this pass only (csd/device.h): the device is ready again.
        ++counters_.n_errors;
        scorer_ = nullptr;
        reading_ = false;
        fail_input("plain SSD: layer {}: {}", il_, e.what());
    }
    if (!more) return false;
    counters_.t_read_us += uint64_t(time_us() - t0);
    const uint64_t bytes = gather_->read_bytes() - before;
    counters_.internal_read_bytes += bytes;
    link_bytes += bytes;
    if (stop() || !bucket_.take(bytes, stop, &counters_.t_throttle_us)) {
        cancel();
        throw error(exit_code::interrupted, "interrupted while the storage device was working");
    }
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
    gather_->begin(pass.groups, pass.positions, true);
    reading_ = true;
    ++counters_.n_read_passes;
}

bool plain_ssd::read_next(kv_batch & out) {
    HILL_ASSERT(reading_);
    if (!next_batch(out, counters_.link_kv_bytes)) {
        reading_ = false;
        return false;
    }
    counters_.tokens_read += uint64_t(out.view.n_kv);
    return true;
}

void plain_ssd::cancel() {
    // Nothing runs between the calls: forget the pass.
    if (scorer_ != nullptr || reading_) ++counters_.n_cancelled;
    scorer_ = nullptr;
    reading_ = false;
}

}  // namespace hill::csd
