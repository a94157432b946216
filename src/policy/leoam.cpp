// Policy `leoam` (LeoAM, Sun et al., "Breaking the Boundaries of Long-Context LLM Inference: Adaptive KV
// Management on a Single Commodity GPU", arXiv 2506.20187): importance evaluated over chunks of varying
// size from KV abstracts — the bounds (elementwise min and max) of each chunk's keys — held in fast
// memory, so that scoring reads no KV and only the chosen tokens' KV moves from the slower tiers.
//
// Here: the abstracts are per-page key bounds in DRAM (score/page_bounds.h with adaptive chunks:
// pages of --page-size tokens, 6.25% of f16 K and V at pages of 16, counted in --kv-host-budget); per
// layer and step a chunk size of 1 to 8 pages adapts to how the important pages cluster (LeoAM's
// "attention deserts": coarse chunks where attention is sparse, fine ones where it gathers); the best
// chunks are refined page by page and attention reads the sinks, the window and the top pages until
// they hold ⌈α·N⌉ tokens (quest_select). Next to `quest` (which scores every page at every step) it
// scores N / (c · page) chunks plus 2⌈α·N⌉ / page candidate pages.
//
// What it keeps where: the abstracts in DRAM; the KV in the hot pool (hkm by default: LeoAM keeps the
// important chunks in GPU and CPU memory) and the cold pool. What it reads per step: the abstracts,
// then the chosen pages' tokens from where they live (cold ones one aligned token record each on a
// plain SSD). Not here: LeoAM's abstracts on disk (ours stay in DRAM), its dynamic KV compression and
// its GPU-CPU-disk pipeline (the engine's own pipeline prefetches for every scoring policy).
#include "policy/policies.h"

namespace hill {

std::unique_ptr<policy> make_leoam_policy(const policy_params & p, int n_head_kv) {
    return make_top_alpha_policy("leoam", copy_kind::chunk_bounds, top_unit::pages, placement_kind::hkm, p, n_head_kv);
}

}  // namespace hill
