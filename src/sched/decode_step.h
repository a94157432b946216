// One decode step for a batch of sequences (DESIGN.md §3): every sequence contributes one token, the
// weights are read once per layer for all of them (the architecture's forward pass over B rows), and
// per layer il the step runs, in this order:
//   1. the forward pass to Q, K, V of the B tokens; each token's K and V go into a reserved hot slot
//      (the recent window is hot), are prepared for its cold log (kv/cold_logs.h: a page write when
//      its group fills), and its key is written to the scoring copy (at a position no reader sees
//      before apply);
//   2. per sequence, when the policy wants scores: with a scoring copy of the keys in DRAM
//      (score/scoring_copy.h: the quantized keys on a plain SSD, quest's page bounds), every token
//      is scored from it and the SSD is not read;
//      otherwise a page table of where its tokens live (kv/page_table.h), the query packet is
//      broadcast — the host scorer scores the tokens in DRAM while the storage device scores those in
//      written cold pages and streams score blocks — and the scores are merged (HillInfer paper §4.2
//      "Hierarchical Importance Evaluation"); either way one f16-rounded score per token;
//   3. the policy selects (policy/policy.h) and decides placement for the batch: promotions of
//      selected cold tokens into free hot slots, evictions of stale hot ones;
//   4. gather and attend in the device tier, in position order (kv/ordered_gather.h: the result does
//      not depend on where a token lived nor on the batch): hot winners in place, open-tail winners
//      from RAM, the rest as the storage device reads them; promoted tokens' rows are copied from the
//      gather into their reserved slots (a promotion reads nothing more);
//   5. the rest of the block.
// Then the logits of every row, and only then, when every read and write of every layer succeeded,
// apply: the tokens join the KV cells, the cold logs take their rows, hit counts, promotions and
// evictions change the cells (the device cache, when there is one, keeps the evicted tokens' KV in the
// rows the step left), and a sliding-window layer drops the token its window left (kv/kv_cells.h).
// A step that fails (an I/O error, a device error, Ctrl-C) changes
// nothing: reserved slots were never taken, prepared page writes are freed, the device is left idle;
// the same step can run again once the fault is gone.
//
// The pipeline (HillInfer paper §4.3): as layer il starts, the storage device is hinted with the
// previous step's selection of layer il + 1 (and, in the first layer, of layer 0) of every sequence
// (csd::device::prefetch): the plain SSD reads those tokens' K and V in the background while the host
// computes, and step 4 reads only what the hint missed. The last layer (of two or more) wraps around:
// as it starts, this step's selection of layer 0 hints the next step's layer 0, so that layer's reads
// overlap the last layer's work too (the hint outlives the step: it names the tokens on disk but those
// this step's apply promotes; the context drops it before any page leaves a cold log,
// cold_logs::set_before_free). The hint never changes a result. A layer whose hints were mostly not
// selected is not hinted (sched/hint_gate.h; counted in step_stats::hints_gated), nor is any layer in a step
// whose arm of the gate's cost probe has hints off (it measures whether the steps with hints are faster on
// this machine; step_stats::hint_steps_off_*).
//
// Speculation (a policy scoring from the key sketch, copy_kind::sketch: InfiniGen, policy/infinigen.cpp):
// as layer il starts, the query of layer il + 1 is computed from the residual stream entering layer il
// (arch_forward::speculative_query), every token of layer il + 1 is scored from the sketch with it, the
// policy selects layer il + 1's set, and that set is the hint prefetched for layer il + 1. Layer il + 1
// then attends that set (steps 2-3 skipped; no correction); layer 0, with no layer before it, scores
// from the sketch with its own query. The speculation changes no state but the hint: a failed step
// still changes nothing. Trace: "speculate" {layer} per layer il + 1 (time counted as qkv, score host
// and select in step_stats).
//
// Thread use: the step runs on the cells' owner thread; its kernels run on the pool; the storage
// device works on its own threads during a pass (and the plain SSD's prefetch thread during the step).
//
// Tracing (core/trace.h), on the owner thread: "decode step" {step, batch} holds one "layer" {layer}
// per layer, holding "qkv", "kv append" {tokens} (with "page write" when a group fills), per sequence
// "score host" {seq, tokens in DRAM; copy: from the scoring copy}, "score device" {tokens on disk:
// waiting for and merging the device's blocks}, "select" {selected}, then "place" {promote, evict},
// per sequence "attend" {tokens, disk} (the gathers, the device's reads and attention), and "output +
// ffn"; "embed" and "logits" around the layers; "apply" {promote, evict} after them. The spans time
// the same code as step_stats (t_forward_us: embed, qkv, output + ffn, logits; t_write_us: kv append;
// t_select_us: select and place; ...).
#pragma once

