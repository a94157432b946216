// One sequence run through a model: a context (engine/context.h) of one sequence, with the
// convenience of llama.cpp's single-sequence API — eval() prefills a prompt (layer-major) or decodes
// one token (a decode step under the policy), and logits() holds the result. Batches of sequences
// use the context directly (engine/batch_generator.h).
#pragma once

#include "engine/context.h"

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace hill {

class session {
public:
    // p.n_seq must be 1 (asserted). Errors: as context's.
    session(const hill::model & m, const context_params & p, thread_pool & pool);

    // Runs `tokens` at positions [n_past(), n_past() + n): a prefill when n > 1, a decode step when
    // n == 1. When logits_all, logits() holds f32 [n, n_vocab] (one row per token); otherwise f32
    // [n_vocab] for the last token. progress(done, total): as context::prefill calls it
    // (work, not tokens). Errors: as context::prefill and context::decode (the session stays at its old
    // n_past).
    void eval(std::span<const int32_t> tokens, bool logits_all = false,
              const std::function<void(double, double)> & progress = {});

    const float * logits() const { return logits_.data(); }
    int64_t n_past() const { return ctx_.n_past(0); }
    int32_t n_ctx() const { return ctx_.n_ctx(); }
    const hill::model & model() const { return ctx_.model(); }
    context & ctx() { return ctx_; }
    const context & ctx() const { return ctx_; }
    // Replaces the decode policy (context::set_policy); one prefill can be decoded under several
    // policies (truncate back to the prompt in between).
    void set_policy(const policy_params & p) { ctx_.set_policy(p); }
    const hill::policy & policy() const { return ctx_.policy(); }
    // Forgets tokens from position n on (context::truncate).
    void truncate(int64_t n) { ctx_.truncate(0, n); }

private:
    context ctx_;
    std::vector<float> logits_;  // f32 [1 or n, n_vocab]
};

}  // namespace hill
