// Policy `hillinfer` (HillInfer paper §4; DESIGN.md §3): every cached token is scored by its raw q·k
// importance where it lives (the host scores what is in DRAM, the storage device its cold pages), and
// attention reads the sinks, the recent window and the top ⌈α·N⌉ of the other tokens — per layer
// (one set for all query heads, the paper's token-level choice) or per KV head. Placement hkm by
// default (placement.h: the paper's hot/cold pools driven by hit rates).
#include "policy/policies.h"

#include "score/selector.h"

namespace hill {

namespace {

class hillinfer_policy final : public policy {
public:
    hillinfer_policy(const policy_params & p, int n_head_kv)
        : policy(p, p.score.granularity == select_granularity::kv_head ? n_head_kv : 1, placement_kind::hkm) {}
    std::string_view name() const override { return "hillinfer"; }
    bool uses_scores() const override { return true; }
    // Every token between the sinks and the window is scored, even when ⌈α·N⌉ takes them all: the step
    // runs the same stages whatever α (so α = 1 is dense attention through the scoring path).
    bool wants_scores(int64_t n) const override {
        const auto [s_end, w_begin] = middle_of(n, params_.n_sinks, params_.n_window);
        return w_begin > s_end;
    }
    void select(const select_input & in, std::span<std::vector<int32_t>> sets) const override {
        const int64_t n_top = n_top_for(params_.alpha, in.n);
        for (int g = 0; g < n_group_; ++g) {
            selector_.select(in.scores != nullptr ? in.scores + size_t(g) * size_t(in.n) : nullptr, in.n, n_top,
                             params_.n_sinks, params_.n_window, sets[size_t(g)]);
        }
    }

private:
    mutable token_selector selector_;  // scratch only: select() decides from its inputs alone
};

}  // namespace

std::unique_ptr<policy> make_hillinfer_policy(const policy_params & p, int n_head_kv) {
    return std::make_unique<hillinfer_policy>(p, n_head_kv);
}

}  // namespace hill
