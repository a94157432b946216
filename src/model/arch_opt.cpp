// Architecture `opt` (Zhang et al. 2022, "OPT: Open Pre-trained Transformer Language Models"), from
// Hugging Face folders and from the GGUF files `hillinfer convert` writes (llama.cpp's GGUF defines no
// OPT architecture: the `opt.*` keys and the tensor names token_embd_proj / output_proj are
// HillInfer's, in llama.cpp's style; model/hf_convert.h). The block, as transformers' modeling_opt
// computes it:
//   x = embed_tokens[t] (projected by project_in when word_embed_proj_dim != hidden_size)
//       + embed_positions[pos + 2]            (learned; OPT reserves the first two rows)
//   pre-norm (do_layer_norm_before, all sizes but 350m):
//       x += out_proj(attn(LN1(x)));  x += fc2(relu(fc1(LN2(x))));  ... final LN at the end
//   post-norm (350m): x = LN1(x + out_proj(attn(x)));  x = LN2(x + fc2(relu(fc1(x))));  no final LN
//   logits = embed_tokens · (project_out(x))  (lm_head tied to embed_tokens unless stored)
// Every linear layer has a bias; LayerNorm eps is 1e-5 (torch's default; OPT's config has no key;
// GGUF: opt.attention.layer_norm_epsilon, as convert writes it). The forward pass of that block
// (model/forward.h) is at the end of this file.
#include "compute/ops.h"
#include "core/error.h"
#include "format/gguf_file.h"
#include "format/hf_checkpoint.h"
#include "model/forward.h"
#include "model/model_loader.h"

#include <fmt/format.h>

