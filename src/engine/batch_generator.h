// Generation for many prompts with continuous batching over a context's sequences (DESIGN.md §8;
// Orca, Yu et al., OSDI 2022): at most `parallel` sequences decode together, one step each per decode
// step of the batch; a sequence that finishes (EOS, its token budget, the context's end) leaves the
// batch at the step boundary, its KV is freed, and the next prompt is prefilled and joins. Every
// sequence has its own sampler (its own seed), so what a prompt generates does not depend on the
// others: with greedy sampling it is exactly what it generates alone (the step's kernels and its
// position-ordered attention are batch-invariant; sched/decode_step.h).
#pragma once

#include "engine/context.h"
#include "engine/sampler.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace hill {

struct generation_request {
    std::vector<int32_t> prompt;  // token ids, at least one
    int32_t n_predict = 128;      // tokens to generate at most (>= 0)
    sampler_params sampling;
};

struct generation_result {
    std::vector<int32_t> ids;     // the generated tokens (EOS not included)
    std::string stop;             // "eos", "length" (n_predict reached), "context" (n_ctx reached),
                                  // "interrupted", or "error" (see error)
    std::string error;            // the failure's message when stop == "error"
    int64_t prompt_tokens = 0;
    double prefill_s = 0.0;       // its prefill
    double decode_s = 0.0;        // wall time of the batch steps it took part in
    int64_t decode_steps = 0;     // steps it took part in (generated tokens after the first)
    int64_t max_batch = 0;        // the largest batch it decoded in
};

struct batch_progress {
    // Called on the owner thread after a request's token was sampled (streaming); may be empty.
    std::function<void(size_t request, int32_t token)> on_token;
    // Called when a request finished, in finishing order; may be empty.
    std::function<void(size_t request, const generation_result &)> on_done;
    // Polled between steps: true stops every request that is still running (stop "interrupted").
    std::function<bool()> stop_requested;
    // Prefill progress of one prompt (as context::prefill's).
    std::function<void(int64_t, int64_t)> on_prefill;
};

class batch_generator {
public:
    // parallel: the most sequences decoding at once (1 <= parallel <= ctx.n_seq()). eos: the EOS id
    // (-1: none).
    batch_generator(context & ctx, int parallel, int32_t eos);

    // Runs every request; results in request order. A request whose prompt is longer than the context
    // fails with stop "error" (the others go on); an error of a decode step (I/O, device) fails the
    // requests of that step and the batch goes on with the rest; exit_code::interrupted from a step
    // stops everything (stop "interrupted"). Asserted: each prompt is non-empty.
    std::vector<generation_result> run(std::span<const generation_request> requests, const batch_progress & cb = {});

    // Aggregate numbers of the last run.
    struct totals {
        int64_t steps = 0;            // batch decode steps
        int64_t tokens = 0;           // tokens decoded by them
        double decode_s = 0.0;        // their wall time
        double prefill_s = 0.0;
        int64_t prompt_tokens = 0;
        int64_t max_batch = 0;
    };
    const totals & last_totals() const { return totals_; }

private:
    context & ctx_;
    int parallel_;
    int32_t eos_;
    totals totals_;
};

}  // namespace hill
