#include "policy/policy.h"

#include "core/error.h"
#include "policy/placement.h"
#include "score/selector.h"

namespace hill {

std::string_view name(placement_kind k) {
    switch (k) {
        case placement_kind::by_policy: return "by_policy";
        case placement_kind::fifo: return "fifo";
        case placement_kind::hkm: return "hkm";
    }
    return "?";
}

placement_kind parse_placement(std::string_view s) {
    for (placement_kind k : {placement_kind::fifo, placement_kind::hkm}) {
        if (s == name(k)) return k;
    }
    fail_usage("unknown placement '{}': expected fifo or hkm", s);
}

policy::policy(const policy_params & p, int n_group, placement_kind default_placement)
    : params_(p), n_group_(n_group),
      placement_(p.placement == placement_kind::by_policy ? default_placement : p.placement) {
    HILL_ASSERT(n_group >= 1);
}

void policy::counted(std::span<const int32_t> set, int64_t n, std::vector<int32_t> & out) const {
    const int64_t s_end = std::min<int64_t>(params_.n_sinks, n);
    out.clear();
    for (const int32_t t : set) {
        if (t >= s_end) out.push_back(t);
    }
}

void policy::place(const place_input & in, placement_plan & plan) const {
    if (placement_ == placement_kind::hkm) {
        place_hkm(*this, in, plan);
    } else {
        place_fifo(*this, in, plan);
    }
}

void policy::place_prefill(const prefill_place_input & in, prefill_plan & plan) const {
    if (placement_ == placement_kind::hkm) {
        place_prefill_hkm(*this, in, plan);
    } else {
        place_prefill_fifo(*this, in, plan);
    }
}

}  // namespace hill
