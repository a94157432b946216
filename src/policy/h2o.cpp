// Policy `h2o` (H2O, Zhang et al., "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of
// Large Language Models", NeurIPS 2023, §3-4), the offloading variant the HillInfer paper compares with
// (§5): attention reads the sinks, the recent window and the ⌈α·N⌉ "heavy hitters" — the tokens with
// the largest accumulated attention (score/attention_totals.h: the attention the steps paid each token,
// summed over heads, a moving sum over the steps that attended it; a prefill starts its tokens from the
// prompt's last queries' attention, an import from the same measured by its exporter, context::import_kv). H2O itself drops the tokens that leave its budget; here they move
// to the cold pool and are read back when their score wins again (a kept token that stops earning
// attention decays below them).
//
// What it keeps where: the accumulated attention in DRAM (4 bytes per token and layer, counted in
// --kv-host-budget); the KV in the hot pool as placement decides (hkm by default: the tokens the
// selection keeps choosing stay hot — H2O's kept set —, those it stops choosing are evicted; fifo keeps
// the recent ones) and the cold pool. What it reads per step: nothing to score (the ranking needs no
// key); the selected tokens' KV from where they live. The attention weights come from a second pass
// over the attended keys (compute/attention.h attention_logits): the fused attention kernel keeps its
// scores in registers, so h2o's attention costs about one more q·k pass over what it attends.
//
// One token set per layer: the weights are summed over all query heads (--select kv_head is refused).
#include "policy/policies.h"

#include "core/error.h"

namespace hill {

std::unique_ptr<policy> make_h2o_policy(const policy_params & p, int n_head_kv) {
    if (p.score.granularity != select_granularity::layer) {
        fail_usage("--policy h2o selects one token set per layer (its weights sum over every query head): drop --select {}",
                   name(p.score.granularity));
    }
    return make_top_alpha_policy("h2o", copy_kind::attention, top_unit::tokens, placement_kind::hkm, p, n_head_kv);
}

}  // namespace hill
