// Generation for many requests with continuous batching over a context's sequences (DESIGN.md §8;
// Orca, Yu et al., OSDI 2022): at most `parallel` sequences decode together, one token each per decode
// step of the batch; a sequence that finishes (EOS or a stop token, its token budget, the context's
// end, a cancel) leaves the batch at the step boundary, its KV is freed, and the next waiting request
// is prefilled and joins. Every request has its own sampler (its own seed), so what a prompt
// generates does not depend on the others: with greedy sampling and a whole-prompt prefill it is
// exactly what it generates alone (the step's kernels and its position-ordered attention are
// batch-invariant; sched/decode_step.h).
//
// The generator is a step-wise owner: submit() queues a request at any time, step() runs one step
// (admission, at most one prefill chunk or the whole prompts that fit, then one decode step of the
// running sequences), cancel() ends a request at the next step boundary. run() drives it over a fixed
// list (`generate --prompts`); the server (server/server.h) drives it from its engine thread as
// requests arrive.
//
// Chunked prefill (Sarathi-Serve, Agrawal et al., OSDI 2024): with prefill_chunk > 0 a step prefills
// at most prefill_chunk prompt tokens of one request before the decode step of the running ones, so
// that a long prompt delays the running streams by one chunk's prefill per token instead of its whole
// prefill. The chunks attend to the earlier ones through the tiers (context::prefill), so the logits
// may differ from a whole-prompt prefill in the last bits; prefill_chunk 0 prefills whole prompts.
//
// Prefix reuse (reuse_prefix, the server): a finished request's sequence keeps its KV (the prompt and
// the generated tokens that were decoded) while no other request needs the slot; a new request takes
// the free sequence whose tokens share the longest prefix with its prompt, truncates the rest
// (context::truncate) and prefills only the tokens after the shared prefix. A returning conversation
// (turn N's prompt starts with turns 1..N-1) thus skips their prefill when its sequence is still
// resident; otherwise the least recently used free sequence is taken. Cancelled, failed and
// interrupted requests free their KV at once.
//
// On-disk prompt cache (set_prompt_cache, the server's --cache-dir; engine/prompt_cache_dir.h): a kept
// sequence's KV is saved there when it is about to be dropped — its slot taken by a request that shares
// less than three quarters of its tokens (a conversation that continues in its own slot drops only the
// few tokens at the end of the last reply that the next prompt tokenizes differently: not saved), or,
// without reuse_prefix, its request finished — and at save_kept()
// (shutdown). A new request whose prompt shares a longer prefix with an entry than with any free
// sequence loads that prefix (verified) instead of prefilling it. Sequences that a sliding-window layer
// has cut are not saved (their KV is no longer whole).
//
// Thread use: every method on the thread that owns the context.
#pragma once

#include "engine/context.h"
#include "engine/prompt_cache_dir.h"
#include "engine/sampler.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace hill {

struct generation_request {
    std::vector<int32_t> prompt;       // token ids, at least one
    int32_t n_predict = 128;           // tokens to generate at most (>= 0)
    sampler_params sampling;
    std::vector<int32_t> stop_tokens;  // tokens that end the generation (not included, stop "eos"); empty:
                                       // the generator's EOS
};

struct generation_result {
    std::vector<int32_t> ids;     // the generated tokens (EOS not included)
    std::string stop;             // "eos", "length" (n_predict reached), "context" (n_ctx reached),
                                  // "interrupted", "error" (see error), or the stop given to cancel()
    std::string error;            // the failure's message when stop == "error"
    int64_t prompt_tokens = 0;
    int64_t reused_tokens = 0;    // prompt tokens whose KV was reused: kept in a sequence or loaded from disk
    int64_t disk_tokens = 0;      // of those, loaded from the on-disk prompt cache
    double prefill_s = 0.0;       // its prefill (all chunks)
    double decode_s = 0.0;        // wall time of the batch steps it took part in
    int64_t decode_steps = 0;     // steps it took part in (generated tokens after the first)
    int64_t max_batch = 0;        // the largest batch it decoded in
    uint64_t n_context = 0;       // Σ context tokens over its decode steps and layers
    uint64_t n_attended = 0;      // Σ tokens attended by them (n_attended / n_context: its attended share)
};

struct batch_progress {
    // Called on the owner thread after a request's token was sampled (streaming); may be empty. The
    // callback may cancel() the request (a stop string): it ends before its next step.
    std::function<void(size_t request, int32_t token)> on_token;
    // Called when a request finished, in finishing order; may be empty. The generator forgets it then.
    std::function<void(size_t request, const generation_result &)> on_done;
    // Polled between steps by run(): true stops every request that is still running (stop "interrupted").
    std::function<bool()> stop_requested;
    // Prefill progress of one prompt (as context::prefill's).
    std::function<void(int64_t, int64_t)> on_prefill;
};

