#include "engine/batch_generator.h"

#include "core/error.h"
#include "core/sys_info.h"

#include <algorithm>
#include <memory>

namespace hill {

batch_generator::batch_generator(context & ctx, int parallel, int32_t eos) : ctx_(ctx), parallel_(parallel), eos_(eos) {
    HILL_ASSERT(parallel >= 1 && parallel <= ctx.n_seq());
}

std::vector<generation_result> batch_generator::run(std::span<const generation_request> requests,
                                                    const batch_progress & cb) {
    totals_ = totals{};
    const int32_t n_vocab = ctx_.model().hp().n_vocab;
    std::vector<generation_result> results(requests.size());
    struct running {
        size_t request = 0;
        int seq = 0;
        std::unique_ptr<sampler> smp;
        int32_t last = 0;  // the token to decode next
    };
    std::vector<running> active;
    std::vector<int> free_seqs;
    for (int s = ctx_.n_seq(); s-- > 0;) {
        if (ctx_.n_past(s) == 0) free_seqs.push_back(s);
    }
    HILL_ASSERT(int(free_seqs.size()) >= parallel_);
    std::vector<float> logits;
    std::vector<int> seqs;
    std::vector<int32_t> tokens;
    bool stopping = false;

    const auto finish = [&](running & r, const std::string & stop, const std::string & error = {}) {
        generation_result & res = results[r.request];
        res.stop = stop;
        res.error = error;
        ctx_.release(r.seq);  // frees its KV in every tier
        free_seqs.push_back(r.seq);
        if (cb.on_done) cb.on_done(r.request, res);
    };
    // Samples the request's next token from logits f32 [n_vocab]; false when the request finished.
    const auto next_token = [&](running & r, float * l) -> bool {
        generation_result & res = results[r.request];
        const generation_request & req = requests[r.request];
        if (int64_t(res.ids.size()) >= req.n_predict) {
            finish(r, "length");
            return false;
        }
        const int32_t id = r.smp->sample(l);
        if (id == eos_) {
            finish(r, "eos");
            return false;
        }
        r.smp->accept(id);
        res.ids.push_back(id);
        if (cb.on_token) cb.on_token(r.request, id);
        if (int64_t(res.ids.size()) >= req.n_predict) {
            finish(r, "length");
            return false;
        }
        if (ctx_.n_past(r.seq) >= ctx_.n_ctx()) {
            finish(r, "context");
            return false;
        }
        r.last = id;
        return true;
    };

    size_t next_request = 0;
    for (;;) {
        if (!stopping && cb.stop_requested && cb.stop_requested()) stopping = true;
        // Join: prefill waiting prompts while there is room in the batch.
        while (!stopping && int(active.size()) < parallel_ && next_request < requests.size()) {
            const size_t i = next_request++;
            const generation_request & req = requests[i];
            generation_result & res = results[i];
            HILL_ASSERT(!req.prompt.empty());
            res.prompt_tokens = int64_t(req.prompt.size());
            if (res.prompt_tokens > ctx_.n_ctx()) {
                res.stop = "error";
                res.error = fmt::format("the prompt is {} tokens, longer than the context of {} tokens", res.prompt_tokens,
                                        ctx_.n_ctx());
                if (cb.on_done) cb.on_done(i, res);
                continue;
            }
            running r;
            r.request = i;
            r.seq = free_seqs.back();
            free_seqs.pop_back();
            r.smp = std::make_unique<sampler>(req.sampling, n_vocab);
            for (const int32_t id : req.prompt) r.smp->accept(id);
            logits.resize(size_t(n_vocab));
            const int64_t t0 = time_us();
            try {
                ctx_.prefill(r.seq, req.prompt, false, logits.data(), cb.on_prefill);
            } catch (const error & e) {
                res.prefill_s = double(time_us() - t0) / 1e6;
                free_seqs.push_back(r.seq);
                if (e.code() == exit_code::interrupted) {
                    res.stop = "interrupted";
                    stopping = true;
                } else {
                    res.stop = "error";
                    res.error = e.what();
                }
                if (cb.on_done) cb.on_done(i, res);
                continue;
            }
            res.prefill_s = double(time_us() - t0) / 1e6;
            totals_.prefill_s += res.prefill_s;
            totals_.prompt_tokens += res.prompt_tokens;
            if (next_token(r, logits.data())) active.push_back(std::move(r));
        }
        if (stopping) {
            for (running & r : active) finish(r, "interrupted");
            active.clear();
            for (; next_request < requests.size(); ++next_request) results[next_request].stop = "interrupted";
            break;
        }
        if (active.empty()) {
            if (next_request >= requests.size()) break;
            continue;
        }
        // One decode step of the batch.
        seqs.clear();
        tokens.clear();
        for (const running & r : active) {
            seqs.push_back(r.seq);
            tokens.push_back(r.last);
        }
        logits.resize(active.size() * size_t(n_vocab));
        const int64_t t0 = time_us();
        try {
            ctx_.decode(seqs, tokens, logits.data());
        } catch (const error & e) {
            if (e.code() == exit_code::interrupted) {
                stopping = true;
                continue;
            }
            // The step changed nothing; its requests fail, the others (waiting) go on.
            for (running & r : active) finish(r, "error", e.what());
            active.clear();
            continue;
        }
        const double dt = double(time_us() - t0) / 1e6;
        ++totals_.steps;
        totals_.tokens += int64_t(active.size());
        totals_.decode_s += dt;
        totals_.max_batch = std::max<int64_t>(totals_.max_batch, int64_t(active.size()));
        size_t keep = 0;  // the sequences that go on, compacted in place
        const auto n_batch = int64_t(active.size());
        for (size_t b = 0; b < active.size(); ++b) {
            running & r = active[b];
            generation_result & res = results[r.request];
            res.decode_s += dt;
            ++res.decode_steps;
            res.max_batch = std::max(res.max_batch, n_batch);
            if (next_token(r, logits.data() + b * size_t(n_vocab))) {
                if (keep != b) active[keep] = std::move(r);
                ++keep;
            }
        }
        active.resize(keep);
    }
    return results;
}

}  // namespace hill
