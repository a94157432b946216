// The forward pass around attention (model/forward.h) on small random models of every
// architecture (llama as GGUF Q8_0 and as a folder, qwen2, qwen, opt pre-norm, opt-350m-like
// post-norm with the word embedding projection): embed, attention_input, attention_output and
// logits on a batch of rows at non-consecutive positions give, row by row, what the same calls give
// one row at a time — the batch invariance a decode batch of unrelated sequences relies on.
//
// Bit for bit: compute/matmul.h's gemm computes every row of a call of up to 64 rows exactly as gemv
// does it alone (gemv_batch), so a row is the same f32 computation alone or in the batch. The
// checkpoint folders are written here (f32 safetensors under the Hugging Face names of
// model/hf_names.h), so that no Python is needed.
#include "core/thread_pool.h"
#include "format/safetensors_file.h"
#include "model/forward.h"
#include "model/hf_names.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

namespace hill {
namespace {

struct tensor_spec {
    std::string gguf_name;
    std::vector<int64_t> shape;  // outermost first
};

struct dims {
    int64_t n_vocab = 67, n_embd = 32, n_ff = 48, n_layer = 2, n_head = 4, n_head_kv = 2, n_ctx = 64;
    int64_t n_embd_word = 32;  // opt: word_embed_proj_dim
};

// The llama family's tensors: qkv_bias adds q/k/v biases (qwen2); fused_qkv: one attn_qkv with bias (qwen).
std::vector<tensor_spec> llama_family_tensors(const dims & d, bool qkv_bias, bool fused_qkv) {
    const int64_t n_q = d.n_head * (d.n_embd / d.n_head), n_kv = d.n_head_kv * (d.n_embd / d.n_head);
    std::vector<tensor_spec> t = {{"token_embd.weight", {d.n_vocab, d.n_embd}},
                                  {"output_norm.weight", {d.n_embd}},
                                  {"output.weight", {d.n_vocab, d.n_embd}}};
    for (int64_t il = 0; il < d.n_layer; ++il) {
        const std::string p = fmt::format("blk.{}.", il);
        t.push_back({p + "attn_norm.weight", {d.n_embd}});
        if (fused_qkv) {
            t.push_back({p + "attn_qkv.weight", {n_q + 2 * n_kv, d.n_embd}});
            t.push_back({p + "attn_qkv.bias", {n_q + 2 * n_kv}});
        } else {
            t.push_back({p + "attn_q.weight", {n_q, d.n_embd}});
            t.push_back({p + "attn_k.weight", {n_kv, d.n_embd}});
            t.push_back({p + "attn_v.weight", {n_kv, d.n_embd}});
            if (qkv_bias) {
                t.push_back({p + "attn_q.bias", {n_q}});
                t.push_back({p + "attn_k.bias", {n_kv}});
                t.push_back({p + "attn_v.bias", {n_kv}});
            }
        }
        t.push_back({p + "attn_output.weight", {d.n_embd, n_q}});
        t.push_back({p + "ffn_norm.weight", {d.n_embd}});
        t.push_back({p + "ffn_gate.weight", {d.n_ff, d.n_embd}});
        t.push_back({p + "ffn_up.weight", {d.n_ff, d.n_embd}});
        t.push_back({p + "ffn_down.weight", {d.n_embd, d.n_ff}});
    }
    return t;
}

// OPT's tensors: pre-norm ones have the final LayerNorm and a tied output; post-norm ones (350m)
// neither; a word embedding width other than n_embd adds the projections.
std::vector<tensor_spec> opt_tensors(const dims & d, bool norm_before) {
    const int64_t e = d.n_embd;
    std::vector<tensor_spec> t = {{"token_embd.weight", {d.n_vocab, d.n_embd_word}},
                                  {"position_embd.weight", {d.n_ctx + 2, e}}};
    if (d.n_embd_word != e) {
        t.push_back({"token_embd_proj.weight", {e, d.n_embd_word}});
        t.push_back({"output_proj.weight", {d.n_embd_word, e}});
    }
    if (norm_before) {
        t.push_back({"output_norm.weight", {e}});
        t.push_back({"output_norm.bias", {e}});
    } else {
        t.push_back({"output.weight", {d.n_vocab, d.n_embd_word}});
    }
    for (int64_t il = 0; il < d.n_layer; ++il) {
        const std::string p = fmt::format("blk.{}.", il);
        for (const char * norm : {"attn_norm", "ffn_norm"}) {
            t.push_back({p + norm + ".weight", {e}});
            t.push_back({p + norm + ".bias", {e}});
        }
        for (const char * proj : {"attn_q", "attn_k", "attn_v", "attn_output"}) {
            t.push_back({p + proj + ".weight", {e, e}});
            t.push_back({p + proj + ".bias", {e}});
        }
        t.push_back({p + "ffn_up.weight", {d.n_ff, e}});
        t.push_back({p + "ffn_up.bias", {d.n_ff}});
        t.push_back({p + "ffn_down.weight", {e, d.n_ff}});
        t.push_back({p + "ffn_down.bias", {e}});
    }
    return t;
}

// A checkpoint folder in `dir`: config.json and model.safetensors with random f32 tensors (norm
// weights near 1, everything else in [-0.5, 0.5)) under their Hugging Face names for `arch`.
std::string write_folder(const test::temp_dir & dir, const std::string & arch, const std::string & config,
                         const std::vector<tensor_spec> & tensors) {
    std::mt19937 rng(5);
    std::vector<std::vector<float>> data;
    data.reserve(tensors.size());
    std::vector<safetensors_entry> entries;
    for (const tensor_spec & t : tensors) {
        int64_t n = 1;
        for (int64_t s : t.shape) n *= s;
        const bool norm = t.gguf_name.find("norm.weight") != std::string::npos;
        data.push_back(norm ? test::random_floats(rng, size_t(n), 0.9f, 1.1f)
                            : test::random_floats(rng, size_t(n), -0.5f, 0.5f));
        const std::optional<std::string> hf = hf_tensor_name_of(arch, t.gguf_name);
        EXPECT_TRUE(hf.has_value()) << arch << " " << t.gguf_name;
        entries.push_back({hf.value_or(t.gguf_name), ggml_type::f32, t.shape, data.back().data(), uint64_t(n) * 4});
    }
    std::ofstream(dir.file("config.json")) << config;
    const std::vector<uint8_t> bytes = safetensors_serialize(entries);
    std::ofstream(dir.file("model.safetensors"), std::ios::binary)
        .write(reinterpret_cast<const char *>(bytes.data()), std::streamsize(bytes.size()));
    return dir.path.string();
}

constexpr const char * k_llama_dims =
    R"("vocab_size": 67, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, )"
    R"("num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-5)";
constexpr const char * k_opt_dims =
    R"("model_type": "opt", "vocab_size": 67, "hidden_size": 32, "ffn_dim": 48, "num_hidden_layers": 2, )"
    R"("num_attention_heads": 4, "max_position_embeddings": 64, "activation_function": "relu")";

struct forward_case {
    const char * name;
    const char * arch;  // expected hparams::arch
    // Writes the model into the folder; returns the path to load.
    std::string (*write)(const test::temp_dir & dir);
};

void PrintTo(const forward_case & c, std::ostream * os) { *os << c.name; }

const forward_case k_cases[] = {
    {"llama_gguf_q8_0", "llama",
     [](const test::temp_dir & dir) {
         write_random_model(dir.file("m.gguf"), random_model_params{.n_vocab = 300, .n_embd = 64, .n_ff = 96,
                                                                    .n_layer = 2, .n_head = 4, .n_head_kv = 2,
                                                                    .n_ctx = 64, .type = ggml_type::q8_0, .seed = 3});
         return dir.file("m.gguf");
     }},
    {"llama_gguf_q4_k_m", "llama",  // Q4_K, Q6_K, and Q5_0 / Q8_0 for the 96-wide ffn_down rows
     [](const test::temp_dir & dir) {
         write_random_model(dir.file("m.gguf"),
                            random_model_params{.n_vocab = 300, .n_embd = 256, .n_ff = 96, .n_layer = 2, .n_head = 4,
                                                .n_head_kv = 2, .n_ctx = 64,
                                                .type = weight_scheme(ggml_type::q4_k, true), .seed = 3});
         return dir.file("m.gguf");
     }},
    {"llama", "llama",
     [](const test::temp_dir & dir) {
         return write_folder(dir, "llama", fmt::format(R"({{"model_type": "llama", {}}})", k_llama_dims),
                             llama_family_tensors(dims{}, false, false));
     }},
    {"qwen2", "qwen2",
     [](const test::temp_dir & dir) {
         return write_folder(dir, "qwen2", fmt::format(R"({{"model_type": "qwen2", {}}})", k_llama_dims),
                             llama_family_tensors(dims{}, true, false));
     }},
    {"qwen", "qwen",
     [](const test::temp_dir & dir) {
         const std::string config =
             R"({"model_type": "qwen", "vocab_size": 67, "hidden_size": 32, "intermediate_size": 96, )"
             R"("num_hidden_layers": 2, "num_attention_heads": 4, "seq_length": 64, "layer_norm_epsilon": 1e-6})";
         return write_folder(dir, "qwen", config, llama_family_tensors(dims{.n_head_kv = 4}, true, true));
     }},
    {"opt", "opt",
     [](const test::temp_dir & dir) {
         return write_folder(dir, "opt", fmt::format(R"({{{}, "do_layer_norm_before": true}})", k_opt_dims),
                             opt_tensors(dims{}, true));
     }},
    {"opt_350m_like", "opt",
     [](const test::temp_dir & dir) {
         return write_folder(
             dir, "opt",
             fmt::format(R"({{{}, "do_layer_norm_before": false, "word_embed_proj_dim": 24}})", k_opt_dims),
             opt_tensors(dims{.n_embd_word = 24}, false));
     }},
};

// Row `row` of a batch result against the same row computed alone, both f32 [width]: bit for bit.
void expect_row(const float * batch, const float * alone, int64_t width, const std::string & what) {
    for (int64_t i = 0; i < width; ++i) {
        if (std::memcmp(&batch[i], &alone[i], 4) != 0) {
            ADD_FAILURE() << what << ": element " << i << " is " << batch[i] << " in the batch, " << alone[i] << " alone";
            return;
        }
    }
}

class forward_rows : public ::testing::TestWithParam<forward_case> {
protected:
    void SetUp() override {
        m = model::load(GetParam().write(dir));
        ASSERT_EQ(m->hp().arch, GetParam().arch);
    }