#include "compute/attention.h"
#include "core/thread_pool.h"
#include "csd/device.h"
#include "kv/cold_gather.h"
#include "kv/cold_logs.h"
#include "kv/device_tier.h"
#include "kv/hot_arena.h"
#include "kv/kv_cells.h"
#include "kv/ordered_gather.h"
#include "kv/page_table.h"
#include "model/forward.h"
#include "model/model.h"
#include "policy/policy.h"
#include "sched/hint_gate.h"
#include "score/attention_recall.h"
#include "score/host_scorer.h"
#include "score/scoring_copy.h"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace hill {

// Per layer, summed over the sequences' steps.
struct step_layer_stats {
    uint64_t n_steps = 0;          // sequence-steps
    uint64_t n_context = 0;        // Σ tokens of the sequence
    uint64_t n_attended = 0;       // Σ tokens attended (kv_head granularity: the union of the sets)
    uint64_t n_attended_hot = 0;   // of those, read from the hot pool
    uint64_t n_attended_cached = 0;// cold tokens read from the device tier's cache (kv/device_cache.h)
    uint64_t n_attended_open = 0;  // read from a cold log's open tail in RAM
    uint64_t n_attended_disk = 0;  // read from SSD by the storage device
    uint64_t n_disk_reread = 0;    // of those, tokens the sequence's previous step attended too: reads a cache
                                   // of the last step's selection would have saved (kv/device_cache.h)
    double recall_sum = 0.0;       // diag: Σ attention recall (score/attention_recall.h)
    double overlap_sum = 0.0;      // diag: Σ |S_t ∩ S_t-1| / |S_t| over steps with a previous step
    uint64_t n_overlap = 0;        // diag: steps counted in overlap_sum
};

struct step_stats {
    std::vector<step_layer_stats> layers;  // [n_layer]
    uint64_t n_steps = 0;           // batch steps that completed
    uint64_t n_tokens = 0;          // tokens decoded (sequence-steps)
    uint64_t n_failed = 0;          // steps that failed and changed nothing
    uint64_t t_forward_us = 0;      // embeddings, projections, FFN, logits
    uint64_t t_score_host_us = 0;   // the host scoring the tokens in DRAM
    uint64_t t_score_device_us = 0; // waiting for and merging the storage device's score blocks (plain SSD: its
                                    // reads and scoring, on this thread)
    uint64_t t_select_us = 0;       // the policy's selection and placement
    uint64_t t_attend_us = 0;       // gathering the selected KV and attending
    uint64_t t_write_us = 0;        // cold-log page writes of the step's rows
    uint64_t t_diag_us = 0;
    uint64_t promotions = 0;        // cold → hot moves
    uint64_t evictions = 0;         // hot → cold moves (no write: the cold copy exists)
    uint64_t pingpong = 0;          // moves that undid a move of the same token within 8 steps
    uint64_t hints_gated = 0;       // prefetch hints (sequence, layer) not sent to a device that reads ahead:
                                    // the layer's hints were mostly not selected (sched/hint_gate.h)
    uint64_t hint_steps = 0;        // steps that could send hints: cold tier, scoring policy, device reading ahead
    uint64_t hint_steps_off_probing = 0;  // steps with every hint off: probing whether hints pay (sched/hint_gate.h)
    uint64_t hint_steps_off_chosen = 0;   // steps with every hint off: the probe found the steps without them faster
    uint64_t hint_tokens_next_step = 0;  // tokens the storage device queued for the next step's first layer (the
                                         // pipeline wrapping around; the last step's are never taken)
    uint64_t promoted_bytes = 0;    // K and V bytes copied into the hot pool by promotions
    uint64_t cache_fills = 0;       // tokens the device tier's cache took: read from SSD, or evicted from the hot pool
    uint64_t cache_swaps = 0;       // of them, read from SSD into the row of a cached token the step scored lower
    // Per sequence id [n_seq], summed over layers and steps: context tokens and tokens attended (as
    // layers' n_context and n_attended); a server reports one request's attended share from their changes.
    std::vector<uint64_t> seq_context, seq_attended;
};

