#include "engine/session.h"

#include "compute/attention.h"
#include "compute/ops.h"
#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace hill {

namespace {

kv_store_params store_params(const model & m, const session_params & p) {
    if (p.n_ctx <= 0) fail_usage("context size must be > 0, got {}", p.n_ctx);
    if (m.hp().position == position_kind::learned && p.n_ctx > m.hp().n_ctx_train) {
        fail_usage("a context of {} tokens (-c) exceeds the {} positions this {} model has learned; use -c {} or less",
                   p.n_ctx, m.hp().n_ctx_train, m.hp().arch, m.hp().n_ctx_train);
    }
    if (p.kv_type != ggml_type::f16 && p.kv_type != ggml_type::f32) {
        fail_usage("KV cache type must be f16 or f32, got {}", ggml_type_name(p.kv_type));
    }
    const uint64_t all = m.hp().kv_bytes_per_token(p.kv_type) * uint64_t(p.n_ctx);
    return kv_store_params{p.n_ctx, p.kv_host_budget == 0 ? all : p.kv_host_budget, p.policy.n_sinks, p.kv_dir, p.io_faults};
}

// Rows of f32 values into the KV element type.
void store_rows(const float * src, ggml_type type, int64_t n, void * dst) {
    if (type == ggml_type::f32) {
        std::memcpy(dst, src, size_t(n) * 4);
    } else {
        fp32_to_fp16_row(src, static_cast<uint16_t *>(dst), n);
    }
}

}  // namespace

session::session(const hill::model & m, const session_params & p, thread_pool & pool)
    : model_(m),
      params_(p),
      pool_(pool),
      kv_(kv_layout{m.hp().n_layer, m.hp().n_embd_kv(), p.kv_type}, store_params(m, p)),
      device_(make_cpu_device_tier(pool, std::min(p.n_segment, p.n_ctx), m.hp().n_embd_q(), m.hp().n_head)),
      storage_(csd::make_device(p.storage, kv_, attn_shape(), pool)),
      policy_(make_policy(p.policy, attn_shape(), m.hp().n_layer, p.n_ctx, pool)) {
    if (p.policy.kind == policy_kind::hillinfer) csd::check_scoring(p.storage.kind, p.policy.score);
    const hparams & hp = m.hp();
    HILL_ASSERT(p.n_batch > 0 && p.n_segment > 0);
    forward_ = make_forward(m, pool, p.n_batch);
    const size_t nb = size_t(p.n_batch);
    x_.resize(size_t(hp.n_embd));
    q_.resize(size_t(hp.n_embd_q()));
    k_.resize(nb * size_t(hp.n_embd_kv()));
    v_.resize(nb * size_t(hp.n_embd_kv()));
    attn_.resize(size_t(hp.n_embd_q()));
    pos_.resize(nb);
    kv_row_.resize(2 * kv_.layout().row_bytes());
    logits_.resize(size_t(hp.n_vocab));
}

attention_shape session::attn_shape() const {
    const hparams & hp = model_.hp();
    return attention_shape{hp.n_head, hp.n_head_kv, hp.head_dim, 1.0f / std::sqrt(float(hp.head_dim))};
}

void session::set_policy(const policy_params & p) {
    if (p.kind == policy_kind::hillinfer) csd::check_scoring(params_.storage.kind, p.score);
    policy_ = make_policy(p, attn_shape(), model_.hp().n_layer, params_.n_ctx, pool_);
    params_.policy = p;
}

void session::adopt_kv(int64_t n) {
    HILL_ASSERT(n_past_ == 0 && n > 0 && n <= params_.n_ctx);
    for (int il = 0; il < model_.hp().n_layer; ++il) HILL_ASSERT(kv_.n_tokens(il) == n);
    n_past_ = n;
}

void session::truncate(int64_t n) {
    HILL_ASSERT(n >= 0 && n <= n_past_);
    kv_.truncate(n);
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
    const int64_t n_past0 = n_past_;
    try {
        if (n > 1) {
            // Segments of n_segment tokens; progress counts token-layers of the whole prompt.
            const int64_t n_layer = model_.hp().n_layer;
            for (int64_t s0 = 0; s0 < n; s0 += params_.n_segment) {
                const int64_t ns = std::min<int64_t>(params_.n_segment, n - s0);
                float * out = logits_.data() + (logits_all ? s0 * n_vocab : 0);
                prefill(tokens.data() + s0, ns, logits_all, out, [&](int64_t done) {
                    if (progress) progress(s0 * n_layer + done, n * n_layer);
                });
            }
        } else {
            decode(tokens[0]);
        }
    } catch (...) {
        kv_.truncate(n_past0);  // a failed step leaves the cache as it was
        n_past_ = n_past0;
        throw;
    }
}