    // Every call on a batch of n rows (tokens[i] at pos[i]) against the same call on each row alone
    // (a forward pass of its own, n_rows_max 1), from the same inputs: the batch's embeddings, then
    // block by block the batch's residual stream and random attention outputs.
    void check_batch(const std::vector<int32_t> & tokens, const std::vector<int32_t> & pos) {
        const hparams & hp = m->hp();
        const int64_t n = int64_t(tokens.size()), n_embd = hp.n_embd, n_q = hp.n_embd_q(), n_kv = hp.n_embd_kv();
        thread_pool pool(2);
        std::unique_ptr<arch_forward> batch = make_forward(*m, pool, n), alone = make_forward(*m, pool, 1);
        const auto floats = [](int64_t count) { return std::vector<float>(size_t(count)); };
        std::vector<float> x = floats(n * n_embd), q = floats(n * n_q), k = floats(n * n_kv), v = floats(n * n_kv);
        std::vector<float> x1 = floats(n_embd), q1 = floats(n_q), k1 = floats(n_kv), v1 = floats(n_kv);
        const auto row = [](std::vector<float> & b, int64_t i, int64_t width) { return b.data() + i * width; };

        batch->embed(tokens.data(), pos.data(), n, x.data());
        for (int64_t i = 0; i < n; ++i) {
            alone->embed(&tokens[size_t(i)], &pos[size_t(i)], 1, x1.data());
            expect_row(row(x, i, n_embd), x1.data(), n_embd, fmt::format("embed row {}", i));
        }
        std::mt19937 rng(9);
        for (int il = 0; il < hp.n_layer; ++il) {
            batch->attention_input(il, x.data(), pos.data(), n, q.data(), k.data(), v.data());
            for (int64_t i = 0; i < n; ++i) {
                alone->attention_input(il, row(x, i, n_embd), &pos[size_t(i)], 1, q1.data(), k1.data(), v1.data());
                const std::string at = fmt::format("layer {} row {} (position {})", il, i, pos[size_t(i)]);
                expect_row(row(q, i, n_q), q1.data(), n_q, "q of " + at);
                expect_row(row(k, i, n_kv), k1.data(), n_kv, "k of " + at);
                expect_row(row(v, i, n_kv), v1.data(), n_kv, "v of " + at);
            }
            const std::vector<float> attn = test::random_floats(rng, size_t(n * n_q));
            const std::vector<float> x_in = x;
            batch->attention_output(il, x.data(), attn.data(), n);
            for (int64_t i = 0; i < n; ++i) {
                std::copy_n(x_in.data() + i * n_embd, n_embd, x1.data());
                alone->attention_output(il, x1.data(), attn.data() + i * n_q, 1);
                expect_row(row(x, i, n_embd), x1.data(), n_embd, fmt::format("block {} output row {}", il, i));
            }
        }
        std::vector<float> logits(size_t(n) * size_t(hp.n_vocab)), logits1(size_t(hp.n_vocab));
        batch->logits(x.data(), n, logits.data());
        for (int64_t i = 0; i < n; ++i) {
            alone->logits(row(x, i, n_embd), 1, logits1.data());
            expect_row(row(logits, i, hp.n_vocab), logits1.data(), hp.n_vocab, fmt::format("logits row {}", i));
        }
    }

