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
        seg_scores_.resize(size_t(n_group_) * size_t(n_ctx));
        topk_.reserve(size_t(n_group_));
        for (int g = 0; g < n_group_; ++g) topk_.emplace_back(n_top_for(p.alpha, n_ctx));
    }
    sel_.resize(size_t(n_group_));
    for (auto & v : sel_) v.reserve(size_t(n_ctx));
    disk_.reserve(size_t(n_ctx));
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

void selection_policy::score_and_select(int il, const float * q, kv_store & kv, csd::device & storage,
                                        int64_t n_top) {
    const int64_t n = kv.n_tokens(il);
    const auto [s_end, w_begin] = middle_of(n, params_.n_sinks, params_.n_window);
    for (running_topk & t : topk_) t.begin(n_top);
    int64_t t0 = time_us();
    scorer_->prepare_query(q);
    device_pass_guard guard(storage);
    storage.score_begin(il, *scorer_);
    // The host's share, while the device works: the tokens in memory.
    kv.for_each_segment(il, [&](const kv_view & view, const int32_t * rows, const int32_t * tokens) {
        scorer_->score(view, rows, seg_scores_.data(), view.n_kv, pool_);
        for (int g = 0; g < n_group_; ++g) {
            const float * src = seg_scores_.data() + size_t(g) * size_t(view.n_kv);
            running_topk & top = topk_[size_t(g)];
            for (int64_t j = 0; j < view.n_kv; ++j) {
                if (tokens[j] >= s_end && tokens[j] < w_begin) top.push(round_score_f16(src[j]), tokens[j]);
            }
        }
    }, kv_part::k, kv_scope::in_memory);
    int64_t t1 = time_us();
    stats_.t_score_us += uint64_t(t1 - t0);
    // The device's blocks, merged as they arrive.
    storage.score_drain([&](const csd::score_block_view & block) {
        HILL_ASSERT(block.n_group() == n_group_);
        for (int64_t j = 0; j < block.n_tokens(); ++j) {
            const auto t = int32_t(block.position(j));
            if (t < s_end || t >= w_begin) continue;
            for (int g = 0; g < n_group_; ++g) topk_[size_t(g)].push(block.score(j, g), t);
        }
    });
    guard.done();
    t0 = time_us();
    stats_.t_drain_us += uint64_t(t0 - t1);
    for (int g = 0; g < n_group_; ++g) {
        std::vector<int32_t> & out = sel_[size_t(g)];
        out.clear();
        for (int64_t i = 0; i < s_end; ++i) out.push_back(int32_t(i));
        topk_[size_t(g)].finish(out);
        for (int64_t i = w_begin; i < n; ++i) out.push_back(int32_t(i));
    }
    stats_.t_select_us += uint64_t(time_us() - t0);
}

void selection_policy::gather_and_attend(int il, const float * q, kv_store & kv, csd::device & storage,
                                         device_tier & dev, float * out) {
    const std::vector<int32_t> * chosen = &sel_[0];
    if (n_group_ > 1) {
        // One gather of the union; each KV head's query heads attend to the rows of their own set.
        union_.clear();
        for (int g = 0; g < n_group_; ++g) {
            for (const int32_t t : sel_[size_t(g)]) member_[size_t(t)] |= uint64_t(1) << g;
        }
        for (int64_t t = 0; t < kv.n_tokens(il); ++t) {
            if (member_[size_t(t)] != 0) union_.push_back(int32_t(t));
        }
        chosen = &union_;
    }
    auto attend_segment = [&](const kv_view & view, const int32_t * rows, const int32_t * tokens) {
        if (n_group_ == 1) {
            dev.attend(view, rows);
            return;
        }
        for (int g = 0; g < n_group_; ++g) {
            rows_g_.clear();
            for (int64_t j = 0; j < view.n_kv; ++j) {
                if ((member_[size_t(tokens[j])] >> g) & 1) rows_g_.push_back(rows != nullptr ? rows[j] : int32_t(j));
            }
            kv_view part = view;
            part.n_kv = int64_t(rows_g_.size());
            dev.attend(part, rows_g_.data(), no_causal_mask, g);
        }
    };
    disk_.clear();
    for (const int32_t t : *chosen) {
        if (kv.on_disk(il, t)) disk_.push_back(t);
    }
    dev.begin(shape_, q, 1);
    device_pass_guard guard(storage);
    if (!disk_.empty()) storage.read_begin(il, disk_);  // the device reads while the host attends to its own
    kv.for_each_segment_of(il, *chosen, attend_segment, kv_part::k_and_v, kv_scope::in_memory);
    if (!disk_.empty()) storage.read_drain(attend_segment);
    guard.done();
    dev.end(out);
    if (n_group_ > 1) {
        for (const int32_t t : union_) member_[size_t(t)] = 0;
    }
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

void selection_policy::attend(int il, const float * q, kv_store & kv, csd::device & storage, device_tier & dev,
                              float * out) {
    const int64_t n = kv.n_tokens(il);
    const bool scored = params_.kind == policy_kind::hillinfer;
    const int64_t n_top = scored ? n_top_for(params_.alpha, n) : 0;
    const auto [s_end, w_begin] = middle_of(n, params_.n_sinks, params_.n_window);
    if (scored && n_top < w_begin - s_end) {
        score_and_select(il, q, kv, storage, n_top);
    } else {
        // Nothing to rank: streaming, or ⌈α·N⌉ covers the whole middle.
        const int64_t t0 = time_us();
        for (int g = 0; g < n_group_; ++g) {
            selector_.select(nullptr, n, n_top, params_.n_sinks, params_.n_window, sel_[size_t(g)]);
        }
        stats_.t_select_us += uint64_t(time_us() - t0);
    }
    const int64_t t0 = time_us();
    gather_and_attend(il, q, kv, storage, dev, out);
    const int64_t t1 = time_us();
    stats_.t_attend_us += uint64_t(t1 - t0);

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
        stats_.t_diag_us += uint64_t(time_us() - t1);
    }
}

}  // namespace hill
