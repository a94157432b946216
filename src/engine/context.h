// A model's inference context for a batch of sequences over the tiered KV cache: the KV cells
// (kv/kv_cells.h: metadata), the pools (kv/hot_arena.h: the hot pool in DRAM; kv/cold_pool.h with its
// cold_writer, the cold logs and a host cold_reader: the cold pool on SSD, holding every token's KV), the storage
// device that scores and reads the cold pages (csd/device.h), the device tier where attention runs
// (kv/device_tier.h), the policy (policy/policy.h) and the decode step (sched/decode_step.h).
//
// Sequences are slots [0, n_seq): each has its own tokens in every tier, under one shared host budget.
//   - prefill(seq, tokens): layer-major (DESIGN.md §3): all the tokens go through layer il in chunks of
//     n_batch rows, attending to the sequence's tokens already in the tiers and causally to their own
//     KV, then layer il's KV is written to the sequence's cold log and placed by the policy (hot: the
//     sinks, the window and — under placement hkm — the tokens of highest prefill importance, the
//     importance score of every token under the segment's last W queries), before layer il + 1.
//     Prompts longer than n_segment are prefilled segment by segment, each attending to the ones before
//     in the tiers. Peak memory is weights + budgets + one layer's KV of one segment + the segment's
//     activations, whatever the prompt length.
//   - decode(seqs, tokens): one decode step of a batch (sched/decode_step.h).
// Sliding-window layers (model/model.h hparams::window) keep only the last window tokens of each sequence
// in every tier (kv/kv_cells.h, kv/cold_logs.h): what they drop is gone, so a sequence cannot be cut back
// (truncate) once they have dropped a token, except to 0.
// Failures: a decode step that fails changes nothing. A prefill that fails leaves the sequence at its
// length before the call (its cold log as it was; emptied when the model has sliding-window layers and
// an earlier segment of the prompt moved their windows past what the sequence needed before the call);
// tokens of the sequence that were hot before may
// have left the hot pool (their KV is intact in the cold pool). A Ctrl-C (storage_params::stop_requested,
// the progress callback) is such a failure, with exit_code::interrupted.
//
// Thread use: one owner thread calls every method; kernels run on the pool; the storage device emulator
// has its own threads.
//
// Tracing (core/trace.h): prefill records "prefill" {seq, p0, tokens} with per layer "layer" {layer}
// holding "qkv", "prefill attend" {tokens, context}, "prefill importance", "output + ffn" and "prefill
// place" (the layer's page writes and hot placement); import_kv records "import kv"; decode steps are
// sched/decode_step.h's.
#pragma once

#include "core/thread_pool.h"
#include "csd/device.h"
#include "kv/cold_gather.h"
#include "kv/cold_pool.h"
#include "kv/cold_reader.h"
#include "kv/cold_logs.h"
#include "kv/cold_writer.h"
#include "kv/device_cache.h"
#include "kv/device_tier.h"
#include "kv/hot_arena.h"
#include "kv/kv_cells.h"
#include "kv/ordered_gather.h"
#include "model/forward.h"
#include "model/model.h"
#include "policy/policy.h"
#include "sched/decode_step.h"
#include "sched/planner.h"
#include "score/host_scorer.h"
#include "score/scoring_copy.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace hill {

