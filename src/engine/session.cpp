#include "engine/session.h"

#include "compute/attention.h"
#include "compute/matmul.h"
#include "compute/ops.h"
#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace hill {

session::session(const model & m, const session_params & p, thread_pool & pool) : model_(m), params_(p), pool_(pool) {
    const hparams & hp = m.hp();
    if (p.n_ctx <= 0) fail_usage("context size must be > 0, got {}", p.n_ctx);
    if (p.kv_type != ggml_type::f16 && p.kv_type != ggml_type::f32) {
        fail_usage("KV cache type must be f16 or f32, got {}", ggml_type_name(p.kv_type));
    }
    HILL_ASSERT(p.n_batch > 0);
    kv_layer_bytes_ = size_t(p.n_ctx) * size_t(hp.n_embd_kv()) * ggml_block_bytes(p.kv_type);
    const size_t total = kv_layer_bytes_ * size_t(hp.n_layer);
    // Not zero-filled: untouched pages of a large cache stay unmapped until used.
    k_cache_ = std::make_unique_for_overwrite<uint8_t[]>(total);
    v_cache_ = std::make_unique_for_overwrite<uint8_t[]>(total);

    const size_t nb = size_t(p.n_batch);
    x_.resize(nb * size_t(hp.n_embd));
    xn_.resize(nb * size_t(hp.n_embd));
    q_.resize(nb * size_t(hp.n_embd_q()));
    k_.resize(nb * size_t(hp.n_embd_kv()));
    v_.resize(nb * size_t(hp.n_embd_kv()));
    attn_.resize(nb * size_t(hp.n_embd_q()));
    gate_.resize(nb * size_t(hp.n_ff));
    up_.resize(nb * size_t(hp.n_ff));
    logits_.resize(size_t(hp.n_vocab));
}

void session::truncate(int64_t n) {
    HILL_ASSERT(n >= 0 && n <= n_past_);
    n_past_ = n;
}

void session::eval(std::span<const int32_t> tokens, bool logits_all,
                   const std::function<void(int64_t, int64_t)> & progress) {
    const int64_t n = int64_t(tokens.size());
    if (n == 0) return;
    if (n_past_ + n > params_.n_ctx) {
        fail_usage("{} tokens after {} already in the context exceed the context size of {} tokens (-c)", n, n_past_,
                   params_.n_ctx);
    }
    const int32_t n_vocab = model_.hp().n_vocab;
    for (int32_t t : tokens) {
        if (t < 0 || t >= n_vocab) fail_input("token id {} is out of range [0, {})", t, n_vocab);
    }
    if (logits_all) logits_.resize(size_t(n) * size_t(n_vocab));
    for (int64_t i = 0; i < n; i += params_.n_batch) {
        const int64_t nc = std::min<int64_t>(params_.n_batch, n - i);
        float * out = logits_all ? logits_.data() + size_t(i) * size_t(n_vocab) : logits_.data();
        forward_chunk(tokens.data() + i, nc, logits_all, out);
        if (progress) progress(i + nc, n);
    }
}

void session::forward_chunk(const int32_t * tokens, int64_t n, bool logits_all, float * logits_out) {
    const hparams & hp = model_.hp();
    const int64_t n_embd = hp.n_embd, n_q = hp.n_embd_q(), n_kv = hp.n_embd_kv(), n_ff = hp.n_ff;
    const int64_t p0 = n_past_;
    const size_t elem = ggml_block_bytes(params_.kv_type);

    for (int64_t t = 0; t < n; ++t) {
        const weight_view & e = model_.token_embd();
        dequantize_row(e.type, e.row(tokens[t]), x_.data() + t * n_embd, n_embd);
    }

    const attention_shape shape{hp.n_head, hp.n_head_kv, hp.head_dim, 1.0f / std::sqrt(float(hp.head_dim))};
    for (int il = 0; il < hp.n_layer; ++il) {
        const layer_weights & l = model_.layers()[size_t(il)];
        uint8_t * kc = k_cache_.get() + size_t(il) * kv_layer_bytes_;
        uint8_t * vc = v_cache_.get() + size_t(il) * kv_layer_bytes_;

        // Attention.
        for (int64_t t = 0; t < n; ++t) {
            rmsnorm(x_.data() + t * n_embd, l.attn_norm.data(), xn_.data() + t * n_embd, n_embd, hp.rms_eps);
        }
        gemm(l.wq, xn_.data(), n, q_.data(), pool_);
        gemm(l.wk, xn_.data(), n, k_.data(), pool_);
        gemm(l.wv, xn_.data(), n, v_.data(), pool_);
        for (int64_t t = 0; t < n; ++t) {
            rope(q_.data() + t * n_q, hp.n_head, hp.head_dim, p0 + t, hp.rope_freq_base, hp.rope_freq_scale);
            rope(k_.data() + t * n_kv, hp.n_head_kv, hp.head_dim, p0 + t, hp.rope_freq_base, hp.rope_freq_scale);
            uint8_t * kd = kc + size_t(p0 + t) * size_t(n_kv) * elem;
            uint8_t * vd = vc + size_t(p0 + t) * size_t(n_kv) * elem;
            if (params_.kv_type == ggml_type::f32) {
                std::memcpy(kd, k_.data() + t * n_kv, size_t(n_kv) * 4);
                std::memcpy(vd, v_.data() + t * n_kv, size_t(n_kv) * 4);
            } else {
                fp32_to_fp16_row(k_.data() + t * n_kv, reinterpret_cast<uint16_t *>(kd), n_kv);
                fp32_to_fp16_row(v_.data() + t * n_kv, reinterpret_cast<uint16_t *>(vd), n_kv);
            }
        }
        const kv_view kv{params_.kv_type, kc, vc, p0 + n, n_kv};
        if (n == 1) {
            attention_decode(shape, q_.data(), kv, attn_.data(), pool_);
        } else {
            attention_prefill(shape, q_.data(), n, p0, kv, attn_.data(), pool_);
        }
        gemm(l.wo, attn_.data(), n, xn_.data(), pool_);
        add_inplace(x_.data(), xn_.data(), n * n_embd);

        // Feed-forward.
        for (int64_t t = 0; t < n; ++t) {
            rmsnorm(x_.data() + t * n_embd, l.ffn_norm.data(), xn_.data() + t * n_embd, n_embd, hp.rms_eps);
        }
        gemm(l.ffn_gate, xn_.data(), n, gate_.data(), pool_);
        gemm(l.ffn_up, xn_.data(), n, up_.data(), pool_);
        swiglu(gate_.data(), up_.data(), n * n_ff);
        gemm(l.ffn_down, gate_.data(), n, xn_.data(), pool_);
        add_inplace(x_.data(), xn_.data(), n * n_embd);
    }

    // Output: all rows, or only the last.
    const int64_t t0 = logits_all ? 0 : n - 1;
    for (int64_t t = t0; t < n; ++t) {
        rmsnorm(x_.data() + t * n_embd, model_.output_norm().data(), xn_.data() + (t - t0) * n_embd, n_embd,
                hp.rms_eps);
    }
    gemm(model_.output(), xn_.data(), n - t0, logits_out, pool_);
    n_past_ += n;
}

}  // namespace hill
