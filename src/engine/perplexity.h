// Perplexity of a token sequence under the session's attention policy, in windows (as llama.cpp's
// perplexity tool cuts text): window w holds text tokens [w·(n_ctx−1), (w+1)·(n_ctx−1)); it starts a
// fresh sequence with BOS, and its tokens are evaluated one at a time, so every prediction is made
// by a decode step under the policy, exactly as in generation:
//     perplexity = exp( mean over the predicted tokens of −log p(token | BOS, the window before it) )
#pragma once

#include "engine/session.h"

#include <cstdint>
#include <functional>
#include <span>

namespace hill {

struct perplexity_result {
    double perplexity = 0.0;
    double sum_nll = 0.0;     // Σ −log p, natural log
    int64_t n_tokens = 0;     // predicted tokens
    int64_t n_windows = 0;    // windows scored completely
    int64_t n_windows_total = 0;  // windows the run was asked for
    bool interrupted = false;     // a step was abandoned on a stop request (see evaluate_perplexity)
};

// Windows of s.n_ctx() tokens (BOS + n_ctx − 1 text tokens) over `ids`, at most max_windows (0: all
// whole windows). after_token(result so far) is called after each predicted token; returning false
// stops there (the result covers the tokens predicted so far). A step that session::eval abandons on
// a stop request (hill::error with exit_code::interrupted: Ctrl-C while the storage device read the
// cold pool; the session rolls the step back) stops there too, with interrupted set. Errors: n_ctx <
// 2, no whole window (exit_code::usage); what else session::eval throws.
perplexity_result evaluate_perplexity(session & s, std::span<const int32_t> ids, int32_t bos, int64_t max_windows,
                                      const std::function<bool(const perplexity_result &)> & after_token = {});

// −log softmax(logits)[target], in double: logits f32 [n_vocab].
double token_nll(const float * logits, int32_t n_vocab, int32_t target);

}  // namespace hill