class batch_generator {
public:
    // parallel: the most sequences decoding at once (1 <= parallel <= ctx.n_seq()), each of them empty
    // now. eos: the EOS id (-1: none). prefill_chunk: prompt tokens prefilled per step (0: whole prompts;
    // see the file comment).
    batch_generator(context & ctx, int parallel, int32_t eos, int32_t prefill_chunk = 0, bool reuse_prefix = false);

    // The on-disk prompt cache (nullptr: none); not owned, outlives the generator. See the file comment.
    void set_prompt_cache(prompt_cache_dir * dir) { disk_ = dir; }
    // Saves the KV of every kept sequence to the on-disk prompt cache (shutdown); failures are warnings.
    void save_kept();

    // Queues a request; returns its id (0, 1, ... in submission order). Asserted: the prompt is non-empty.
    size_t submit(generation_request req);
    // Ends request `id` with stop `stop`: at once when it waits (on_done is called from here), else when
    // on_token for it returns (when called from there) or at the start of the next step, its KV freed
    // then. An id that is not waiting or running: nothing.
    void cancel(size_t id, const std::string & stop, const batch_progress & cb);
    // One step: cancelled requests leave; waiting requests take free sequences; a prefill chunk (or,
    // with prefill_chunk 0, the whole prompts of the requests that joined); then one decode step of the
    // sequences whose prompt is in. A request whose prompt is longer than the context fails (stop
    // "error"); an error of a decode step (I/O, device) fails the requests of that step and the others
    // go on; exit_code::interrupted from a prefill or step is rethrown after its requests ended
    // "interrupted". Returns false when nothing was waiting or running (nothing done).
    bool step(const batch_progress & cb);
    // Ends every waiting and running request with stop `stop` (on_done for each), freeing their KV.
    void stop_all(const std::string & stop, const batch_progress & cb);

    size_t n_waiting() const { return waiting_.size(); }
    size_t n_running() const { return running_.size(); }  // prefilling or decoding
    bool idle() const { return waiting_.empty() && running_.empty(); }
    // Tokens in the KV of finished requests' sequences, kept for prefix reuse (all layers count once).
    int64_t n_kept_tokens() const;

    // Runs every request (submit, then step until idle); results in request order; cb.stop_requested
    // ends everything with "interrupted". Requires an idle generator.
    std::vector<generation_result> run(std::span<const generation_request> requests, const batch_progress & cb = {});

    // Aggregate numbers since construction (run(): since its start).
    struct totals {
        int64_t steps = 0;            // batch decode steps
        int64_t tokens = 0;           // tokens decoded by them
        double decode_s = 0.0;        // their wall time
        double prefill_s = 0.0;
        int64_t prompt_tokens = 0;
        int64_t max_batch = 0;
        double max_step_s = 0.0;      // the longest step(): its prefill chunk and its decode step
        double last_step_s = 0.0;     // the last step()
    };
    const totals & last_totals() const { return totals_; }

private:
    struct running {
        size_t id = 0;
        int seq = -1;
        generation_request req;
        generation_result res;
        std::unique_ptr<sampler> smp;
        int64_t n_prefilled = 0;  // prompt tokens in the KV
        int32_t last = 0;         // the token to decode next, once the prompt is in
        bool decoding = false;
        uint64_t seq_context0 = 0, seq_attended0 = 0;  // the step statistics of its sequence before a step
        std::string cancel;       // a cancel() stop to apply at the next boundary
    };
    void finish(running & r, const std::string & stop, const batch_progress & cb, const std::string & error = {});
    // Samples r's next token from logits f32 [n_vocab]; false when the request finished.
    bool next_token(running & r, float * logits, const batch_progress & cb);
    // Takes a free sequence for r: with reuse_prefix the one sharing the longest prefix with its prompt
    // (truncated to it, r.n_prefilled set), else the least recently used one.
    void take_sequence(running & r);
    // Saves free sequence seq's kept KV to the on-disk prompt cache, if any (and whole).
    void save_to_disk(int seq);
    // Prefills the next chunk of r (the whole rest with prefill_chunk 0); false when r failed (finished).
    bool prefill_chunk(running & r, const batch_progress & cb);

    context & ctx_;
    int parallel_;
    int32_t eos_;
    int32_t prefill_chunk_;
    size_t next_id_ = 0;
    std::deque<running> waiting_;
    std::vector<std::unique_ptr<running>> running_;  // in admission order
    std::vector<int> free_seqs_;
    std::vector<std::vector<int32_t>> seq_tokens_;  // [n_seq] reuse_prefix: the tokens whose KV a free sequence holds
    std::vector<int64_t> seq_used_;                 // [n_seq] reuse_prefix: when each was last released (LRU)
    int64_t n_released_ = 0;
    bool reuse_prefix_;
    prompt_cache_dir * disk_ = nullptr;
    std::vector<float> logits_;     // f32 [n_batch, n_vocab]
    std::vector<int> seqs_;
    std::vector<int32_t> tokens_;
    totals totals_;
};

}  // namespace hill
