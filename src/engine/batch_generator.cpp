#include "engine/batch_generator.h"

#include "core/error.h"
#include "core/sys_info.h"

#include <algorithm>

namespace hill {

batch_generator::batch_generator(context & ctx, int parallel, int32_t eos, int32_t prefill_chunk, bool reuse_prefix)
    : ctx_(ctx), parallel_(parallel), eos_(eos), prefill_chunk_(prefill_chunk),
      seq_tokens_(size_t(ctx.n_seq())), seq_used_(size_t(ctx.n_seq()), 0), reuse_prefix_(reuse_prefix) {
    HILL_ASSERT(parallel >= 1 && parallel <= ctx.n_seq());
    HILL_ASSERT(prefill_chunk >= 0);
    for (int s = ctx_.n_seq(); s-- > 0;) {
        if (ctx_.n_past(s) == 0) free_seqs_.push_back(s);
    }
    HILL_ASSERT(int(free_seqs_.size()) >= parallel_);
}

size_t batch_generator::submit(generation_request req) {
    HILL_ASSERT(!req.prompt.empty());
    running r;
    r.id = next_id_++;
    r.res.prompt_tokens = int64_t(req.prompt.size());
    r.req = std::move(req);
    waiting_.push_back(std::move(r));
    return waiting_.back().id;
}

void batch_generator::finish(running & r, const std::string & stop, const batch_progress & cb, const std::string & error) {
    r.res.stop = stop;
    r.res.error = error;
    if (r.seq >= 0) {
        const size_t s = size_t(r.seq);
        seq_tokens_[s].clear();
        const bool whole = stop == "eos" || stop == "length" || stop == "context" || stop == "stop";
        if (whole && (reuse_prefix_ || disk_)) {
            // Kept for a prompt with the same prefix: the tokens whose KV is in (the last sampled one is not).
            seq_tokens_[s] = r.req.prompt;
            seq_tokens_[s].insert(seq_tokens_[s].end(), r.res.ids.begin(), r.res.ids.end());
            seq_tokens_[s].resize(size_t(ctx_.n_past(r.seq)));
        }
        if (whole && !reuse_prefix_) {
            save_to_disk(r.seq);
            seq_tokens_[s].clear();
        }
        if (seq_tokens_[s].empty() && ctx_.n_past(r.seq) > 0) {
            ctx_.release(r.seq);  // frees its KV in every tier
        }
        seq_used_[s] = ++n_released_;
        free_seqs_.push_back(r.seq);
        r.seq = -1;
    }
    if (cb.on_done) cb.on_done(r.id, r.res);
}

void batch_generator::cancel(size_t id, const std::string & stop, const batch_progress & cb) {
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
        if (it->id == id) {
            running r = std::move(*it);
            waiting_.erase(it);
            finish(r, stop, cb);
            return;
        }
    }
    for (const auto & r : running_) {
        if (r->id == id && r->cancel.empty()) r->cancel = stop;
    }
}

int64_t batch_generator::n_kept_tokens() const {
    int64_t n = 0;
    for (const int s : free_seqs_) n += ctx_.n_past(s);
    return n;
}

void batch_generator::take_sequence(running & r) {
    HILL_ASSERT(!free_seqs_.empty());
    size_t best = free_seqs_.size() - 1;  // without reuse: the last freed
    if (reuse_prefix_) {
        // The longest shared prefix (at most all but the last prompt token: its logits are needed), then the
        // least recently used.
        int64_t best_n = -1;
        const std::vector<int32_t> & p = r.req.prompt;
        for (size_t i = 0; i < free_seqs_.size(); ++i) {
            const std::vector<int32_t> & t = seq_tokens_[size_t(free_seqs_[i])];
            const size_t lim = std::min(t.size(), p.size() - 1);
            const auto n = int64_t(std::mismatch(t.begin(), t.begin() + ptrdiff_t(lim), p.begin()).first - t.begin());
            if (n > best_n || (n == best_n && seq_used_[size_t(free_seqs_[i])] < seq_used_[size_t(free_seqs_[best])])) {
                best_n = n;
                best = i;
            }
        }
    }
    r.seq = free_seqs_[best];
    free_seqs_.erase(free_seqs_.begin() + ptrdiff_t(best));
    std::vector<int32_t> & t = seq_tokens_[size_t(r.seq)];
    const std::vector<int32_t> & p = r.req.prompt;
    const size_t lim = std::min(t.size(), p.size() - 1);
    auto n_keep = int64_t(std::mismatch(t.begin(), t.begin() + ptrdiff_t(lim), p.begin()).first - t.begin());
    // Looked up (and marked used) before the save below, which may evict.
    const int64_t n_disk = disk_ ? disk_->longest_prefix(p, true) : 0;
    // What is dropped stays on disk, unless it is only the tail of a conversation that continues here
    // (the next turn's prompt retokenizes the end of the last reply): at least a quarter is dropped.
    if ((int64_t(t.size()) - n_keep) * 4 >= int64_t(t.size()) && int64_t(t.size()) > n_keep) save_to_disk(r.seq);
    t.clear();
    // A longer prefix on disk: the sequence starts over from it.
    if (n_disk > n_keep) {
        if (ctx_.n_past(r.seq) > 0) ctx_.release(r.seq);
        n_keep = disk_->load(ctx_, r.seq, p);
        r.res.disk_tokens = n_keep;
    }
    if (ctx_.n_past(r.seq) > n_keep) {
        try {
            if (n_keep > 0) {
                ctx_.truncate(r.seq, n_keep);
            } else {
                ctx_.release(r.seq);
            }
        } catch (const error &) {
            ctx_.release(r.seq);  // a failed read of the kept KV: start over
        }
    }
    r.n_prefilled = ctx_.n_past(r.seq);
    r.res.reused_tokens = r.n_prefilled;
}

