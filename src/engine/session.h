// One sequence being run through a model: its KV cache (kv/kv_store.h: a hot pool in DRAM and, when
// the host budget is smaller than the context, a cold pool on SSD), its residual stream, and
// attention. The forward pass around attention — embeddings, each block's norm, Q/K/V projections
// and RoPE before attention, its output projection and FFN after, the logits — is the model
// architecture's (model/forward.h); prefill and decode call the same pieces, at consecutive
// positions for a prompt chunk and at n_past for a decoded token.
//
// Prefill is layer-major (DESIGN.md §3): every prompt token goes through layer il (in chunks of
// n_batch tokens), then layer il's KV is appended to the store, before layer il+1 starts. A chunk
// attends to the tokens already in the tiers (earlier segments of a long prompt, a sequence being
// continued, e.g. after a prompt cache was loaded) and causally to the prompt's own KV of this
// layer, held in RAM for this layer only. A prompt longer than n_segment tokens is prefilled in
// segments of n_segment tokens; each layer reads the tokens already in the tiers once per segment
// (all of the segment's queries attend to them in one pass). Peak memory is weights + host budget
// + one layer's KV of one segment + the segment's residual stream, queries and attention state +
// one chunk's activations, whatever the prompt length and the number of layers (beyond that, only
// the token map and hit table grow with the context).
//
// Decode attends as the policy chooses (policy/attention_policy.h; `full`: densely to every
// cached token wherever it lives, the hot tokens in place, the cold ones page batch by page batch).
// Attention runs in the device tier (kv/device_tier.h), one online softmax over all segments. The
// tokens in written cold pages are scored and read at decode through the storage device
// (csd/device.h: plain SSD or the CSD emulator, `storage`); prefill reads them through the store.
#pragma once

#include "core/thread_pool.h"
#include "kv/device_tier.h"
#include "kv/kv_store.h"
#include "model/forward.h"
#include "model/model.h"
#include "policy/attention_policy.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace hill {

struct session_params {
    int32_t n_ctx = 0;                  // KV capacity in tokens (> 0)
    ggml_type kv_type = ggml_type::f16; // f16 or f32
    int32_t n_batch = 256;              // prompt tokens per forward chunk (activation memory)
    int32_t n_segment = 8192;           // prompt tokens per layer-major pass (the prompt's residual stream and one
                                        // layer's KV of it are held for this many tokens); longer prompts are
                                        // prefilled segment after segment, each attending to the ones before in the tiers
    uint64_t kv_host_budget = 0;        // hot pool bytes (all layers); 0: the whole context in RAM
    std::string kv_dir;                 // cold pool directory (needed when the budget is below the context)
    policy_params policy;               // decode attention policy; its n_sinks also stay hot in the store
    csd::storage_params storage;        // the device that holds the cold pool (plain SSD or CSD emulator)
    io_fault_hook io_faults;            // tests: injected cold-pool I/O results
};

class session {
public:
    // Errors: n_ctx <= 0 or kv_type not f16/f32 (exit_code::usage); KV store errors (budget,
    // kv_dir, free space); storage device errors (csd::make_device, csd::check_scoring).
    session(const hill::model & m, const session_params & p, thread_pool & pool);

    // Runs `tokens` at positions [n_past(), n_past() + n) and appends their K/V. When
    // logits_all, logits() holds f32 [n, n_vocab] (one row per token); otherwise f32 [n_vocab]
    // for the last token. `progress(done, total)` is called after each chunk of each layer of a
    // prompt (done counts token-layers). Errors: n_past() + n > n_ctx (exit_code::usage, naming
    // both), a token id out of range; cold pool I/O errors (the session stays at its old n_past).
    void eval(std::span<const int32_t> tokens, bool logits_all = false,
              const std::function<void(int64_t, int64_t)> & progress = {});

    const float * logits() const { return logits_.data(); }
    int64_t n_past() const { return n_past_; }
    int32_t n_ctx() const { return params_.n_ctx; }
    const kv_store & kv() const { return kv_; }
    kv_store & kv() { return kv_; }
    const hill::model & model() const { return model_; }
    const attention_policy & policy() const { return *policy_; }
    // Replaces the decode attention policy (with fresh statistics); the KV and its placement stay as
    // they are (the store keeps hot the sinks it was built with). Policies act at decode, so one
    // prefill can be decoded under several policies (truncate back to the prompt in between).
    // Errors: scoring parameters the storage device cannot run (csd::check_scoring).
    void set_policy(const policy_params & p);
    const device_tier & device() const { return *device_; }
    const csd::device & storage() const { return *storage_; }
    // After tokens [0, n) were appended to every layer of kv() from outside (a prompt cache):
    // the session continues at position n. Asserts the store holds exactly n tokens per layer.
    void adopt_kv(int64_t n);
    // Forgets tokens from position n on (n <= n_past()).
    void truncate(int64_t n);

private:
    // One layer-major pass over n <= n_segment tokens; logits_out: f32 [n, n_vocab] (logits_all) or
    // [n_vocab] for the last token; progress(done token-layers of this pass).
    void prefill(const int32_t * tokens, int64_t n, bool logits_all, float * logits_out,
                 const std::function<void(int64_t)> & progress);
    void decode(int32_t token);
    // pos_ [0, n) = p0, p0 + 1, ...: the positions of n <= n_batch consecutive tokens.
    const int32_t * positions(int64_t p0, int64_t n);
    attention_shape attn_shape() const;

    const hill::model & model_;
    session_params params_;
    thread_pool & pool_;
    kv_store kv_;
    std::unique_ptr<device_tier> device_;  // where attention runs (CPU build: in place over host memory)
    std::unique_ptr<csd::device> storage_;  // scores and reads the cold pages at decode
    std::unique_ptr<attention_policy> policy_;  // which tokens a decode step attends to
    int64_t n_past_ = 0;

    std::unique_ptr<arch_forward> forward_;  // the model's forward pass around attention, n_batch rows per call

    std::vector<float> x_;       // f32 [n_embd]: the decode token's residual stream
    std::vector<float> q_;       // f32 [n_head * head_dim]: the decode token's query
    std::vector<float> k_;       // f32 [n_batch, n_head_kv * head_dim]
    std::vector<float> v_;       // f32 [n_batch, n_head_kv * head_dim]
    std::vector<float> attn_;    // f32 [n_head * head_dim]: the decode token's attention output
    std::vector<int32_t> pos_;   // i32 [n_batch]: positions of a chunk's tokens
    std::vector<uint8_t> kv_row_;       // kv_type [2, n_head_kv * head_dim]: the decode token's K and V
    std::vector<float> logits_;  // f32 [1 or n, n_vocab]
};

}  // namespace hill
