// The selection rule shared by the scoring policies — `hillinfer`, `infinigen`, `h2o` (top tokens) and
// `quest`, `leoam` (top pages); their files say what each keeps where and where its scores come from:
// the sinks, the recent window and the ⌈α·N⌉ top-scored tokens of the middle (score/selector.h
// token_selector), or whole pages in the order of their scores until they hold ⌈α·N⌉ (quest_select),
// per layer or per KV head.
#include "policy/policies.h"

#include "score/selector.h"

namespace hill {

namespace {

class top_alpha_policy final : public policy {
public:
    top_alpha_policy(std::string_view name, copy_kind from, top_unit unit, placement_kind default_placement,
                     const policy_params & p, int n_head_kv)
        : policy(p, p.score.granularity == select_granularity::kv_head ? n_head_kv : 1, default_placement),
          name_(name),
          from_(from),
          unit_(unit) {}
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
            const float * scores = in.scores != nullptr ? in.scores + size_t(g) * size_t(in.n) : nullptr;
            if (unit_ == top_unit::tokens) {
                selector_.select(scores, in.n, n_top, params_.n_sinks, params_.n_window, sets[size_t(g)]);
            } else {
                quest_select(scores, in.n, n_top, params_.n_sinks, params_.n_window, params_.page_size, pages_,
                             sets[size_t(g)]);
            }
        }
    }

private:
    std::string_view name_;  // a string literal (the factories')
    copy_kind from_;
    top_unit unit_;
    // Scratch only: select() decides from its inputs alone.
    mutable token_selector selector_;
    mutable std::vector<std::pair<uint64_t, int64_t>> pages_;  // (rank key, page)
};

}  // namespace

std::unique_ptr<policy> make_top_alpha_policy(std::string_view name, copy_kind from, top_unit unit,
                                              placement_kind default_placement, const policy_params & p, int n_head_kv) {
    return std::make_unique<top_alpha_policy>(name, from, unit, default_placement, p, n_head_kv);
}

}  // namespace hill
