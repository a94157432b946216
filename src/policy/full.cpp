// Policy `full`: dense attention over every cached token wherever it lives (the FlexGen-like
// baseline and the accuracy reference). Nothing is scored; placement fifo by default.
#include "policy/policies.h"

namespace hill {

namespace {

class full_policy final : public policy {
public:
    explicit full_policy(const policy_params & p) : policy(p, 1, placement_kind::fifo) {}
    std::string_view name() const override { return "full"; }
    bool uses_scores() const override { return false; }
    bool wants_scores(int64_t) const override { return false; }
    void select(const select_input & in, std::span<std::vector<int32_t>> sets) const override {
        std::vector<int32_t> & out = sets[0];
        out.resize(size_t(in.n));
        for (int64_t t = 0; t < in.n; ++t) out[size_t(t)] = int32_t(t);
    }
};

}  // namespace

std::unique_ptr<policy> make_full_policy(const policy_params & p, int) {
    return std::make_unique<full_policy>(p);
}

}  // namespace hill