namespace hill {

void opt_hparams_hf(const hf_checkpoint & c, hparams & hp) {
    const std::string cfg = c.config_path();
    const json_value config = c.config();
    hp.arch = "opt";
    hp.n_vocab = config.required_int("/vocab_size", 1, INT32_MAX);
    hp.n_embd = config.required_int("/hidden_size", 1, 1 << 20);
    hp.n_ff = config.required_int("/ffn_dim", 1, 1 << 22);
    hf_layer_hparams(c, hp);
    hp.n_ctx_train = config.required_int("/max_position_embeddings", 1, 1 << 24);
    hp.n_embd_word = config.optional_int("/word_embed_proj_dim", 1, 1 << 20).value_or(hp.n_embd);
    hp.norm = norm_kind::layer;
    hp.rms_eps = 1e-5f;
    hp.norm_before = config.optional<bool>("/do_layer_norm_before").value_or(true);
    hp.ffn = ffn_kind::relu;
    hp.position = position_kind::learned;
    if (auto act = config.optional<std::string>("/activation_function"); act && *act != "relu") {
        fail_input("'{}': activation_function is '{}'; supported: relu", cfg, *act);
    }
    if (!config.optional<bool>("/enable_bias").value_or(true)) {
        fail_input("'{}': enable_bias is false; supported: true", cfg);
    }
    if (!config.optional<bool>("/layer_norm_elementwise_affine").value_or(true)) {
        fail_input("'{}': layer_norm_elementwise_affine is false; supported: true", cfg);
    }
}

// The keys write_hparams (hf_convert.cpp) writes for `opt`, all required: a GGUF `opt` file comes
// only from `hillinfer convert`, so a missing key is a damaged or foreign file, not an older writer.
// head_count_kv (MHA: equal to head_count) and key_length (n_embd / n_head) are checked when present;
// vocab_size is not read (the GGUF loader takes the vocabulary size from the tokenizer).
void opt_hparams_gguf(const gguf_file & f, hparams & hp) {
    const std::string & path = f.name();
    const auto int_in = [&](const char * key, int64_t lo, int64_t hi) {
        return gguf_required_int(f, std::string("opt.") + key, lo, hi);
    };
    hp.arch = "opt";
    hp.n_ctx_train = int_in("context_length", 1, 1 << 24);
    hp.n_embd = int_in("embedding_length", 1, 1 << 20);
    hp.n_ff = int_in("feed_forward_length", 1, 1 << 22);
    hp.n_layer = int_in("block_count", 1, 4096);
    hp.n_head = int_in("attention.head_count", 1, 4096);
    hp.n_head_kv = hp.n_head;
    if (auto kv = f.get_int("opt.attention.head_count_kv"); kv && *kv != hp.n_head) {
        fail_input("'{}': opt.attention.head_count_kv is {}; OPT has multi-head attention, expected head_count {}",
                   path, *kv, hp.n_head);
    }
    if (hp.n_embd % hp.n_head != 0) {
        fail_input("'{}': opt.embedding_length {} is not a multiple of opt.attention.head_count {}", path, hp.n_embd,
                   hp.n_head);
    }
    hp.head_dim = hp.n_embd / hp.n_head;
    if (auto kl = f.get_int("opt.attention.key_length"); kl && *kl != hp.head_dim) {
        fail_input("'{}': opt.attention.key_length is {}, expected embedding_length / head_count = {}", path, *kl,
                   hp.head_dim);
    }
    const std::optional<double> eps = f.get_float("opt.attention.layer_norm_epsilon");
    if (!eps) fail_input("'{}': metadata key 'opt.attention.layer_norm_epsilon' is missing", path);
    hp.rms_eps = float(*eps);
    hp.n_embd_word = int_in("word_embedding_length", 1, 1 << 20);
    const std::optional<bool> before = f.get_bool("opt.layer_norm_before");
    if (!before) fail_input("'{}': metadata key 'opt.layer_norm_before' is missing", path);
    hp.norm_before = *before;
    hp.norm = norm_kind::layer;
    hp.ffn = ffn_kind::relu;
    hp.position = position_kind::learned;
}

void opt_weights(const tensor_source & src, model & m) {
    model_loader::opt_model_weights(src, m);
}

void model_loader::opt_model_weights(const tensor_source & src, model & m) {
    const hparams & hp = m.hp_;
    m.token_embd_ = matrix(src, m, "token_embd.weight", hp.n_vocab, hp.n_embd_word);
    // OPT's position table has n_ctx_train + 2 rows; position p uses row p + 2.
    const weight_view pos = matrix(src, m, "position_embd.weight", int64_t(hp.n_ctx_train) + 2, hp.n_embd);
    m.pos_embd_ = weight_view{pos.type, hp.n_ctx_train, hp.n_embd, pos.row(2)};
    if (hp.n_embd_word != hp.n_embd) {
        m.proj_in_ = matrix(src, m, "token_embd_proj.weight", hp.n_embd, hp.n_embd_word);
        m.proj_out_ = matrix(src, m, "output_proj.weight", hp.n_embd_word, hp.n_embd);
    }
    // The final LayerNorm exists in pre-norm models (transformers drops it from those with
    // _remove_final_layer_norm, hence optional) and never in post-norm ones.
    if (hp.norm_before) {
        m.output_norm_ = vector_opt(src, m, "output_norm.weight", hp.n_embd);
        if (!m.output_norm_.empty()) m.output_norm_b_ = vector_f32(src, m, "output_norm.bias", hp.n_embd);
    }
    if (std::optional<weight_view> out = matrix_opt(src, m, "output.weight", hp.n_vocab, hp.n_embd_word)) {
        m.output_ = *out;
    } else {
        m.output_ = m.token_embd_;
        m.output_tied_ = true;
    }
    const int64_t n = hp.n_embd;
    m.layers_.resize(size_t(hp.n_layer));
    for (int il = 0; il < hp.n_layer; ++il) {
        layer_weights & l = m.layers_[size_t(il)];
        const std::string p = fmt::format("blk.{}.", il);
        l.attn_norm = vector_f32(src, m, p + "attn_norm.weight", n);
        l.attn_norm_b = vector_f32(src, m, p + "attn_norm.bias", n);
        l.wq = matrix(src, m, p + "attn_q.weight", n, n);
        l.wk = matrix(src, m, p + "attn_k.weight", n, n);
        l.wv = matrix(src, m, p + "attn_v.weight", n, n);
        l.wo = matrix(src, m, p + "attn_output.weight", n, n);
        l.bq = vector_f32(src, m, p + "attn_q.bias", n);
        l.bk = vector_f32(src, m, p + "attn_k.bias", n);
        l.bv = vector_f32(src, m, p + "attn_v.bias", n);
        l.bo = vector_f32(src, m, p + "attn_output.bias", n);
        l.ffn_norm = vector_f32(src, m, p + "ffn_norm.weight", n);
        l.ffn_norm_b = vector_f32(src, m, p + "ffn_norm.bias", n);
        l.ffn_up = matrix(src, m, p + "ffn_up.weight", hp.n_ff, n);
        l.ffn_up_b = vector_f32(src, m, p + "ffn_up.bias", hp.n_ff);
        l.ffn_down = matrix(src, m, p + "ffn_down.weight", n, hp.n_ff);
        l.ffn_down_b = vector_f32(src, m, p + "ffn_down.bias", n);
    }
}

namespace {

// The block as the file comment writes it out; pre-norm (norm_before) or post-norm (opt-350m).
class opt_forward final : public arch_forward {
public:
    opt_forward(const model & m, thread_pool & pool, int64_t n_rows_max)
        : m_(m),
          hp_(m.hp()),
          pool_(pool),
          n_rows_max_(n_rows_max),
          xn_(size_t(n_rows_max) * size_t(hp_.n_embd)),
          h_(size_t(n_rows_max) * size_t(hp_.n_ff)) {
        // What opt_hparams_* and opt_model_weights give the model.
        HILL_ASSERT(hp_.norm == norm_kind::layer && hp_.ffn == ffn_kind::relu &&
                    hp_.position == position_kind::learned && m.pos_embd().n_rows > 0);
        if (m.proj_in().n_rows != 0 || m.proj_out().n_rows != 0) {
            word_.resize(size_t(n_rows_max) * size_t(hp_.n_embd_word));
        }
    }

