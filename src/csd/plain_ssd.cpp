#include "csd/plain_ssd.h"

#include <algorithm>

#include "core/error.h"
#include "core/sys_info.h"
#include "score/selector.h"

namespace hill::csd {

plain_ssd::plain_ssd(const storage_params & p, kv_store & kv, const attention_shape & s, thread_pool & pool)
    : device(kv, p.profile), params_(p), shape_(s), pool_(pool) {
    const double caps[2] = {p.profile.internal_read_bps, p.profile.link_bps};
    double rate = 0.0;
    for (const double c : caps) {
        if (c > 0.0) rate = rate > 0.0 ? std::min(rate, c) : c;
    }
    bucket_ = token_bucket(rate);
    block_.resize(score_block_bytes(p.block_tokens, std::max(1, s.n_head_kv)));
}

void plain_ssd::account(uint64_t before, uint64_t & link_bytes) {
    const auto stop = [this] { return params_.stop_requested && params_.stop_requested(); };
    const uint64_t bytes = kv_.stats().cold_read_bytes - before;
    counters_.internal_read_bytes += bytes;
    link_bytes += bytes;
    if (stop() || !bucket_.take(bytes, stop, &counters_.t_throttle_us)) {
        throw error(exit_code::interrupted, "interrupted while the storage device was working");
    }
}

void plain_ssd::score_begin(int il, host_scorer & scorer) {
    il_ = il;
    scorer_ = &scorer;
}

void plain_ssd::score_drain(const block_fn & on_block) {
    HILL_ASSERT(scorer_ != nullptr);
    const int n_group = scorer_->n_group();
    ++counters_.n_score_passes;
    score_block_writer w(block_.data(), il_, n_group);
    HILL_ASSERT(n_group <= score_block_max_group);
    f16_bits tuple[score_block_max_group];
    auto flush = [&] {
        if (w.n_tokens() == 0) return;
        w.seal();
        ++counters_.score_blocks;
        on_block(score_block_view(block_.data()));
        w.clear();
    };
    uint64_t before = kv_.stats().cold_read_bytes;
    int64_t t0 = time_us();
    kv_.for_each_segment(il_, [&](const kv_view & view, const int32_t * rows, const int32_t * tokens) {
        const int64_t t1 = time_us();
        counters_.t_read_us += uint64_t(t1 - t0);
        account(before, counters_.link_score_bytes);
        seg_scores_.resize(size_t(n_group) * size_t(view.n_kv));
        scorer_->score(view, rows, seg_scores_.data(), view.n_kv, pool_);
        for (int64_t j = 0; j < view.n_kv; ++j) {
            for (int g = 0; g < n_group; ++g) tuple[g] = score_to_f16(seg_scores_[size_t(g) * size_t(view.n_kv) + size_t(j)]);
            w.add(uint32_t(tokens[j]), tuple);
            if (w.n_tokens() == params_.block_tokens) flush();
        }
        counters_.tokens_scored += uint64_t(view.n_kv);
        t0 = time_us();
        counters_.t_kernel_us += uint64_t(t0 - t1);
        before = kv_.stats().cold_read_bytes;
    }, kv_part::k, kv_scope::on_disk);
    flush();
    scorer_ = nullptr;
}

void plain_ssd::read_begin(int il, std::span<const int32_t> tokens) {
    il_ = il;
    tokens_.assign(tokens.begin(), tokens.end());
    read_pending_ = true;
    read_all_ = false;
}

void plain_ssd::read_all_begin(int il) {
    il_ = il;
    read_pending_ = true;
    read_all_ = true;
}

void plain_ssd::read_drain(const kv_store::segment_fn & fn) {
    HILL_ASSERT(read_pending_);
    read_pending_ = false;
    ++counters_.n_read_passes;
    uint64_t before = kv_.stats().cold_read_bytes;
    int64_t t0 = time_us();
    const kv_store::segment_fn batch = [&](const kv_view & view, const int32_t * rows, const int32_t * tokens) {
        counters_.t_read_us += uint64_t(time_us() - t0);
        account(before, counters_.link_kv_bytes);
        counters_.tokens_read += uint64_t(view.n_kv);
        fn(view, rows, tokens);
        before = kv_.stats().cold_read_bytes;
        t0 = time_us();
    };
    if (read_all_) {
        kv_.for_each_segment(il_, batch, kv_part::k_and_v, kv_scope::on_disk);
    } else {
        kv_.for_each_segment_of(il_, tokens_, batch, kv_part::k_and_v, kv_scope::on_disk);
    }
}

void plain_ssd::cancel() {
    // Nothing runs between begin and drain: forget the pass.
    if (scorer_ != nullptr || read_pending_) ++counters_.n_cancelled;
    scorer_ = nullptr;
    read_pending_ = false;
}

}  // namespace hill::csd