struct context_params {
    int32_t n_ctx = 0;                  // KV capacity of each sequence in tokens (> 0)
    ggml_type kv_type = ggml_type::f16; // f16 or f32
    int32_t n_batch = 256;              // prompt tokens per forward chunk (activation memory)
    int32_t n_segment = 8192;           // prompt tokens per layer-major pass; longer prompts go segment by segment
    uint64_t kv_host_budget = 0;        // host bytes of the KV cache (all layers, all sequences): the hot pool and,
                                        // the scoring copy of the policy's keys (score/scoring_copy.h: the quantized
                                        // keys of a scoring policy over a plain SSD, the page bounds of quest, infinigen's
                                        // key sketch);
                                        // 0: everything in RAM
    std::string kv_dir;                 // cold pool directory (needed when the budget is below the KV of every sequence)
    policy_params policy;               // decode attention policy and placement
    csd::storage_params storage;        // the device that holds the cold pool (plain SSD or CSD emulator)
    // A scoring policy over a plain SSD scores from a copy of the keys in DRAM of this many bits per
    // element, 4, 3 or 2 (score/quant_copy.h; 3 needs head_dim % 8 == 0 and 2 head_dim % 4 == 0, else 4
    // is used), counted in kv_host_budget, in RAM and tiered alike; 0: from the stored keys (the cold ones read from
    // the SSD at every step). The emulator scores the cold keys where they live either way. The default is chosen by
    // attention recall and perplexity at equal bytes (docs/storage.md "The scoring copy").
    int score_copy_bits = 3;
    // With a cold pool on the emulator and a scoring policy, the planner (sched/planner.h) sets the hot pool's
    // capacity below what the budget holds, to balance host and device scoring (DESIGN.md §4); on a plain SSD
    // the host scores every token, and the hot pool, a cache, takes the whole budget (β is M0-bound). Rates
    // of 0 in planner.cal (not calibrated): default_calibration(storage.profile).
    planner_params planner;
    // Over a plain SSD, the share of each cold layer's hot slots that the device tier's cache of recently
    // selected KV takes (kv/device_cache.h): the cold tokens a step read, kept for the next steps; the
    // hot pool keeps the rest. 0: no cache, the default — measured on a trained model, the slots do more
    // in the hot pool (docs/kv.md "The device-tier cache").
    double device_cache_share = 0.0;
    io_fault_hook io_faults;            // tests: injected cold-pool I/O results of the host's reads and writes
    int32_t n_seq = 1;                  // sequences at once (>= 1)
    // Keep every prefill's importance per (sequence, layer, token) for export_importance (f32, 4 bytes per
    // token-layer, not counted in kv_host_budget): a context whose KV is exported to be imported elsewhere
    // (bench accuracy) measures it under its own policy's score params, window and sinks, whatever its policy.
    bool keep_prefill_importance = false;
    // Benchmarks: a forward pass other than the model's (make_forward's signature); empty: the model's.
    std::function<std::unique_ptr<arch_forward>(const hill::model &, thread_pool &, int64_t)> forward;
};

// Bytes moved by the cache's own reads and writes (not the storage device's passes).
struct kv_io_stats {
    uint64_t cold_write_bytes = 0;      // cold-log pages written
    uint64_t cold_read_bytes = 0;       // pages the host read: prefill over the tiers, truncation, prompt cache, diag
    uint64_t prefill_placed_hot = 0;    // tokens placed hot after prefills (all layers)
    uint64_t prefill_evicted = 0;       // hot tokens prefill placement evicted
    uint64_t room_evicted = 0;          // hot tokens evicted to make room for a sequence's sinks and window
    uint64_t released_cells = 0;        // token-layers of the sequences release() ended (kept ones: not dropped)
    uint64_t released_cold_cells = 0;   // of those, without a hot copy at the end
};

class context {
public:
    // Errors: n_ctx <= 0, n_seq < 1, kv_type not f16/f32 (exit_code::usage); KV metadata beyond the memory
    // available (check_metadata_memory); a budget that cannot hold
    // the sinks, the window and one token per sequence and layer, or that needs a cold pool and no
    // kv_dir (usage, with the bytes); cold pool errors (kv_dir, free space); storage device and policy
    // errors (csd::make_device, csd::check_scoring, make_policy).
    context(const model & m, const context_params & p, thread_pool & pool);
    ~context();
    context(const context &) = delete;