void batch_generator::save_to_disk(int seq) {
    const std::vector<int32_t> & t = seq_tokens_[size_t(seq)];
    if (!disk_ || t.empty() || ctx_.n_dropped_cells(seq) > 0) return;
    HILL_ASSERT(int64_t(t.size()) == ctx_.n_past(seq));
    disk_->save(ctx_, seq, t);
}

void batch_generator::save_kept() {
    for (const int s : free_seqs_) save_to_disk(s);
}

bool batch_generator::next_token(running & r, float * l, const batch_progress & cb) {
    generation_result & res = r.res;
    if (int64_t(res.ids.size()) >= r.req.n_predict) {
        finish(r, "length", cb);
        return false;
    }
    const int32_t id = r.smp->sample(l);
    const bool stop_token = r.req.stop_tokens.empty()
                                ? id == eos_
                                : std::find(r.req.stop_tokens.begin(), r.req.stop_tokens.end(), id) != r.req.stop_tokens.end();
    if (stop_token) {
        finish(r, "eos", cb);
        return false;
    }
    r.smp->accept(id);
    res.ids.push_back(id);
    if (cb.on_token) cb.on_token(r.id, id);
    if (!r.cancel.empty()) {
        finish(r, r.cancel, cb);
        return false;
    }
    if (int64_t(res.ids.size()) >= r.req.n_predict) {
        finish(r, "length", cb);
        return false;
    }
    if (ctx_.n_past(r.seq) >= ctx_.n_ctx()) {
        finish(r, "context", cb);
        return false;
    }
    r.last = id;
    return true;
}

bool batch_generator::prefill_chunk(running & r, const batch_progress & cb) {
    const int64_t n_prompt = int64_t(r.req.prompt.size());
    const int64_t n = prefill_chunk_ > 0 ? std::min<int64_t>(prefill_chunk_, n_prompt - r.n_prefilled) : n_prompt - r.n_prefilled;
    const bool last = r.n_prefilled + n == n_prompt;
    const int32_t n_vocab = ctx_.model().hp().n_vocab;
    logits_.resize(size_t(n_vocab));
    const int64_t t0 = time_us();
    try {
        ctx_.prefill(r.seq, std::span<const int32_t>(r.req.prompt).subspan(size_t(r.n_prefilled), size_t(n)), false,
                     last ? logits_.data() : nullptr, cb.on_prefill);
    } catch (const error & e) {
        r.res.prefill_s += double(time_us() - t0) / 1e6;
        if (e.code() == exit_code::interrupted) {
            finish(r, "interrupted", cb);
            throw;
        }
        finish(r, "error", cb, e.what());
        return false;
    }
    const double dt = double(time_us() - t0) / 1e6;
    r.res.prefill_s += dt;
    totals_.prefill_s += dt;
    r.n_prefilled += n;
    if (!last) return true;
    totals_.prompt_tokens += n_prompt - r.res.reused_tokens;
    r.decoding = true;
    return next_token(r, logits_.data(), cb);
}

