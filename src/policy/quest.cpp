// Policy `quest` (Quest, Tang et al., "Quest: Query-Aware Sparsity for Efficient Long-Context LLM
// Inference", ICML 2024, §3.2-3.3): the keys are cut into pages of page_size tokens (policy_params,
// default 16, Quest's); per page the elementwise min and max of its keys are kept in DRAM (the page
// bounds, score/page_bounds.h: 6.25% of f16 K and V at 8 KV heads of 128 and pages of 16, counted in
// --kv-host-budget like the hillinfer policy's scoring copy); at each decode step a page scores the
// upper bound of q·k over its keys, and attention reads the sinks, the recent window and the top-scoring
// pages — whole pages, in score order, until they hold ⌈α·N⌉ tokens of the middle (so up to page_size −
// 1 more). Scoring never reads the KV tiers: it costs the bounds alone, whatever the storage device.
//
// Tiers: the hot pool holds what placement keeps there (fifo by default: the sinks and the most recent
// tokens, as Quest has no hot/cold management of its own; --placement hkm gives it the hit-rate pools);
// per step the chosen pages' tokens are gathered from where they live — hot in place, cold ones read
// from the cold pool (one aligned read per token record, coalesced).
//
// Granularity: one page set per layer (heads aggregated as score_params says: the bounds of all query
// heads combined as hillinfer combines dots) or per KV head (--select kv_head; Quest's own choice is per
// query head, which a GQA model's shared KV makes per KV head at best).
#include "policy/policies.h"

#include "score/selector.h"

#include <algorithm>

namespace hill {

void quest_select(const float * scores, int64_t n, int64_t n_top, int64_t n_sinks, int64_t n_window, int64_t page_size,
                  std::vector<std::pair<uint64_t, int64_t>> & pages, std::vector<int32_t> & out) {
    const auto [s_end, w_begin] = middle_of(n, n_sinks, n_window);
    out.clear();
    for (int64_t t = 0; t < s_end; ++t) out.push_back(int32_t(t));
    pages.clear();
    for (int64_t j = s_end / page_size; s_end < w_begin && j * page_size < w_begin; ++j) {
        const int64_t t = std::max(j * page_size, s_end);
        pages.emplace_back(select_rank_key(scores[t], j), j);
    }
    std::sort(pages.begin(), pages.end(), [](const auto & a, const auto & b) { return a.first > b.first; });
    int64_t taken = 0;
    size_t k = 0;
    for (; k < pages.size() && taken < n_top; ++k) {
        const int64_t j = pages[k].second;
        taken += std::min(w_begin, (j + 1) * page_size) - std::max(s_end, j * page_size);
    }
    std::sort(pages.begin(), pages.begin() + ptrdiff_t(k), [](const auto & a, const auto & b) { return a.second < b.second; });
    for (size_t i = 0; i < k; ++i) {
        const int64_t j = pages[i].second;
        for (int64_t t = std::max(s_end, j * page_size); t < std::min(w_begin, (j + 1) * page_size); ++t) {
            out.push_back(int32_t(t));
        }
    }
    for (int64_t t = w_begin; t < n; ++t) out.push_back(int32_t(t));
}

std::unique_ptr<policy> make_quest_policy(const policy_params & p, int n_head_kv) {
    return make_top_alpha_policy("quest", copy_kind::page_bounds, top_unit::pages, placement_kind::fifo, p, n_head_kv);
}

}  // namespace hill