    // The key width of the quantized scoring copy a context of m under p keeps in DRAM (0: none), and
    // the bytes of its scoring copy, whichever (quantized keys or page bounds); part of kv_host_budget.
    static int scoring_copy_bits(const hill::model & m, const context_params & p);
    static uint64_t scoring_copy_bytes(const hill::model & m, const context_params & p);
    // The check the constructor makes first, for a caller with long work before it (demo builds its
    // prompt): the KV metadata of p's capacity — the cells, kv_cells::cell_bytes per token and layer, and
    // the scoring copy, made for the whole capacity at once — must fit in the memory available
    // (available_memory_bytes). Errors: usage, naming the context size and the bytes.
    static void check_metadata_memory(const hill::model & m, const context_params & p);
    // The kv_host_budget under which p (its budget ignored) gets hot_tokens hot slots per layer (a
    // sliding-window layer: at most layer_slot_caps).
    static uint64_t host_budget_for(const hill::model & m, const context_params & p, int64_t hot_tokens);
    // The hot slots each layer can use at most, [n_layer]: every token of every sequence, n_seq · n_ctx;
    // a sliding-window layer's windows, n_seq · min(window + 2, n_ctx): the window, the step's new token
    // and the room for the next step's that placement keeps (the token leaving the window frees its slot
    // only after the step's placement, kv/kv_cells.h). The budget is split as one count S of slots per
    // layer, each layer taking min(S, cap): what a sliding layer does not need holds more of the other
    // layers' tokens.
    static std::vector<int64_t> layer_slot_caps(const hill::model & m, const context_params & p);
    context & operator=(const context &) = delete;

    const hill::model & model() const { return model_; }
    const context_params & params() const { return params_; }
    int n_seq() const { return params_.n_seq; }
    int32_t n_ctx() const { return params_.n_ctx; }
    int64_t n_past(int seq) const { return cells_->n_tokens(seq); }

    // Runs `tokens` of sequence seq at positions [n_past(seq), n_past(seq) + n), layer-major. logits:
    // f32 [n, n_vocab] when logits_all, else [n_vocab] for the last token (nullptr: none computed).
    // progress(done, total) after each layer's QKV, between parts of its attention (windows of the earlier
    // tokens, parts of 1024 keys), after it and after each chunk of its output, so that a progress that
    // throws stops within a stage. done and total count work, not tokens (prefill_work: attention grows
    // with the context, so a long prompt's later tokens cost more); done is non-decreasing and reaches
    // total. Errors: n_past + n > n_ctx (usage, naming both), a token id out of range (bad_input), I/O
    // errors; see the file comment.
    void prefill(int seq, std::span<const int32_t> tokens, bool logits_all, float * logits,
                 const std::function<void(double, double)> & progress = {});
    // One decode step: tokens[b] appended to sequence seqs[b] (distinct, each with room); logits f32
    // [B, n_vocab]. Errors: a token id out of range (bad_input), a full sequence (usage); I/O,
    // device and interrupt errors (nothing changed).
    void decode(std::span<const int> seqs, std::span<const int32_t> tokens, float * logits);
    // Forgets tokens [n, n_past(seq)) of seq (n <= n_past). May read one cold page back per layer;
    // on a read error (hill::error) the sequence is as it was. Errors (usage): a model with sliding-window
    // layers whose windows have dropped tokens that position n needs (!can_truncate(seq, n)).
    void truncate(int seq, int64_t n);
    // Whether truncate(seq, n) can cut the sequence (kv_cells::can_truncate): n is 0 or n_past, or no
    // sliding-window layer has dropped a token of it yet.
    bool can_truncate(int seq, int64_t n) const { return cells_->can_truncate(seq, n); }
    // Ends sequence seq (it is empty afterwards, for another to take): truncate(seq, 0), counting its
    // token-layers, and how many were only in the cold tier, into io_stats() for the run report.
    void release(int seq);

