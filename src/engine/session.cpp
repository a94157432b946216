#include "engine/session.h"

#include "core/error.h"

namespace hill {

session::session(const hill::model & m, const context_params & p, thread_pool & pool)
    : ctx_(m, p, pool), logits_(size_t(m.hp().n_vocab)) {
    HILL_ASSERT(p.n_seq == 1);
}

void session::eval(std::span<const int32_t> tokens, bool logits_all,
                   const std::function<void(double, double)> & progress) {
    const int64_t n = int64_t(tokens.size());
    if (n == 0) return;
    const size_t n_vocab = size_t(ctx_.model().hp().n_vocab);
    logits_.resize(logits_all ? size_t(n) * n_vocab : n_vocab);
    if (n == 1) {
        const int seq = 0;
        ctx_.decode(std::span<const int>(&seq, 1), tokens, logits_.data());
    } else {
        ctx_.prefill(0, tokens, logits_all, logits_.data(), progress);
    }
}

}  // namespace hill
