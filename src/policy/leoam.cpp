// Policy `leoam` (LeoAM, Sun et al., "Breaking the Boundaries of Long-Context LLM Inference: Adaptive KV
// Management on a Single Commodity GPU", arXiv 2506.20187): importance evaluated over chunks of varying
// size from KV abstracts — the bounds (elementwise min and max) of each chunk's keys — held in fast
// memory, so that scoring reads no KV and only the chosen tokens' KV moves from the slower tiers.
//
// Here: the abstracts are per-page key bounds in DRAM (score/page_bounds.h with adaptive chunks:
// pages of --page-size tokens, 6.25% of f16 K and V at pages of 16, counted in --kv-host-budget); per
// layer and step a chunk size of 1 to 8 pages adapts to how the important pages cluster (LeoAM's
// "attention deserts": coarse chunks where attention is sparse, fine ones where it gathers); the best
// chunks are refined page by page and attention reads the sinks, the window and the top pages until
// they hold ⌈α·N⌉ tokens (quest_select). Next to `quest` (which scores every page at every step) it
// scores N / (c · page) chunks plus 2⌈α·N⌉ / page candidate pages.
//
// What it keeps where: the abstracts in DRAM; the KV in the hot pool (hkm by default: LeoAM keeps the
// important chunks in GPU and CPU memory) and the cold pool. What it reads per step: the abstracts,
// then the chosen pages' tokens from where they live (cold ones one aligned token record each on a
// plain SSD). Not here: LeoAM's abstracts on disk (ours stay in DRAM), its dynamic KV compression and
// its GPU-CPU-disk pipeline (the engine's own pipeline prefetches for every scoring policy).
#include "policy/policies.h"

#include "score/selector.h"

namespace hill {

namespace {

class leoam_policy final : public policy {
public:
    leoam_policy(const policy_params & p, int n_head_kv)
        : policy(p, p.score.granularity == select_granularity::kv_head ? n_head_kv : 1, placement_kind::hkm) {}
    std::string_view name() const override { return "leoam"; }
    bool uses_scores() const override { return true; }
    bool wants_scores(int64_t n) const override {
        const auto [s_end, w_begin] = middle_of(n, params_.n_sinks, params_.n_window);
        return w_begin > s_end;
    }
    copy_kind scores_from() const override { return copy_kind::chunk_bounds; }
    void select(const select_input & in, std::span<std::vector<int32_t>> sets) const override {
        const int64_t n_top = n_top_for(params_.alpha, in.n);
        for (int g = 0; g < n_group_; ++g) {
            quest_select(in.scores != nullptr ? in.scores + size_t(g) * size_t(in.n) : nullptr, in.n, n_top,
                         params_.n_sinks, params_.n_window, params_.page_size, pages_, sets[size_t(g)]);
        }
    }

private:
    mutable std::vector<std::pair<uint64_t, int64_t>> pages_;  // scratch only
};

}  // namespace

std::unique_ptr<policy> make_leoam_policy(const policy_params & p, int n_head_kv) {
    return std::make_unique<leoam_policy>(p, n_head_kv);
}

}  // namespace hill