    // The KV of tokens [0, n_past(seq)) of layer il in position order: k_out, v_out kv type
    // [n_past, n_embd_kv] each (hot rows copied, open rows copied, pages read; the tokens a sliding
    // layer dropped, zero rows). Errors: cold reads.
    void export_layer(int seq, int il, void * k_out, void * v_out);
    // The prefill importance of tokens [0, n_past(seq)) of layer il, f32 [n_past] into out: the importance
    // score of each token under the last W queries of the prompt segment that brought it, summed (the
    // prior h2o's accumulated attention starts from, and what placement hkm ranks by); tokens no prefill
    // measured (decode steps' tokens) hold what an earlier prefill left at their position, or 0.
    // Asserts: params().keep_prefill_importance.
    void export_importance(int seq, int il, float * out) const;
    // Appends n tokens of externally computed KV (a prompt cache) to the empty sequence seq: k[il], v[il]
    // kv type [n, n_embd_kv] for every layer. importance: empty, or per layer f32 [n], the prefill
    // importance of the tokens (export_importance of a context that prefilled them under the same score
    // params, window and sinks): the sequence is then placed, and h2o's accumulated attention starts, as
    // after that prefill — the same state, so the same selections and logits (a prompt of several
    // segments: the same accumulated attention; its hot set is placed by each token's own segment's
    // importance, where the last segment's prefill placed by that segment's queries). Empty: placed as after a
    // prefill without importance (placement hkm: sinks, window, then the most recent tokens; h2o's
    // accumulated attention starts from 0, and its ties go to the earliest tokens). All or nothing:
    // on an error (a failed page write) the sequence stays empty.
    void import_kv(int seq, int64_t n, std::span<const void * const> k, std::span<const void * const> v,
                   std::span<const float * const> importance = {});

    // Replaces the policy (fresh step statistics); the KV and its placement stay as they are. Errors: as
    // make_policy; scoring the storage device cannot run.
    void set_policy(const policy_params & p);
    const hill::policy & policy() const { return *policy_; }

    const kv_cells & cells() const { return *cells_; }
    const kv_layout & layout() const { return layout_; }
    const cold_pool * cold() const { return cold_.get(); }  // nullptr when everything fits the host budget
    const cold_logs * logs() const { return logs_.get(); }
    // The scoring copy of the keys in DRAM; nullptr unless the policy made with the context scores from
    // one (the quantized keys on a plain SSD with --score-copy, or quest's page bounds).
    const hill::scoring_copy * scoring_copy() const { return copy_.get(); }
    const csd::device & storage() const { return *storage_; }
    const device_tier & device() const { return *device_; }
    const step_stats & decode_stats() const { return step_->stats(); }
    // The planner of the hot/cold split; nullptr unless the cold pool is on the emulator. It plans while the
    // policy scores; under a policy that does not, the hot pool takes the whole budget.
    const hill::planner * planner() const { return planner_.get(); }
    // Hot slots per layer the host budget holds (M0; a sliding-window layer: at most layer_slot_caps);
    // cells().hot_capacity() is what the planner lets the pool use.
    int64_t hot_slots_max() const { return cells_->hot_slots(); }
    // The device tier's cache of recently selected KV (kv/device_cache.h), and its rows, all layers (0: none).
    const hill::device_cache & device_cache() const { return dcache_; }
    int64_t device_cache_rows() const;
    const kv_io_stats & io_stats() const;
    // Tokens of every sequence (seq < 0) or of one, all layers, without a hot copy: read from the cold tier
    // (not counting the dropped ones).
    int64_t n_cold_cells(int seq = -1) const;
    // Tokens of every sequence (seq < 0) or of one, all layers, that sliding-window layers dropped: held in
    // no tier (kv/kv_cells.h).
    int64_t n_dropped_cells(int seq = -1) const;
    // Bytes of the cold pool's pages in use (0 without a cold pool).
    uint64_t cold_bytes() const;

private:
    struct layer_append;  // one layer's prepared KV append to a sequence (prefill and import)
    // A prefill's work in layer il for n tokens at positions [p0, p0 + n), as its progress counts it —
    // estimated multiply-adds, not a timing: per token the projections before attention (qkv) and after
    // it with the FFN (rest), and 2 · n_embd_q per (query, key) pair of the attention (attend; a
    // sliding-window layer's query sees at most its window).
    struct layer_work {
        double qkv = 0, attend = 0, rest = 0;
        double total() const { return qkv + attend + rest; }
    };
    layer_work prefill_work(int il, int64_t p0, int64_t n) const;
    // progress(done): the work done of this segment's (prefill_work summed over its layers).
    void prefill_segment(int seq, const int32_t * tokens, int64_t n, bool logits_all, float * logits,
                         const std::function<void(double)> & progress);
    // Writes layer il's rows k, v (kv type [n, n_embd_kv], positions [p0, p0 + n)) to seq's cold log
    // and places the layer's hot set by the policy; prepared, to apply with commit().
    void append_layer(int seq, int il, int64_t p0, int64_t n, const uint8_t * k, const uint8_t * v,
                      const float * importance, layer_append & out);
    // Prefill of a sliding-window layer: attends the started queries (a segment at positions p0..) to
    // batch w of earlier tokens, one run of consecutive positions at a time, with the causal offset
    // that makes the device tier's window mask (attention_shape::window) see positions.
    void attend_position_runs(const kv_batch & w, int64_t p0);
    void commit(int seq, int64_t n, std::vector<layer_append> & layers);
    void abandon(std::vector<layer_append> & layers);
    // Evicts hot tokens outside sinks and windows (lowest hit count first, oldest first among equals)
    // until layer il has need_free[il] free hot slots, or no such token is left. Metadata only: every
    // token keeps its cold copy.
    // Also evicts, first, what a capacity lowered by the planner no longer holds.
    void make_room(std::span<const int64_t> need_free);
    // Sets the hot capacity for the sequences' tokens and n_more to come (the planner's β, or the whole
    // budget); evictions down to it follow in make_room.
    void plan_capacity(int64_t n_more);
    // Hands the planner what the decode step since `before` showed (no-op without a planner).
    struct plan_snapshot {
        uint64_t t_score_host_us = 0, attended_hot = 0, attended_disk = 0, t_pass_us = 0;
        int64_t n_hot = 0, n_tokens = 0;  // token-layers with a hot copy, and in all, at the step's start
    };
    plan_snapshot plan_snap() const;
    void plan_observe(const plan_snapshot & before);
    // The free hot slots, per layer, that seq growing from p0 to n_after tokens needs: its sinks and
    // window tokens not hot now (the new ones among them), and the next decode step's appends.
    std::vector<int64_t> room_for(int seq, int64_t p0, int64_t n_after) const;
    // Calls fn(view, rows, positions) for the sequence's tokens [0, n_past) of layer il: hot rows in
    // place, open rows, then cold pages batch by batch (with_v: K and V; else K only).
    template <class F>
    void for_each_stored(int seq, int il, bool with_v, F && fn);
    attention_shape attn_shape() const;
    size_t kept_index(int seq, int il) const;  // importance_kept_ of (seq, il), position 0
    // The key sketch of policy `infinigen` (score/key_sketch.h), its channels chosen from m's weights.
    std::unique_ptr<hill::scoring_copy> make_key_sketch(const hill::model & m, const policy_params & pp, int n_seq,
                                                        int64_t n_ctx) const;

