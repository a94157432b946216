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
        gather_ = std::make_unique<cold_gather>(*reader_, layout, true);
        if (p.prefetch) prefetch_ = std::make_unique<cold_prefetch>(*pool, layout, 4, size_t(32) << 20, io);
        fetch_ = std::make_unique<cold_prefetch>(*pool, layout, 1, p.fetch_bytes, io, "cold fetch");
        chunk_rows_ = std::max<int64_t>(1, int64_t((size_t(8) << 20) / layout.token_layer_bytes()));
        merge_k_ = aligned_buffer(size_t(chunk_rows_) * layout.row_bytes(), aligned_buffer::uninitialized);
        merge_v_ = aligned_buffer(size_t(chunk_rows_) * layout.row_bytes(), aligned_buffer::uninitialized);
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
    score_block_writer w(block_.data(), il_, n_group);
    f16_bits tuple[score_block_max_group];
    // A block takes tokens across the gather's batches (which end where the reads in flight do), so
    // that blocks are cut at block_tokens only, as the emulator cuts them.
    while (w.n_tokens() < params_.block_tokens) {
        if (cursor_ == batch_.view.n_kv) {
            if (!next_batch(batch_, counters_.link_score_bytes)) break;
            const int64_t t0 = time_us();
            seg_scores_.resize(size_t(n_group) * size_t(batch_.view.n_kv));
            scorer_->score(batch_.view, batch_.rows, seg_scores_.data(), batch_.view.n_kv, threads_);
            counters_.t_kernel_us += uint64_t(time_us() - t0);
            counters_.tokens_scored += uint64_t(batch_.view.n_kv);
            cursor_ = 0;
        }
        const int64_t n = batch_.view.n_kv;
        for (; cursor_ < n && w.n_tokens() < params_.block_tokens; ++cursor_) {
            for (int g = 0; g < n_group; ++g) tuple[g] = score_to_f16(seg_scores_[size_t(g) * size_t(n) + size_t(cursor_)]);
            w.add(uint32_t(batch_.positions[cursor_]), tuple);
        }
    }
    if (w.n_tokens() == 0) {
        scorer_ = nullptr;
        return nullptr;
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
    const uint64_t key = key_of(pass);
    groups_.assign(pass.groups.begin(), pass.groups.end());
    read_pos_.assign(pass.positions.begin(), pass.positions.end());
    read_i_ = 0;
    all_gathered_ = false;
    miss_batch_ = kv_batch{};
    miss_j_ = 0;
    // The hint's rows are taken as its job reads them; the tokens it lacks are read by the fetcher's
    // thread from now on, beside it (two queues keep this disk busier than one).
    hint_ = job_cursor{};
    if (prefetch_ != nullptr) hint_ = job_cursor{prefetch_.get(), key, prefetch_->planned(key)};
    misses_.clear();
    std::set_difference(read_pos_.begin(), read_pos_.end(), hint_.pos.begin(), hint_.pos.end(), std::back_inserter(misses_));
    const int64_t n_fetched = fetch_->start(key, groups_, misses_);
    fetched_ = job_cursor{fetch_.get(), key, fetch_->planned(key)};
    // Misses beyond the fetcher's slot: read here, as they are reached.
    gather_->begin(groups_, std::span<const int32_t>(misses_).subspan(size_t(n_fetched)), true);
}

bool plain_ssd::from_job(job_cursor & c, int32_t t, bool can_wait, const uint8_t *& k, const uint8_t *& v, bool & stop) {
    while (c.j < c.pos.size() && c.pos[c.j] < t) ++c.j;
    if (c.j == c.pos.size() || c.pos[c.j] != t) return false;
    if (int64_t(c.j) >= c.ready) {
        if (!can_wait) {
            stop = true;
            return true;
        }
        const int64_t t0 = time_us();
        const prefetched * job = c.from->wait_rows(c.key, int64_t(c.j) + 1, c.ready);
        counters_.t_read_us += uint64_t(time_us() - t0);
        if (job == nullptr) {
            // The job failed: the rest of the pass is read here (a real fault is reported then).
            gather_->begin(groups_, std::span<const int32_t>(read_pos_).subspan(read_i_), true);
            all_gathered_ = true;
            miss_batch_ = kv_batch{};
            miss_j_ = 0;
            return false;
        }
        c.view = job->view;
    }
    const size_t rb = layout_.row_bytes();
    k = static_cast<const uint8_t *>(c.view.k) + c.j * rb;
    v = static_cast<const uint8_t *>(c.view.v) + c.j * rb;
    ++c.j;
    return true;
}