class decode_step {
public:
    // The step over the cache's parts (all owned by the caller, engine/context.h). logs and reader
    // are nullptr without a cold tier; copy (the scoring copy of the keys, whose positions below each
    // sequence's length the caller keeps written) is nullptr when the step scores the stored keys. cache:
    // the device tier's cache of recently selected KV (kv/device_cache.h; rows of hot, apart from the
    // cells' slots), or nullptr: every step reads the cold tokens it selects that it holds, and fills it
    // with those it reads and those its placement evicts.
    decode_step(const model & m, arch_forward & forward, kv_cells & cells, hot_arena & hot, cold_logs * logs,
                cold_reader * reader, scoring_copy * copy, device_cache * cache, csd::device & device,
                device_tier & dev, thread_pool & pool);
    ~decode_step();

    // The policy to decide with (owned by the caller; replaced between steps). Errors (usage): scoring
    // parameters the storage device cannot run (csd::check_scoring).
    void set_policy(const policy & pol, csd::storage_kind storage);

    // One step: tokens[b] at position cells.n_tokens(seqs[b]) of sequence seqs[b] (distinct, each
    // below the context); logits f32 [B, n_vocab]. Needs n_hot_free(il) >= B in every layer (the
    // previous step's placement leaves it; context::make_room otherwise). Errors: I/O and device
    // errors, exit_code::interrupted (hill::error); nothing changed.
    void run(std::span<const int> seqs, std::span<const int32_t> tokens, float * logits);

    const step_stats & stats() const { return stats_; }
    void reset_stats();
    uint32_t step_counter() const { return step_; }

private:
    struct prepared;  // what one step prepared, per layer
    void layer(int il, prepared & prep);
    void score_sequence(int il, int b, prepared & prep);
    // Hints the storage device with the batch's previous selections of layer il (csd::device::prefetch),
    // or, given this step's prepared layers, with this step's selections of layer il for the next step.
    void prefetch_layer(int il, const prepared * next_step = nullptr);
    // Speculation: selects layer il of every sequence into spec_sets_ from the residual stream x_
    // entering layer il − 1, and hints the storage device with the selection (infinigen).
    void speculate(int il);
    // The softmax aggregate's per-head normalizers b_h of sequence b at layer il (score/head_softmax.h),
    // into head_mass_: head_log2_mass over the sinks and the window (the step's own token included), in
    // position order wherever they live; nullptr under the other aggregates. Uses table_. Errors: a
    // failed read of a window token on disk (hill::error naming the page).
    const float * sink_window_mass(int il, int b, const prepared & prep);
    void gather_and_attend(int il, int b, prepared & prep);
    void measure(int il, int b);
    void apply(prepared & prep);
    void cache_victims(int il, std::span<const std::pair<int, int32_t>> evict);  // apply(): before layer il's evictions
    void discard(prepared & prep);
    // The attention weights of the n tokens whose logits gather_and_attend left in logits_ (h2o).
    void attention_weights(int64_t n, std::vector<float> & out);