bool batch_generator::step(const batch_progress & cb) {
    if (idle()) return false;
    const int64_t t_step0 = time_us();
    const int32_t n_vocab = ctx_.model().hp().n_vocab;
    // Cancelled requests leave at the step boundary.
    for (auto & r : running_) {
        if (!r->cancel.empty()) finish(*r, r->cancel, cb);
    }
    std::erase_if(running_, [](const std::unique_ptr<running> & r) { return r->seq < 0; });
    // Join: waiting requests take free sequences (with prefill_chunk 0, each prefilled in full at once).
    while (int(running_.size()) < parallel_ && !waiting_.empty()) {
        auto r = std::make_unique<running>(std::move(waiting_.front()));
        waiting_.pop_front();
        if (r->res.prompt_tokens > ctx_.n_ctx()) {
            finish(*r, "error", cb,
                   fmt::format("the prompt is {} tokens, longer than the context of {} tokens", r->res.prompt_tokens,
                               ctx_.n_ctx()));
            continue;
        }
        take_sequence(*r);
        r->smp = std::make_unique<sampler>(r->req.sampling, n_vocab);
        for (const int32_t id : r->req.prompt) r->smp->accept(id);
        running_.push_back(std::move(r));
        if (prefill_chunk_ == 0) {
            try {
                prefill_chunk(*running_.back(), cb);
            } catch (const error &) {
                running_.pop_back();
                throw;
            }
            if (running_.back()->seq < 0) running_.pop_back();
        }
    }
    // One chunk of the first request still prefilling.
    if (prefill_chunk_ > 0) {
        const auto it = std::find_if(running_.begin(), running_.end(), [](const auto & r) { return !r->decoding; });
        if (it != running_.end()) {
            try {
                prefill_chunk(**it, cb);
            } catch (const error &) {
                running_.erase(it);
                throw;
            }
            if ((*it)->seq < 0) running_.erase(it);
        }
    }
    // One decode step of the batch.
    seqs_.clear();
    tokens_.clear();
    const step_stats & st = ctx_.decode_stats();
    for (const auto & r : running_) {
        if (!r->decoding) continue;
        seqs_.push_back(r->seq);
        tokens_.push_back(r->last);
        r->seq_context0 = st.seq_context[size_t(r->seq)];
        r->seq_attended0 = st.seq_attended[size_t(r->seq)];
    }
    if (!seqs_.empty()) {
        logits_.resize(seqs_.size() * size_t(n_vocab));
        const int64_t t0 = time_us();
        try {
            ctx_.decode(seqs_, tokens_, logits_.data());
        } catch (const error & e) {
            // The step changed nothing; its requests fail (or are interrupted), the others go on.
            const bool interrupt = e.code() == exit_code::interrupted;
            for (auto & r : running_) {
                if (r->decoding) finish(*r, interrupt ? "interrupted" : "error", cb, interrupt ? std::string() : e.what());
            }
            std::erase_if(running_, [](const std::unique_ptr<running> & r) { return r->seq < 0; });
            if (interrupt) throw;
            return true;
        }
        const double dt = double(time_us() - t0) / 1e6;
        const auto n_batch = int64_t(seqs_.size());
        ++totals_.steps;
        totals_.tokens += n_batch;
        totals_.decode_s += dt;
        totals_.max_batch = std::max(totals_.max_batch, n_batch);
        size_t b = 0;
        for (auto & r : running_) {
            if (!r->decoding) continue;
            r->res.decode_s += dt;
            ++r->res.decode_steps;
            r->res.max_batch = std::max(r->res.max_batch, n_batch);
            r->res.n_context += st.seq_context[size_t(r->seq)] - r->seq_context0;
            r->res.n_attended += st.seq_attended[size_t(r->seq)] - r->seq_attended0;
            next_token(*r, logits_.data() + b * size_t(n_vocab), cb);
            ++b;
        }
        std::erase_if(running_, [](const std::unique_ptr<running> & r) { return r->seq < 0; });
    }
    totals_.last_step_s = double(time_us() - t_step0) / 1e6;
    totals_.max_step_s = std::max(totals_.max_step_s, totals_.last_step_s);
    return true;
}

void batch_generator::stop_all(const std::string & stop, const batch_progress & cb) {
    for (auto & r : running_) finish(*r, stop, cb);
    running_.clear();
    while (!waiting_.empty()) {
        running r = std::move(waiting_.front());
        waiting_.pop_front();
        finish(r, stop, cb);
    }
}

std::vector<generation_result> batch_generator::run(std::span<const generation_request> requests,
                                                    const batch_progress & cb) {
    HILL_ASSERT(idle());
    totals_ = totals{};
    std::vector<generation_result> results(requests.size());
    const size_t id0 = next_id_;
    for (const generation_request & req : requests) submit(req);
    batch_progress inner = cb;
    inner.on_token = cb.on_token ? [&](size_t id, int32_t t) { cb.on_token(id - id0, t); } : std::function<void(size_t, int32_t)>();
    inner.on_done = [&](size_t id, const generation_result & res) {
        results[id - id0] = res;
        if (cb.on_done) cb.on_done(id - id0, res);
    };
    for (;;) {
        if (cb.stop_requested && cb.stop_requested()) {
            stop_all("interrupted", inner);
            break;
        }
        try {
            if (!step(inner)) break;
        } catch (const error & e) {
            if (e.code() != exit_code::interrupted) throw;
            stop_all("interrupted", inner);
            break;
        }
    }
    return results;
}

}  // namespace hill