    void embed(const int32_t * tokens, const int32_t * pos, int64_t n, float * x) override {
        HILL_ASSERT(n <= n_rows_max_);
        const int64_t n_embd = hp_.n_embd;
        const weight_view & e = m_.token_embd();
        if (m_.proj_in().n_rows == 0) {
            for (int64_t t = 0; t < n; ++t) dequantize_row(e.type, e.row(tokens[t]), x + t * n_embd, n_embd);
        } else {
            // OPT-350m: word embeddings of width n_embd_word, projected to n_embd.
            for (int64_t t = 0; t < n; ++t) {
                dequantize_row(e.type, e.row(tokens[t]), word_.data() + t * hp_.n_embd_word, hp_.n_embd_word);
            }
            gemm(m_.proj_in(), word_.data(), n, x, pool_);
        }
        const weight_view & pe = m_.pos_embd();
        for (int64_t t = 0; t < n; ++t) {
            HILL_ASSERT(pos[t] >= 0 && pos[t] < pe.n_rows);
            dequantize_row(pe.type, pe.row(pos[t]), xn_.data(), n_embd);
            add_inplace(x + t * n_embd, xn_.data(), n_embd);
        }
    }

    void attention_input(int il, const float * x, const int32_t * /*pos*/, int64_t n, float * q, float * k,
                         float * v) override {
        HILL_ASSERT(n <= n_rows_max_);
        const layer_weights & l = m_.layers()[size_t(il)];
        // Pre-norm blocks project the normed input; post-norm ones the residual stream itself.
        const float * in = x;
        if (hp_.norm_before) {
            layernorm_rows(l.attn_norm, l.attn_norm_b, hp_.rms_eps, x, n, xn_.data());
            in = xn_.data();
        }
        linear(l.wq, l.bq, in, n, q, pool_);
        HILL_ASSERT((k == nullptr) == (v == nullptr));
        if (k == nullptr) return;  // the query only (speculative_query)
        linear(l.wk, l.bk, in, n, k, pool_);
        linear(l.wv, l.bv, in, n, v, pool_);
    }

    void attention_output(int il, float * x, const float * attn, int64_t n) override {
        HILL_ASSERT(n <= n_rows_max_);
        const layer_weights & l = m_.layers()[size_t(il)];
        const int64_t n_embd = hp_.n_embd;
        linear(l.wo, l.bo, attn, n, xn_.data(), pool_);
        add_inplace(x, xn_.data(), n * n_embd);
        if (!hp_.norm_before) layernorm_rows(l.attn_norm, l.attn_norm_b, hp_.rms_eps, x, n, x);
        const float * in = x;
        if (hp_.norm_before) {
            layernorm_rows(l.ffn_norm, l.ffn_norm_b, hp_.rms_eps, x, n, xn_.data());
            in = xn_.data();
        }
        linear(l.ffn_up, l.ffn_up_b, in, n, h_.data(), pool_);
        relu(h_.data(), n * hp_.n_ff);
        linear(l.ffn_down, l.ffn_down_b, h_.data(), n, xn_.data(), pool_);
        add_inplace(x, xn_.data(), n * n_embd);
        if (!hp_.norm_before) layernorm_rows(l.ffn_norm, l.ffn_norm_b, hp_.rms_eps, x, n, x);
    }

    void logits(const float * x, int64_t n, float * out) override {
        HILL_ASSERT(n <= n_rows_max_);
        const float * in = x;
        if (!m_.output_norm().empty()) {
            layernorm_rows(m_.output_norm(), m_.output_norm_b(), hp_.rms_eps, x, n, xn_.data());
            in = xn_.data();
        }
        if (m_.proj_out().n_rows != 0) {
            gemm(m_.proj_out(), in, n, word_.data(), pool_);
            in = word_.data();
        }
        gemm(m_.output(), in, n, out, pool_);
    }

private:
    const model & m_;
    const hparams & hp_;
    thread_pool & pool_;
    int64_t n_rows_max_;
    std::vector<float> xn_;    // f32 [n_rows_max, n_embd]: normed input, a projection's output, a position row
    std::vector<float> h_;     // f32 [n_rows_max, n_ff]: the MLP's hidden layer
    std::vector<float> word_;  // f32 [n_rows_max, n_embd_word]: word embeddings around proj_in / proj_out (opt-350m)
};

}  // namespace

std::unique_ptr<arch_forward> make_opt_forward(const model & m, thread_pool & pool, int64_t n_rows_max) {
    return std::make_unique<opt_forward>(m, pool, n_rows_max);
}

}  // namespace hill
