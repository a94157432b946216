// Policy `infinigen` (InfiniGen, Lee et al., "InfiniGen: Efficient Generative Inference of Large
// Language Models with Dynamic KV Cache Management", OSDI 2024, §4): speculative selection. The
// attention of layer il + 1 is estimated from layer il's input — the query of layer il + 1 computed
// from the residual stream entering layer il (consecutive layers' inputs are close: the residual
// stream changes little per block, §4.2) — against a partial-channel key sketch (score/key_sketch.h),
// and that layer's selection is prefetched from the host pool and the SSD while layer il computes
// (§4.3). Layer 0 has no previous layer: it scores from its own query. No correction after the fact:
// layer il + 1 attends what was speculated, as in the paper.
//
// Selection (select below, per sequence and layer): the sinks, the recent window and the ⌈α·N⌉ top
// tokens of the middle by the speculated partial-channel score (score/selector.h token_selector, the
// rule of hillinfer and h2o). InfiniGen itself keeps, per head, the tokens whose speculated score is
// within a threshold of the head's maximum, a count that varies by head and step; here the count is
// α's, as for every baseline, so that the policies read the same number of tokens. The step's own token
// (position N − 1) is not in the sketch when the speculation runs: it is attended by rule (the decode
// step gives it an infinite speculated score; inside the window anyway unless --window 0).
//
// What it keeps where: the sketch in DRAM (r = head_dim / 4 channels per KV head in f16: 2 · n_head_kv
// · r bytes per token and layer, 12.5% of f16 K and V, counted in --kv-host-budget); the KV in the hot
// pool as placement decides (hkm by default: InfiniGen's memory pool manager evicts by counters of how
// often an entry was fetched, §4.4, which the hit counts are; --placement fifo keeps the recent ones)
// and the cold pool. What it reads
// per step and layer: the sketch, then the selected tokens' KV from where they live (cold ones one
// aligned token record each, read ahead by the prefetch started one layer earlier).
//
// Granularity: one token set per layer (heads aggregated as score_params says) or per KV head.
#include "policy/policies.h"

namespace hill {

std::unique_ptr<policy> make_infinigen_policy(const policy_params & p, int n_head_kv) {
    return make_top_alpha_policy("infinigen", copy_kind::sketch, top_unit::tokens, placement_kind::hkm, p, n_head_kv);
}

}  // namespace hill
