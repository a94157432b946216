// llama2.c legacy checkpoints (run.c "version 0"): 7 little-endian int32 {dim, hidden_dim,
// n_layers, n_heads, n_kv_heads, vocab_size, seq_len} — vocab_size < 0 means a separate
// classifier follows — then f32 arrays in this order: token_embedding [vocab, dim],
// rms_att [L, dim], wq [L, n_heads*hs, dim], wk [L, n_kv_heads*hs, dim], wv [L, n_kv_heads*hs, dim],
// wo [L, dim, n_heads*hs], rms_ffn [L, dim], w1 [L, hidden, dim], w2 [L, dim, hidden],
// w3 [L, hidden, dim], rms_final [dim], freq_cis_real [seq, hs/2], freq_cis_imag [seq, hs/2]
// (unused: RoPE is recomputed), then wcls [vocab, dim] when not shared. w1 is the gate, w3 the up
// projection, w2 the down projection; RoPE rotates adjacent pairs with base 10000; RMSNorm eps 1e-5.
#include "core/error.h"
#include "model/model.h"

#include <cmath>
#include <cstring>

namespace hill {

std::unique_ptr<model> load_llama2c(const std::string & path, const std::string & tokenizer_path) {
    mapped_file map(path);
    if (map.size() < 28) {
        fail_input("'{}': {} bytes is too short for a llama2.c header (28 bytes of 7 int32)", path, map.size());
    }
    int32_t h[7];
    std::memcpy(h, map.data(), sizeof(h));
    const char * names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
    for (int i = 0; i < 7; ++i) {
        if (i != 5 && (h[i] <= 0 || h[i] > (1 << 24))) {
            fail_input("'{}': llama2.c header field {} is {}, expected 1..{}", path, names[i], h[i], 1 << 24);
        }
    }
    const bool shared_cls = h[5] > 0;
    const int64_t vocab = h[5] > 0 ? int64_t(h[5]) : -int64_t(h[5]);
    if (vocab <= 0 || vocab > (1 << 24))
        fail_input("'{}': llama2.c vocab_size is {}, expected 1..{} in magnitude (negative: a separate classifier)",
                   path, h[5], 1 << 24);
    const int64_t dim = h[0], hidden = h[1], L = h[2], nh = h[3], nkv = h[4], seq = h[6];
    if (dim % nh != 0 || (dim / nh) % 2 != 0) {
        fail_input("'{}': dim {} must be a multiple of n_heads {} with an even head size", path, dim, nh);
    }
    if (nh % nkv != 0) fail_input("'{}': n_heads {} is not a multiple of n_kv_heads {}", path, nh, nkv);
    const int64_t hs = dim / nh;
    const int64_t kv_dim = nkv * hs;

    // Expected size, in floats (all factors < 2^24, so products of three stay far below 2^63).
    const int64_t n_floats = vocab * dim + L * dim + L * dim * dim + 2 * L * kv_dim * dim + L * dim * dim + L * dim +
                             3 * L * hidden * dim + dim + seq * hs + (shared_cls ? 0 : vocab * dim);
    const uint64_t expected = 28 + uint64_t(n_floats) * 4;
    if (map.size() != expected) {
        fail_input("'{}': file is {} bytes, but its llama2.c header (dim {}, hidden_dim {}, n_layers {}, n_heads {}, "
                   "n_kv_heads {}, vocab_size {}, seq_len {}) implies {} bytes",
                   path, map.size(), dim, hidden, L, nh, nkv, h[5], seq, expected);
    }

    std::unique_ptr<model> m(new model());
    m->path_ = path;
    m->format_ = "llama2.c";
    hparams & hp = m->hp_;
    hp.arch = "llama";
    hp.n_vocab = int32_t(vocab);
    hp.n_ctx_train = int32_t(seq);
    hp.n_embd = int32_t(dim);
    hp.n_ff = int32_t(hidden);
    hp.n_layer = int32_t(L);
    hp.n_head = int32_t(nh);
    hp.n_head_kv = int32_t(nkv);
    hp.head_dim = int32_t(hs);
    hp.n_embd_word = int32_t(dim);
    hp.rms_eps = 1e-5f;
    hp.rope_freq_base = 10000.0f;
    hp.rope_freq_scale = 1.0f;
    hp.attn_scale = 1.0f / std::sqrt(float(hs));

    const float * p = reinterpret_cast<const float *>(map.data() + 28);
    auto take = [&p](int64_t n) {
        const float * q = p;
        p += n;
        return q;
    };
    auto mat = [](const float * d, int64_t rows, int64_t cols) { return weight_view{ggml_type::f32, rows, cols, d}; };
    m->token_embd_ = mat(take(vocab * dim), vocab, dim);
    m->layers_.resize(size_t(L));
    const float * rms_att = take(L * dim);
    const float * wq = take(L * dim * dim);
    const float * wk = take(L * kv_dim * dim);
    const float * wv = take(L * kv_dim * dim);
    const float * wo = take(L * dim * dim);
    const float * rms_ffn = take(L * dim);
    const float * w1 = take(L * hidden * dim);
    const float * w2 = take(L * dim * hidden);
    const float * w3 = take(L * hidden * dim);
    const float * rms_final = take(dim);
    take(seq * hs);  // freq_cis_real and freq_cis_imag: seq * hs/2 each
    for (int64_t il = 0; il < L; ++il) {
        layer_weights & l = m->layers_[size_t(il)];
        l.attn_norm.assign(rms_att + il * dim, rms_att + (il + 1) * dim);
        l.wq = mat(wq + il * dim * dim, dim, dim);
        l.wk = mat(wk + il * kv_dim * dim, kv_dim, dim);
        l.wv = mat(wv + il * kv_dim * dim, kv_dim, dim);
        l.wo = mat(wo + il * dim * dim, dim, dim);
        l.ffn_norm.assign(rms_ffn + il * dim, rms_ffn + (il + 1) * dim);
        l.ffn_gate = mat(w1 + il * hidden * dim, hidden, dim);
        l.ffn_down = mat(w2 + il * dim * hidden, dim, hidden);
        l.ffn_up = mat(w3 + il * hidden * dim, hidden, dim);
    }
    m->output_norm_.assign(rms_final, rms_final + dim);
    m->vector_params_[ggml_type::f32] = uint64_t(2 * L * dim + dim);
    if (shared_cls) {
        m->output_ = m->token_embd_;
        m->output_tied_ = true;
    } else {
        m->output_ = mat(take(vocab * dim), vocab, dim);
    }
    m->tokenizer_ = load_llama2c_tokenizer(tokenizer_path, int32_t(vocab));
    m->bin_.emplace(std::move(map));
    return m;
}

}  // namespace hill