    test::temp_dir dir;
    std::unique_ptr<model> m;
};

TEST_P(forward_rows, three_rows_at_unrelated_positions_equal_each_row_alone_bit_for_bit) {
    check_batch({5, 61, 17}, {37, 2, 20});
    check_batch({5, 5}, {63, 0});  // one token at two positions
}

TEST_P(forward_rows, sixteen_rows_at_unrelated_positions_equal_each_row_alone_bit_for_bit) {
    std::vector<int32_t> tokens, pos;
    for (int32_t i = 0; i < 16; ++i) {
        tokens.push_back((i * 29 + 3) % 67);
        pos.push_back((i * 23 + 5) % 64);  // 16 distinct positions in [0, 64), out of order
    }
    check_batch(tokens, pos);
}

// The position reaches the result (RoPE on q and k, or OPT's learned embedding): the tests above
// would not notice rows computed at the wrong position otherwise.
TEST_P(forward_rows, the_position_changes_the_query) {
    const hparams & hp = m->hp();
    thread_pool pool(1);
    std::unique_ptr<arch_forward> f = make_forward(*m, pool, 1);
    std::vector<float> x(size_t(hp.n_embd)), k(size_t(hp.n_embd_kv())), v(size_t(hp.n_embd_kv()));
    std::vector<float> q_a(size_t(hp.n_embd_q())), q_b(size_t(hp.n_embd_q()));
    const int32_t token = 7;
    for (auto [p, q] : {std::pair{int32_t(10), &q_a}, std::pair{int32_t(11), &q_b}}) {
        f->embed(&token, &p, 1, x.data());
        f->attention_input(0, x.data(), &p, 1, q->data(), k.data(), v.data());
    }
    EXPECT_NE(q_a, q_b);
}

INSTANTIATE_TEST_SUITE_P(architectures, forward_rows, ::testing::ValuesIn(k_cases),
                         [](const auto & info) { return std::string(info.param.name); });

}  // namespace
}  // namespace hill
