#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/sys_info.h"

namespace hill {

double token_nll(const float * logits, int32_t n_vocab, int32_t target) {
    const float m = *std::max_element(logits, logits + n_vocab);
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i] - m));
    return std::log(sum) - double(logits[target] - m);
}

perplexity_result evaluate_perplexity(session & s, std::span<const int32_t> ids, int32_t bos, int64_t max_windows,
                                      const std::function<bool(const perplexity_result &)> & after_token) {
    const int64_t per_window = int64_t(s.n_ctx()) - 1;
    if (per_window < 1) fail_usage("perplexity needs a context of at least 2 tokens, got {}", s.n_ctx());
    int64_t n_windows = int64_t(ids.size()) / per_window;
    if (max_windows > 0) n_windows = std::min(n_windows, max_windows);
    if (n_windows == 0) {
        fail_usage("the text is {}, fewer than one window of {} (the context of {} minus BOS)",
                   format_count(int64_t(ids.size()), "token"), per_window, s.n_ctx());
    }
    const int32_t n_vocab = s.model().hp().n_vocab;
    perplexity_result r;
    r.n_windows_total = n_windows;
    for (int64_t w = 0; w < n_windows; ++w) {
        s.truncate(0);
        int32_t prev = bos;
        for (int64_t i = 0; i < per_window; ++i) {
            try {
                s.eval(std::span<const int32_t>(&prev, 1));
            } catch (const error & e) {
                if (e.code() != exit_code::interrupted) throw;
                r.interrupted = true;  // the tokens predicted so far are scored; this one is not
                return r;
            }
            prev = ids[size_t(w * per_window + i)];
            r.sum_nll += token_nll(s.logits(), n_vocab, prev);
            ++r.n_tokens;
            r.n_windows = w + (i + 1 == per_window ? 1 : 0);
            r.perplexity = std::exp(r.sum_nll / double(r.n_tokens));
            if (after_token && !after_token(r)) return r;
        }
    }
    return r;
}
}  // namespace hill