    const hill::model & model_;
    context_params params_;
    thread_pool & pool_;
    kv_layout layout_;
    std::unique_ptr<arch_forward> forward_;
    std::unique_ptr<kv_cells> cells_;
    std::unique_ptr<hot_arena> hot_;
    hill::device_cache dcache_;  // rows of hot_ after the cells' slots of each layer
    std::unique_ptr<cold_pool> cold_;
    std::unique_ptr<cold_writer> writer_;
    std::unique_ptr<cold_logs> logs_;
    std::unique_ptr<cold_reader> reader_;
    std::unique_ptr<cold_gather> gather_;
    std::unique_ptr<hill::scoring_copy> copy_;
    std::unique_ptr<ordered_gather> ordered_;  // prefill's attention over the tiers, in position order
    std::unique_ptr<csd::device> storage_;
    std::unique_ptr<device_tier> device_;
    std::unique_ptr<hill::policy> policy_;
    std::unique_ptr<decode_step> step_;
    std::unique_ptr<host_scorer> importance_scorer_;  // prefill importance (placement hkm, h2o, kept)
    std::vector<float> importance_kept_;              // f32 [n_seq, n_layer, n_ctx] (keep_prefill_importance)
    std::unique_ptr<hill::planner> planner_;
    int64_t hot_min_ = 0;                             // hot slots the sinks, windows and appends need
    mutable kv_io_stats io_stats_;
    uint64_t gather_read_base_ = 0;
};

}  // namespace hill
