// Policy `hillinfer` (HillInfer paper §4; DESIGN.md §3): every cached token is scored by its raw q·k
// importance where it lives (the host scores what is in DRAM, the storage device its cold pages), and
// attention reads the sinks, the recent window and the top ⌈α·N⌉ of the other tokens — per layer
// (one set for all query heads, the paper's token-level choice) or per KV head. Placement hkm by
// default (placement.h: the paper's hot/cold pools driven by hit rates).
#include "policy/policies.h"

namespace hill {

std::unique_ptr<policy> make_hillinfer_policy(const policy_params & p, int n_head_kv) {
    return make_top_alpha_policy("hillinfer", copy_kind::tier, top_unit::tokens, placement_kind::hkm, p, n_head_kv);
}

}  // namespace hill
