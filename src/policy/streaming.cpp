// Policy `streaming` (StreamingLLM, Xiao et al., ICLR 2024 "Efficient Streaming Language Models with
// Attention Sinks"): the first S tokens (attention sinks) and the last W (recent window) only. Nothing
// is scored; both sets are pinned hot, so decode reads nothing from the cold tier. Placement fifo by
// default.
#include "policy/policies.h"

#include "score/selector.h"

namespace hill {

namespace {

class streaming_policy final : public policy {
public:
    explicit streaming_policy(const policy_params & p) : policy(p, 1, placement_kind::fifo) {}
    std::string_view name() const override { return "streaming"; }
    bool uses_scores() const override { return false; }
    bool wants_scores(int64_t) const override { return false; }
    void select(const select_input & in, std::span<std::vector<int32_t>> sets) const override {
        const auto [s_end, w_begin] = middle_of(in.n, params_.n_sinks, params_.n_window);
        std::vector<int32_t> & out = sets[0];
        out.clear();
        for (int64_t t = 0; t < s_end; ++t) out.push_back(int32_t(t));
        for (int64_t t = w_begin; t < in.n; ++t) out.push_back(int32_t(t));
    }
};

}  // namespace

std::unique_ptr<policy> make_streaming_policy(const policy_params & p, int) {
    return std::make_unique<streaming_policy>(p);
}

}  // namespace hill
