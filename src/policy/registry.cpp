// The policy registry: name -> factory. A new policy is one file and one line here.
#include "core/error.h"
#include "policy/policies.h"

#include <string>

namespace hill {

namespace {

struct policy_entry {
    const char * name;
    std::unique_ptr<policy> (*make)(const policy_params &, int);
    bool attends_by_rule;  // attends nothing but sinks and window when nothing else is chosen (S = W = 0 is empty)
};

constexpr policy_entry registry[] = {
    {"full", make_full_policy, false},
    {"streaming", make_streaming_policy, true},
    {"hillinfer", make_hillinfer_policy, true},
    {"quest", make_quest_policy, true},
    {"h2o", make_h2o_policy, true},
    {"leoam", make_leoam_policy, true},
    {"infinigen", make_infinigen_policy, true},
};

const policy_entry * find(std::string_view name) {
    for (const policy_entry & e : registry) {
        if (name == e.name) return &e;
    }
    return nullptr;
}

}  // namespace

std::string policy_names() {
    std::string s;
    for (const policy_entry & e : registry) s += (s.empty() ? "" : ", ") + std::string(e.name);
    return s;
}

void validate(const policy_params & p, int n_head_kv) {
    const policy_entry * e = find(p.name);
    if (e == nullptr) fail_usage("unknown policy '{}': expected one of {}", p.name, policy_names());
    if (!(p.alpha > 0.0 && p.alpha <= 1.0)) fail_usage("--alpha must be in (0, 1], got {}", p.alpha);
    if (p.n_sinks < 0) fail_usage("--sinks must be >= 0, got {}", p.n_sinks);
    if (p.n_window < 0) fail_usage("--window must be >= 0, got {}", p.n_window);
    if (p.page_size < 1) fail_usage("--page-size must be >= 1 token, got {}", p.page_size);
    if (e->attends_by_rule && p.n_sinks == 0 && p.n_window == 0) {
        fail_usage("--policy {} with --sinks 0 and --window 0 attends to no token by rule (the step's own token is in "
                   "the window): give --window 1 or more", p.name);
    }
    if (p.score.granularity == select_granularity::kv_head && n_head_kv > 64) {
        fail_usage("--select kv_head takes at most 64 KV heads, the model has {}", n_head_kv);
    }
}

std::unique_ptr<policy> make_policy(const policy_params & p, int n_head_kv) {
    validate(p, n_head_kv);
    return find(p.name)->make(p, n_head_kv);
}

}  // namespace hill