bool plain_ssd::merged_next(kv_batch & out) {
    if (read_i_ == read_pos_.size()) {
        const uint64_t bytes = release_jobs();
        forget_pass();
        charge(bytes, counters_.link_kv_bytes);
        return false;
    }
    const size_t rb = layout_.row_bytes();
    // The next rows in position order; the batch ends before a row not read yet (rather than waiting
    // for it) once it holds one, so that the host attends what is here while the rest is read.
    const size_t begin = read_i_;
    uint64_t hits = 0;
    for (; read_i_ < read_pos_.size() && read_i_ - begin < size_t(chunk_rows_); ++read_i_) {
        const int32_t t = read_pos_[read_i_];
        const bool can_wait = read_i_ == begin;
        const uint8_t *k = nullptr, *v = nullptr;
        bool stop = false;
        if (!all_gathered_ && from_job(hint_, t, can_wait, k, v, stop)) {
            hits += stop ? 0 : 1;
        } else if (all_gathered_ || !from_job(fetched_, t, can_wait, k, v, stop)) {
            if (miss_j_ == miss_batch_.view.n_kv) {
                if (!can_wait) break;
                const bool more = next_batch(miss_batch_, counters_.link_kv_bytes);
                HILL_ASSERT(more);  // the gather delivers every token left to it
                miss_j_ = 0;
            }
            HILL_ASSERT(miss_batch_.positions[miss_j_] == t);
            const size_t src = size_t(miss_batch_.rows != nullptr ? miss_batch_.rows[miss_j_] : miss_j_) * rb;
            k = static_cast<const uint8_t *>(miss_batch_.view.k) + src;
            v = static_cast<const uint8_t *>(miss_batch_.view.v) + src;
            ++miss_j_;
        }
        if (stop) break;
        const size_t row = read_i_ - begin;
        std::memcpy(merge_k_.data() + row * rb, k, rb);
        std::memcpy(merge_v_.data() + row * rb, v, rb);
    }
    counters_.prefetch_hits += hits;
    out.view = kv_view{layout_.type, merge_k_.data(), merge_v_.data(), int64_t(read_i_ - begin), layout_.n_embd_kv};
    out.rows = nullptr;
    out.positions = read_pos_.data() + begin;
    return true;
}

uint64_t plain_ssd::release_jobs() {
    uint64_t bytes = 0;
    if (hint_.from != nullptr) bytes += hint_.from->release(hint_.key);
    if (fetched_.from != nullptr) bytes += fetched_.from->release(fetched_.key);
    hint_ = fetched_ = job_cursor{};
    return bytes;
}

bool plain_ssd::read_next(kv_batch & out) {
    HILL_ASSERT(reading_);
    const bool more = merged_next(out);
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
    HILL_ASSERT(!reading_);  // a pass's hint job may not go under it (pages are freed between passes)
    if (prefetch_ != nullptr) count_untaken(prefetch_->drop_all());
}

void plain_ssd::cancel() {
    // Stops the pass's reads (the jobs, the gather's batch in flight) and forgets it.
    if (scorer_ != nullptr || reading_) ++counters_.n_cancelled;
    forget_pass();
}

void plain_ssd::forget_pass() {
    count_untaken(release_jobs());  // a pass that did not end: what its jobs read is still read
    if (gather_ != nullptr) gather_->end();
    scorer_ = nullptr;
    reading_ = false;
}

}  // namespace hill::csd
