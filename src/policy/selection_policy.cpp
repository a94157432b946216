#include "policy/selection_policy.h"

#include "core/error.h"
#include "core/sys_info.h"

#include <algorithm>

namespace hill {

selection_policy::selection_policy(const policy_params & p, const attention_shape & s, int n_layer, int64_t n_ctx,
                                   thread_pool & pool)
    : params_(p), shape_(s), n_ctx_(n_ctx), pool_(pool), selector_(n_ctx) {
    HILL_ASSERT(p.kind == policy_kind::hillinfer || p.kind == policy_kind::streaming);
    stats_.layers.resize(size_t(n_layer));
    const bool per_kv_head = p.kind == policy_kind::hillinfer && p.score.granularity == select_granularity::kv_head;
    n_group_ = per_kv_head ? s.n_head_kv : 1;
    if (per_kv_head && s.n_head_kv > 64) fail_usage("--select kv_head takes at most 64 KV heads, the model has {}", s.n_head_kv);
    if (p.kind == policy_kind::hillinfer) {
        scorer_ = std::make_unique<host_scorer>(s, p.score, pool.n_threads());
        HILL_ASSERT(scorer_->n_group() == n_group_);
        scores_.resize(size_t(n_group_) * size_t(n_ctx));
        seg_scores_.resize(size_t(n_group_) * size_t(n_ctx));
    }
    sel_.resize(size_t(n_group_));
    for (auto & v : sel_) v.reserve(size_t(n_ctx));
    if (per_kv_head) {
        member_.assign(size_t(n_ctx), 0);
        union_.reserve(size_t(n_ctx));
        rows_g_.reserve(size_t(n_ctx));
    }
    if (p.diag) {
        recall_ = std::make_unique<attention_recall>(s, n_ctx);
        prev_.resize(size_t(n_layer));
    }
}

void selection_policy::score(int il, const float * q, kv_store & kv) {
    scorer_->prepare_query(q);
    kv.for_each_segment(il, [&](const kv_view & view, const int32_t * rows, const int32_t * tokens) {
        scorer_->score(view, rows, seg_scores_.data(), view.n_kv, pool_);
        for (int g = 0; g < n_group_; ++g) {
            float * dst = scores_.data() + size_t(g) * size_t(n_ctx_);
            const float * src = seg_scores_.data() + size_t(g) * size_t(view.n_kv);
            for (int64_t j = 0; j < view.n_kv; ++j) dst[tokens[j]] = src[j];
        }
    }, kv_part::k);
}

void selection_policy::gather_and_attend(int il, const float * q, kv_store & kv, device_tier & dev, float * out) {
    dev.begin(shape_, q, 1);
    if (n_group_ == 1) {
        kv.for_each_segment_of(il, sel_[0], [&](const kv_view & view, const int32_t * rows, const int32_t *) {
            dev.attend(view, rows);
        });
    } else {
        // One gather of the union; each KV head's query heads attend to the rows of their own set.
        union_.clear();
        for (int g = 0; g < n_group_; ++g) {
            for (const int32_t t : sel_[size_t(g)]) member_[size_t(t)] |= uint64_t(1) << g;
        }
        for (int64_t t = 0; t < kv.n_tokens(il); ++t) {
            if (member_[size_t(t)] != 0) union_.push_back(int32_t(t));
        }
        kv.for_each_segment_of(il, union_, [&](const kv_view & view, const int32_t * rows, const int32_t * tokens) {
            for (int g = 0; g < n_group_; ++g) {
                rows_g_.clear();
                for (int64_t j = 0; j < view.n_kv; ++j) {
                    if ((member_[size_t(tokens[j])] >> g) & 1) rows_g_.push_back(rows[j]);
                }
                kv_view part = view;
                part.n_kv = int64_t(rows_g_.size());
                dev.attend(part, rows_g_.data(), no_causal_mask, g);
            }
        });
        for (const int32_t t : union_) member_[size_t(t)] = 0;
    }
    dev.end(out);
}

void selection_policy::measure(int il, const float * q, kv_store & kv) {
    policy_layer_stats & L = stats_.layers[size_t(il)];
    recall_->begin(q, kv.n_tokens(il));
    kv.for_each_segment(il, [&](const kv_view & view, const int32_t * rows, const int32_t * tokens) {
        recall_->add(view, rows, tokens);
    }, kv_part::k);
    L.recall_sum += recall_->recall(sel_);
    const std::vector<int32_t> & now = n_group_ == 1 ? sel_[0] : union_;
    std::vector<int32_t> & prev = prev_[size_t(il)];
    if (!prev.empty() && !now.empty()) {
        int64_t common = 0;
        auto a = prev.cbegin();
        auto b = now.cbegin();
        while (a != prev.cend() && b != now.cend()) {
            if (*a < *b) {
                ++a;
            } else if (*b < *a) {
                ++b;
            } else {
                ++common, ++a, ++b;
            }
        }
        L.overlap_sum += double(common) / double(now.size());
        ++L.n_overlap;
    }
    prev.assign(now.begin(), now.end());
}

void selection_policy::attend(int il, const float * q, kv_store & kv, device_tier & dev, float * out) {
    const int64_t n = kv.n_tokens(il);
    int64_t t = time_us();
    auto lap = [&t](uint64_t & acc) {
        const int64_t now = time_us();
        acc += uint64_t(now - t);
        t = now;
    };
    const bool scored = params_.kind == policy_kind::hillinfer;
    const int64_t n_top = scored ? n_top_for(params_.alpha, n) : 0;
    if (scored) {
        score(il, q, kv);
        lap(stats_.t_score_us);
    }
    for (int g = 0; g < n_group_; ++g) {
        selector_.select(scored ? scores_.data() + size_t(g) * size_t(n_ctx_) : nullptr, n, n_top, params_.n_sinks,
                         params_.n_window, sel_[size_t(g)]);
    }
    lap(stats_.t_select_us);
    gather_and_attend(il, q, kv, dev, out);
    lap(stats_.t_attend_us);

    const std::vector<int32_t> & chosen = n_group_ == 1 ? sel_[0] : union_;
    policy_layer_stats & L = stats_.layers[size_t(il)];
    ++L.n_steps;
    L.n_context += uint64_t(n);
    L.n_attended += chosen.size();
    for (const int32_t tok : chosen) {
        kv.hits().hit(il, tok);
        if (kv.where(il, tok).tier == kv_tier::hot) ++L.n_attended_hot;
    }
    if (params_.diag) {
        measure(il, q, kv);
        lap(stats_.t_diag_us);
    }
}

}  // namespace hill
