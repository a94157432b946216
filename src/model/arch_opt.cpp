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
// GGUF: opt.attention.layer_norm_epsilon, as convert writes it).
#include "core/error.h"
#include "model/gguf_file.h"
#include "model/hf_checkpoint.h"
#include "model/model_loader.h"

#include <fmt/format.h>

namespace hill {

void opt_hparams_hf(const hf_checkpoint & c, hparams & hp) {
    const std::string cfg = c.config_path();
    const auto int_in = [&](const char * key, int64_t lo, int64_t hi) { return c.config_int_in(key, lo, hi); };
    hp.arch = "opt";
    hp.n_vocab = int_in("vocab_size", 1, INT32_MAX);
    hp.n_embd = int_in("hidden_size", 1, 1 << 20);
    hp.n_ff = int_in("ffn_dim", 1, 1 << 22);
    hf_layer_hparams(c, hp);
    hp.n_ctx_train = int_in("max_position_embeddings", 1, 1 << 24);
    hp.n_embd_word = c.config_int_opt("word_embed_proj_dim") ? int_in("word_embed_proj_dim", 1, 1 << 20) : hp.n_embd;
    hp.norm = norm_kind::layer;
    hp.rms_eps = 1e-5f;
    hp.norm_before = c.config_bool_opt("do_layer_norm_before").value_or(true);
    hp.ffn = ffn_kind::relu;
    hp.position = position_kind::learned;
    if (auto act = c.config_string_opt("activation_function"); act && *act != "relu") {
        fail_input("'{}': activation_function is '{}'; supported: relu", cfg, *act);
    }
    if (!c.config_bool_opt("enable_bias").value_or(true)) {
        fail_input("'{}': enable_bias is false; supported: true", cfg);
    }
    if (!c.config_bool_opt("layer_norm_elementwise_affine").value_or(true)) {
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

}  // namespace hill