const int32_t * session::positions(int64_t p0, int64_t n) {
    HILL_ASSERT(n <= params_.n_batch && p0 + n <= params_.n_ctx);
    for (int64_t t = 0; t < n; ++t) pos_[size_t(t)] = int32_t(p0 + t);
    return pos_.data();
}

void session::prefill(const int32_t * tokens, int64_t n, bool logits_all, float * logits_out,
                      const std::function<void(int64_t)> & progress) {
    const hparams & hp = model_.hp();
    const int64_t n_embd = hp.n_embd, n_kv = hp.n_embd_kv(), n_q = hp.n_embd_q();
    const ggml_type type = params_.kv_type;
    const size_t rb = kv_.layout().row_bytes();
    const int64_t p0 = n_past_;
    // The segment's residual stream, f32 [n, n_embd]; one layer's K and V of it, kv_type
    // [n, n_embd_kv]; its queries and then (in place) their attention outputs, f32 [n, n_embd_q].
    std::vector<float> x(size_t(n) * size_t(n_embd));
    std::vector<uint8_t> layer_k(size_t(n) * rb), layer_v(size_t(n) * rb);
    std::vector<float> qa(size_t(n) * size_t(n_q));
    const int64_t n_batch = params_.n_batch;
    for (int64_t c0 = 0; c0 < n; c0 += n_batch) {
        const int64_t nc = std::min<int64_t>(n_batch, n - c0);
        forward_->embed(tokens + c0, positions(p0 + c0, nc), nc, x.data() + c0 * n_embd);
    }
    const attention_shape shape = attn_shape();
    for (int il = 0; il < hp.n_layer; ++il) {
        for (int64_t c0 = 0; c0 < n; c0 += n_batch) {
            const int64_t nc = std::min<int64_t>(n_batch, n - c0);
            forward_->attention_input(il, x.data() + c0 * n_embd, positions(p0 + c0, nc), nc, qa.data() + c0 * n_q,
                                      k_.data(), v_.data());
            for (int64_t t = 0; t < nc; ++t) {
                store_rows(k_.data() + t * n_kv, type, n_kv, layer_k.data() + size_t(c0 + t) * rb);
                store_rows(v_.data() + t * n_kv, type, n_kv, layer_v.data() + size_t(c0 + t) * rb);
            }
        }
        // Every query of the segment attends to the tokens already in the tiers (earlier segments,
        // a continued sequence) in one pass over them, then causally to the segment's own KV.
        device_->begin(shape, qa.data(), n);
        kv_.for_each_segment(il, [&](const kv_view & view, const int32_t * rows, const int32_t *) {
            device_->attend(view, rows);
        });
        device_->attend(kv_view{type, layer_k.data(), layer_v.data(), n, n_kv}, nullptr, 0);
        device_->end(qa.data());
        for (int64_t c0 = 0; c0 < n; c0 += n_batch) {
            const int64_t nc = std::min<int64_t>(n_batch, n - c0);
            forward_->attention_output(il, x.data() + c0 * n_embd, qa.data() + c0 * n_q, nc);
            progress(int64_t(il) * n + c0 + nc);
        }
        storage_->append(il, n, layer_k.data(), layer_v.data());
    }
    // Every token's logits, or the last one's.
    const int64_t t0 = logits_all ? 0 : n - 1;
    for (int64_t c0 = t0; c0 < n; c0 += n_batch) {
        const int64_t nc = std::min<int64_t>(n_batch, n - c0);
        forward_->logits(x.data() + c0 * n_embd, nc, logits_out + (c0 - t0) * hp.n_vocab);
    }
    n_past_ = p0 + n;
}

void session::decode(int32_t token) {
    const hparams & hp = model_.hp();
    const int64_t n_kv = hp.n_embd_kv();
    const size_t rb = kv_.layout().row_bytes();
    const int32_t * pos = positions(n_past_, 1);
    forward_->embed(&token, pos, 1, x_.data());
    for (int il = 0; il < hp.n_layer; ++il) {
        forward_->attention_input(il, x_.data(), pos, 1, q_.data(), k_.data(), v_.data());
        store_rows(k_.data(), params_.kv_type, n_kv, kv_row_.data());
        store_rows(v_.data(), params_.kv_type, n_kv, kv_row_.data() + rb);
        storage_->append(il, 1, kv_row_.data(), kv_row_.data() + rb);
        policy_->attend(il, q_.data(), kv_, *storage_, *device_, attn_.data());
        forward_->attention_output(il, x_.data(), attn_.data(), 1);
    }
    forward_->logits(x_.data(), 1, logits_.data());
    ++n_past_;
}

}  // namespace hill
