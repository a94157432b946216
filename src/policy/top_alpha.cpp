// The selection rule shared by `hillinfer`, `infinigen` and `h2o` (their files say what each keeps
// where and where its scores come from): the sinks, the recent window and the ⌈α·N⌉ top-scored tokens
// of the middle (score/selector.h token_selector), per layer or per KV head. Placement hkm by default.
#include "policy/policies.h"

#include "score/selector.h"

namespace hill {

namespace {

class top_alpha_policy final : public policy {
public:
    top_alpha_policy(std::string_view name, copy_kind from, const policy_params & p, int n_head_kv)
        : policy(p, p.score.granularity == select_granularity::kv_head ? n_head_kv : 1, placement_kind::hkm),
          name_(name),
          from_(from) {}
    std::string_view name() const override { return name_; }
    bool uses_scores() const override { return true; }
    // Every token between the sinks and the window is scored, even when ⌈α·N⌉ takes them all: the step
    // runs the same stages whatever α (so α = 1 is dense attention through the scoring path).
    bool wants_scores(int64_t n) const override {
        const auto [s_end, w_begin] = middle_of(n, params_.n_sinks, params_.n_window);
        return w_begin > s_end;
    }
    copy_kind scores_from() const override { return from_; }
    void select(const select_input & in, std::span<std::vector<int32_t>> sets) const override {
        const int64_t n_top = n_top_for(params_.alpha, in.n);
        for (int g = 0; g < n_group_; ++g) {
            selector_.select(in.scores != nullptr ? in.scores + size_t(g) * size_t(in.n) : nullptr, in.n, n_top,
                             params_.n_sinks, params_.n_window, sets[size_t(g)]);
        }
    }

private:
    std::string_view name_;  // a string literal (the factories')
    copy_kind from_;
    mutable token_selector selector_;  // scratch only: select() decides from its inputs alone
};

}  // namespace

std::unique_ptr<policy> make_top_alpha_policy(std::string_view name, copy_kind from, const policy_params & p,
                                              int n_head_kv) {
    return std::make_unique<top_alpha_policy>(name, from, p, n_head_kv);
}

}  // namespace hill