    const model & model_;
    arch_forward & forward_;
    kv_cells & cells_;
    hot_arena & hot_;
    cold_logs * logs_;
    cold_reader * reader_;
    scoring_copy * copy_;
    device_cache * cache_;
    csd::device & device_;
    device_tier & dev_;
    thread_pool & pool_;
    const policy * policy_ = nullptr;
    attention_shape shape_;
    kv_layout layout_;
    int n_seq_max_;
    hint_gate hints_;                              // which layers' prefetch hints pay
    uint32_t step_ = 0;
    step_stats stats_;

    std::unique_ptr<host_scorer> scorer_;
    std::unique_ptr<attention_recall> recall_;     // diag
    std::unique_ptr<cold_gather> diag_gather_;     // diag: host reads of cold keys
    std::vector<std::vector<int32_t>> prev_;       // diag: [n_seq, n_layer] the previous step's union
    std::unique_ptr<prepared> prep_;
    std::vector<std::vector<int32_t>> last_attended_;  // [n_seq, n_layer] each sequence's last step's union, ascending
    std::vector<float> logits_;                    // f32 [n_head, n_ctx]: attention logits of the attended tokens (a
                                                   // copy that learns from attention only)
    std::vector<double> weight_acc_;               // f64 [n_ctx] scratch of attention_weights
    std::vector<float> weight_exp_;                // f32 [n_ctx] scratch of attention_weights

    // The batch, for the step in flight.
    std::vector<int> seqs_;
    std::vector<int32_t> pos_;                     // [B] the new tokens' positions
    int64_t n_reserve_ = 0;                        // free hot slots the next step's appends take
    std::vector<float> x_;                         // f32 [B, n_embd] residual streams
    std::vector<float> q_, k_, v_;                 // f32 [B, n_embd_q] / [B, n_embd_kv]
    std::vector<float> attn_;                      // f32 [B, n_embd_q]
    std::vector<uint8_t> rows_;                    // kv type [B, 2, n_embd_kv]: the new tokens' K and V
    kv_page_table table_;                          // one sequence's tokens (scoring), then its selection
    std::vector<int32_t> fill_pos_;                // the disk tokens the device cache keeps (ascending)
    std::vector<device_cache::scored_token> swaps_;  // disk tokens without a free row, ascending: the attended
                                                     // cached token's row each takes (device_cache::plan_replacements)
    std::vector<device_cache::scored_token> held_;   // the entry's attended cached tokens, ascending
    std::vector<std::pair<int, int32_t>> victims_; // apply(): one layer's evicted hot tokens the device cache takes
    ordered_gather gather_;                        // the selection in position order
    std::vector<float> scores_;                    // f32 [n_group, n_ctx]: merged scores by position
    std::vector<float> seg_scores_;                // f32 [n_group, n_ctx]: one region's host scores
    std::vector<std::vector<int32_t>> sets_;       // [n_group] selection of the sequence being processed
    bool speculative_ = false;                     // the policy scores from the key sketch (speculate())
    std::vector<float> q_spec_;                    // f32 [B, n_embd_q]: the speculated queries of the next layer
    // [2][B][n_group]: the speculated sets of layer il in [il % 2] (layer il + 1's are made while layer il's are in use)
    std::vector<std::vector<std::vector<int32_t>>> spec_sets_[2];
    std::vector<int32_t> spec_union_;              // scratch: their union, the prefetch hint
    std::vector<int32_t> promoted_, carry_;        // scratch: a layer's promotions; the next step's hint
    std::vector<uint64_t> member_;                 // u64 [n_ctx] kv_head: bit g set = in set g
    std::vector<int32_t> rows_g_;                  // kv_head: one group's rows of a batch
    std::vector<int32_t> sw_pos_;                  // softmax aggregate: the sinks' and window's positions
    std::vector<float> head_mass_;                 // f32 [n_head]: their log2 mass per query head
    std::vector<uint8_t> sw_keys_;                 // kv type [S + W, n_embd_kv]: their keys in position order
    std::unique_ptr<cold_gather> sw_gather_;       // softmax: reads of window keys on disk (after a truncation)
};

}  // namespace hill
