// The forward pass against independent float64 NumPy implementations:
//   - tests/reference/llama_ref.py on small random `llama` models written as GGUF by the C++ writer
//     (8 query / 2 KV heads, odd dimensions, every weight type);
//   - tests/reference/arch_ref.py on random tiny Hugging Face checkpoints it writes itself (config.json
//     + safetensors, one file or shards) for every architecture and config variant (llama with
//     linear / llama3 RoPE scaling, Mistral-like GQA with head_dim != hidden/heads, qwen2, qwen,
//     opt pre- and post-norm with the word embedding projection), and on the same weights as GGUF
//     where llama.cpp defines the architecture (llama with permuted Q/K rows, qwen2, qwen).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "compute/kernel_mode.h"
#include "core/error.h"
#include "engine/run_report.h"
#include "engine/session.h"
#include "format/gguf_writer.h"
#include "format/safetensors_file.h"
#include "model/synthetic_model.h"
#include "test_util.h"

namespace hill {
namespace {

// Restores the matmul mode it found when it goes out of scope.
struct matmul_mode_scope {
    matmul_mode saved = matmul_mode_get();
    ~matmul_mode_scope() { matmul_mode_set(saved); }
};

struct ref_case {
    const char * name;
    ggml_type type;
    int32_t n_embd;
    int32_t n_ff;
    float tol;  // max |ours - ref| / max |ref|
    bool tied;
    float freq_base;
    float rope_scale;
    // The bound with int8 activations (matmul_mode::int8, the default; `tol` is the exact mode's):
    // 0 for the types that have no int8 product (the same computation in both modes).
    float tol_int8 = 0.0f;
};

std::string token_list(const std::vector<int32_t> & tokens) {
    std::string list;
    for (size_t i = 0; i < tokens.size(); ++i) list += (i ? "," : "") + std::to_string(tokens[i]);
    return list;
}

// Runs tests/reference/`script` with `args`; its stdout parsed as rows of numbers.
std::vector<std::vector<double>> run_script(const std::string & script, const std::string & args) {
    const std::string cmd = std::string(HILL_NUMPY_PYTHON) + " " + HILL_SOURCE_DIR + "/tests/reference/" + script + " " + args;
    FILE * p = ::popen(cmd.c_str(), "r");
    EXPECT_NE(p, nullptr);
    std::string out;
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    EXPECT_EQ(::pclose(p), 0) << "reference failed: " << cmd;
    std::vector<std::vector<double>> rows;
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        rows.emplace_back();
        double v;
        while (ls >> v) rows.back().push_back(v);
    }
    return rows;
}

std::vector<std::vector<double>> run_reference(const std::string & model, const std::vector<int32_t> & tokens) {
    return run_script("llama_ref.py", model + " " + token_list(tokens));
}

// max |ours - ref| / max |ref| over all positions, for the whole prompt at once (n_batch 8: gemm +
// prefill attention), in prefill segments of 5 tokens (each segment attends to the earlier ones in
// the KV tiers: sliding windows reach back into them) and token by token (n_batch 1: gemv + decode
// steps).
void expect_logits_match(const model & m, const std::vector<int32_t> & tokens,
                         const std::vector<std::vector<double>> & ref, double tol, const std::string & name) {
    ASSERT_EQ(ref.size(), tokens.size());
    const int32_t n_vocab = m.hp().n_vocab;
    thread_pool pool(2);
    for (int32_t n_batch : {8, 5, 1}) {
        context_params cp{64, ggml_type::f32, n_batch};
        if (n_batch == 5) cp.n_segment = 5;
        session s(m, cp, pool);
        if (n_batch == 1) {
            double worst = 0.0;
            for (size_t t = 0; t < tokens.size(); ++t) {
                s.eval(std::span<const int32_t>(&tokens[t], 1), false);
                double max_ref = 0.0, max_err = 0.0;
                ASSERT_EQ(ref[t].size(), size_t(n_vocab));
                for (int32_t i = 0; i < n_vocab; ++i) {
                    max_ref = std::max(max_ref, std::abs(ref[t][size_t(i)]));
                    max_err = std::max(max_err, std::abs(double(s.logits()[i]) - ref[t][size_t(i)]));
                }
                worst = std::max(worst, max_err / max_ref);
                EXPECT_LE(max_err / max_ref, tol) << name << " decode position " << t;
            }
            std::printf("%s decode: max |error| / max |logit| = %.2e (tolerance %.0e)\n", name.c_str(), worst, tol);
            continue;
        }
        s.eval(tokens, true);
        double max_ref = 0.0, max_err = 0.0;
        for (size_t t = 0; t < tokens.size(); ++t) {
            ASSERT_EQ(ref[t].size(), size_t(n_vocab));
            for (int32_t i = 0; i < n_vocab; ++i) {
                const double r = ref[t][size_t(i)];
                max_ref = std::max(max_ref, std::abs(r));
                max_err = std::max(max_err, std::abs(double(s.logits()[t * size_t(n_vocab) + size_t(i)]) - r));
            }
        }
        std::printf("%s prefill%s: max |error| / max |logit| = %.2e (tolerance %.0e)\n", name.c_str(),
                    n_batch == 5 ? " in segments" : "", max_err / max_ref, tol);
        EXPECT_LE(max_err / max_ref, tol) << name << ": max error " << max_err << " against max |logit| " << max_ref;
    }
}

bool numpy_available() {
    const std::string py = HILL_NUMPY_PYTHON;
    return !py.empty() && py.find("NOTFOUND") == std::string::npos &&
           std::system((py + " -c 'import numpy' 2>/dev/null").c_str()) == 0;
}

class reference : public ::testing::TestWithParam<ref_case> {};

TEST_P(reference, logits_match_float64_numpy) {
    if (!numpy_available()) GTEST_SKIP() << "/usr/bin/python3 with numpy (Debian python3-numpy) not found";
    const ref_case & c = GetParam();
    test::temp_dir dir;
    const std::string path = dir.file("m.gguf");
    const random_model_params p{.n_vocab = 301, .n_embd = c.n_embd, .n_ff = c.n_ff, .n_layer = 2, .n_head = 8,
                                .n_head_kv = 2, .n_ctx = 64, .type = c.type, .rope_freq_base = c.freq_base,
                                .rope_scaling_factor = c.rope_scale, .tied_output = c.tied, .seed = 7};
    write_random_model(path, p);

    const std::vector<int32_t> tokens = {1, 17, 300, 42, 42, 259, 5, 123};
    const auto ref = run_reference(path, tokens);
    ASSERT_EQ(ref.size(), tokens.size());

    auto m = model::load(path);
    thread_pool pool(2);
    const matmul_mode_scope restore_mode;
    // Whole prompt at once (gemm + prefill attention) and token by token (gemv + decode attention),
    // with the exact f32 products and with int8 activations.
    for (const matmul_mode mm : {matmul_mode::exact, matmul_mode::int8}) {
        const bool int8 = mm == matmul_mode::int8;
        if (int8 && c.tol_int8 == 0.0f) continue;
        matmul_mode_set(mm);
        const double tol = int8 ? c.tol_int8 : c.tol;
        for (int32_t n_batch : {8, 1}) {
            session s(*m, context_params{64, ggml_type::f32, n_batch}, pool);
            s.eval(tokens, true);
            double max_ref = 0.0, max_err = 0.0;
            for (size_t t = 0; t < tokens.size(); ++t) {
                ASSERT_EQ(ref[t].size(), size_t(p.n_vocab));
                for (int32_t i = 0; i < p.n_vocab; ++i) {
                    const double r = ref[t][size_t(i)];
                    max_ref = std::max(max_ref, std::abs(r));
                    max_err = std::max(max_err, std::abs(double(s.logits()[t * size_t(p.n_vocab) + size_t(i)]) - r));
                }
            }
            std::printf("%s%s n_batch %d: max |error| / max |logit| = %.2e (tolerance %.0e)\n", c.name,
                        int8 ? " int8" : "", n_batch, max_err / max_ref, tol);
            EXPECT_LE(max_err / max_ref, tol) << c.name << (int8 ? " int8" : "") << " n_batch " << n_batch
                                              << ": max error " << max_err << " against max |logit| " << max_ref;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    types, reference,
    ::testing::Values(ref_case{"f32", ggml_type::f32, 80, 99, 1e-4f, false, 10000.0f, 1.0f},
                      ref_case{"f32_tied_scaled_rope", ggml_type::f32, 112, 75, 1e-4f, true, 50000.0f, 4.0f},
                      ref_case{"f16", ggml_type::f16, 80, 99, 2e-3f, false, 10000.0f, 1.0f},
                      ref_case{"bf16", ggml_type::bf16, 80, 99, 2e-3f, false, 10000.0f, 1.0f},
                      ref_case{"q8_0", ggml_type::q8_0, 96, 160, 2e-3f, false, 10000.0f, 1.0f, 3e-2f},
                      ref_case{"q4_0", ggml_type::q4_0, 96, 160, 2e-3f, false, 10000.0f, 1.0f, 3e-2f}),
    [](const auto & info) { return std::string(info.param.name); });

struct arch_case {
    const char * name;
    const char * config;  // config.json
    const char * dtype;   // f32, f16, bf16: every tensor of the checkpoint
    int shards;           // 1: model.safetensors; more: model-0000i-of-0000N.safetensors + index
    bool gguf;            // also written as GGUF (llama.cpp's layout) and checked
    const char * arch;    // expected hparams().arch
    int n_tokens = 8;     // prompt length: longer than the sliding window where the model has one
};

void PrintTo(const arch_case & c, std::ostream * os) { *os << c.name; }

class architectures : public ::testing::TestWithParam<arch_case> {};

TEST_P(architectures, checkpoint_logits_match_float64_numpy) {
    if (!numpy_available()) GTEST_SKIP() << "/usr/bin/python3 with numpy (Debian python3-numpy) not found";
    const arch_case & c = GetParam();
    test::temp_dir dir;
    const std::string ckpt = dir.file("ckpt"), gguf = dir.file("m.gguf");
    // Writes the checkpoint (and the GGUF); prints nothing.
    run_script("arch_ref.py", fmt::format("write {} '{}' {} 11 {}{}", ckpt, c.config, c.dtype, c.shards,
                                          c.gguf ? " " + gguf : std::string()));
    std::vector<int32_t> tokens = {1, 17, 300, 42, 42, 259, 5, 123};
    for (int i = 8; i < c.n_tokens; ++i) tokens.push_back((i * 37 + 11) % 301);
    const auto ref = run_script("arch_ref.py", "logits " + ckpt + " " + token_list(tokens));
    const double tol = std::string(c.dtype) == "f32" ? 1e-4 : 2e-3;

    auto m = model::load(ckpt);
    EXPECT_EQ(m->format(), "hf");
    EXPECT_EQ(m->hp().arch, c.arch);
    EXPECT_FALSE(m->has_tokenizer());
    EXPECT_THROW(m->tokenizer(), error);
    expect_logits_match(*m, tokens, ref, tol, std::string(c.name) + " (folder)");
    if (m->hp().position == position_kind::learned) {
        // OPT has learned 64 positions: a longer context is a usage error; 64 tokens run.
        thread_pool pool(1);
        try {
            session s(*m, context_params{65, ggml_type::f32, 8}, pool);
            ADD_FAILURE() << "no error for a context past the learned positions";
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::usage);
            EXPECT_NE(std::string(e.what()).find("64 positions"), std::string::npos) << e.what();
        }
        session s(*m, context_params{64, ggml_type::f32, 8}, pool);
        s.eval(std::vector<int32_t>(64, 7));
        EXPECT_EQ(s.n_past(), 64);
    }
    if (c.gguf) {
        auto g = model::load(gguf);
        EXPECT_EQ(g->format(), "gguf");
        EXPECT_EQ(g->hp().arch, c.arch);
        EXPECT_EQ(g->n_params(), m->n_params());
        expect_logits_match(*g, tokens, ref, tol, std::string(c.name) + " (GGUF)");
    }
}

#define LLAMA_DIMS                                                                                              \
    R"("vocab_size": 301, "hidden_size": 80, "intermediate_size": 99, "num_hidden_layers": 2, )"               \
    R"("num_attention_heads": 8, "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-5)"
// Small dims for the newer families: head_dim 16 (not hidden / heads), GQA 4:2.
#define SMALL_DIMS                                                                                              \
    R"("vocab_size": 301, "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4, )"             \
    R"("num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 64, "rms_norm_eps": 1e-6)"
#define OPT_DIMS                                                                                                \
    R"("model_type": "opt", "vocab_size": 301, "hidden_size": 80, "ffn_dim": 99, "num_hidden_layers": 2, )"    \
    R"("num_attention_heads": 8, "max_position_embeddings": 64, "activation_function": "relu")"

INSTANTIATE_TEST_SUITE_P(
    checkpoints, architectures,
    ::testing::Values(
        arch_case{"llama", R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], )" LLAMA_DIMS
                           R"(, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": false})",
                  "f32", 1, true, "llama"},
        // LongChat: linear RoPE scaling (transformers' pre-4.43 spelling "type"), tied output.
        arch_case{"longchat_linear_rope", R"({"model_type": "llama", )" LLAMA_DIMS
                                          R"(, "rope_scaling": {"type": "linear", "factor": 4.0}, )"
                                          R"("tie_word_embeddings": true})",
                  "bf16", 1, true, "llama"},
        // Llama 3.1: original context 16 so that the 8 head frequencies fall in all three bands.
        arch_case{"llama3_rope", R"({"model_type": "llama", )" LLAMA_DIMS R"(, "rope_theta": 500000.0, )"
                                 R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, )"
                                 R"("high_freq_factor": 4.0, "original_max_position_embeddings": 16}})",
                  "f32", 1, true, "llama"},
        // Mistral-like GQA, head_dim 16 != 96 / 8, sharded, f16.
        arch_case{"mistral_gqa", R"({"model_type": "mistral", "architectures": ["MistralForCausalLM"], )"
                                 R"("vocab_size": 301, "hidden_size": 96, "intermediate_size": 160, )"
                                 R"("num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2, )"
                                 R"("head_dim": 16, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, )"
                                 R"("rope_theta": 1000000.0, "sliding_window": 4096})",
                  "f16", 2, true, "llama"},
        arch_case{"qwen2", R"({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], )" LLAMA_DIMS
                           R"(, "rope_theta": 1000000.0, "tie_word_embeddings": true, "use_sliding_window": false})",
                  "f32", 1, true, "qwen2"},
        arch_case{"qwen2_bf16_shards", R"({"model_type": "qwen2", )" LLAMA_DIMS R"(, "tie_word_embeddings": false})",
                  "bf16", 3, false, "qwen2"},
        // Mistral's sliding window over every layer: 5 tokens of a 24-token prompt.
        arch_case{"mistral_sliding_window", R"({"model_type": "mistral", )" LLAMA_DIMS
                                            R"(, "rope_theta": 10000.0, "sliding_window": 5})",
                  "f32", 1, true, "llama", 24},
        // Qwen2's window from max_window_layers on (layer 1 of 2); GGUF has no way to say so.
        arch_case{"qwen2_sliding_window", R"({"model_type": "qwen2", )" LLAMA_DIMS
                                          R"(, "use_sliding_window": true, "sliding_window": 6, "max_window_layers": 1})",
                  "f32", 1, false, "qwen2", 24},
        arch_case{"qwen3", R"({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 2, )"
                           SMALL_DIMS R"(, "rope_theta": 1000000.0, "tie_word_embeddings": false, )"
                           R"("use_sliding_window": false, "sliding_window": null})",
                  "f32", 1, true, "qwen3"},
        arch_case{"qwen3_bf16_tied", R"({"model_type": "qwen3", "num_hidden_layers": 2, )" SMALL_DIMS
                                     R"(, "tie_word_embeddings": true})",
                  "bf16", 2, true, "qwen3"},
        // Gemma 2: layers 0 and 2 slide (window 6 of 24 tokens); small soft-caps so that tanh bends.
        arch_case{"gemma2", R"({"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], )"
                            R"("num_hidden_layers": 3, )" SMALL_DIMS R"(, "hidden_act": "gelu_pytorch_tanh", )"
                            R"("hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 16, )"
                            R"("sliding_window": 6, "attn_logit_softcapping": 2.0, "final_logit_softcapping": 3.0, )"
                            R"("rope_theta": 10000.0})",
                  "f32", 1, true, "gemma2", 24},
        // query_pre_attn_scalar != head_dim (as Gemma 2 27B): checkpoint folders only (GGUF has no key for it).
        arch_case{"gemma2_query_scale_bf16", R"({"model_type": "gemma2", "num_hidden_layers": 2, )" SMALL_DIMS
                                             R"(, "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 40, )"
                                             R"("sliding_window": 5, "attn_logit_softcapping": 50.0, )"
                                             R"("final_logit_softcapping": 30.0})",
                  "bf16", 1, false, "gemma2", 24},
        // Gemma 3: layers 0-4 and 6 slide (local RoPE base 10000), layer 5 is global (base 1e6, linear x8).
        arch_case{"gemma3", R"({"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], )"
                            R"("num_hidden_layers": 7, )" SMALL_DIMS R"(, "hidden_activation": "gelu_pytorch_tanh", )"
                            R"("query_pre_attn_scalar": 16, "sliding_window": 6, "sliding_window_pattern": 6, )"
                            R"("rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, )"
                            R"("rope_scaling": {"rope_type": "linear", "factor": 8.0}, )"
                            R"("final_logit_softcapping": null, "attn_logit_softcapping": null})",
                  "f32", 1, true, "gemma3", 24},
        // Gemma 3 with transformers' layer_types and a final soft-cap, f16.
        arch_case{"gemma3_layer_types_f16", R"({"model_type": "gemma3_text", "num_hidden_layers": 3, )" SMALL_DIMS
                                            R"(, "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 16, )"
                                            R"("sliding_window": 4, "final_logit_softcapping": 5.0, "layer_types": )"
                                            R"(["full_attention", "sliding_attention", "full_attention"]})",
                  "f16", 1, false, "gemma3", 24},
        // Phi-3 with LongRoPE: original context 16 < the 64 of the session and the 24-token prompt, so
        // the long factors and the attention factor sqrt(1 + ln 4 / ln 16); window 7 on every layer.
        arch_case{"phi3_longrope", R"({"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], )"
                                   R"("vocab_size": 301, "hidden_size": 64, "intermediate_size": 96, )"
                                   R"("num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4, )"
                                   R"("max_position_embeddings": 64, "original_max_position_embeddings": 16, )"
                                   R"("rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", )"
                                   R"("sliding_window": 7, "tie_word_embeddings": false, "rope_scaling": {"type": )"
                                   R"("longrope", "long_factor": [1.0, 2.5, 6.0, 11.0], )"
                                   R"("short_factor": [1.0, 1.1, 1.3, 1.7]}})",
                  "f32", 1, true, "phi3", 24},
        // Phi-3 ("su") within its original context: the short factors; attention factor of 128 / 64.
        arch_case{"phi3_su_short_f16", R"({"model_type": "phi3", "vocab_size": 301, "hidden_size": 64, )"
                                       R"("intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 8, )"
                                       R"("max_position_embeddings": 128, "original_max_position_embeddings": 64, )"
                                       R"("rms_norm_eps": 1e-5, "sliding_window": null, "rope_scaling": {"type": "su", )"
                                       R"("long_factor": [1.0, 2.5, 6.0, 11.0], "short_factor": [1.0, 1.1, 1.3, 1.7]}})",
                  "f16", 1, true, "phi3", 24},
        arch_case{"qwen", R"({"model_type": "qwen", "architectures": ["QWenLMHeadModel"], "vocab_size": 301, )"
                          R"("hidden_size": 80, "intermediate_size": 198, "num_hidden_layers": 2, )"
                          R"("num_attention_heads": 8, "kv_channels": 10, "seq_length": 64, )"
                          R"("max_position_embeddings": 64, "layer_norm_epsilon": 1e-6, "rotary_emb_base": 10000, )"
                          R"("rotary_pct": 1.0, "no_bias": true, "use_dynamic_ntk": true, "use_logn_attn": true})",
                  "f32", 1, true, "qwen"},
        arch_case{"opt", "{" OPT_DIMS R"(, "do_layer_norm_before": true, "word_embed_proj_dim": 80})", "f32", 1,
                  false, "opt"},
        arch_case{"opt_f16", "{" OPT_DIMS R"(})", "f16", 2, false, "opt"},
        // opt-350m's shape: post-norm blocks, no final LayerNorm, embeddings of width 48 projected.
        arch_case{"opt_350m_like", "{" OPT_DIMS R"(, "do_layer_norm_before": false, "word_embed_proj_dim": 48})",
                  "f32", 1, false, "opt"}),
    [](const auto & info) { return std::string(info.param.name); });

struct generated_case {
    const char * arch;
    ggml_type type;
    int32_t n_swa;
    float tol;
};

void PrintTo(const generated_case & c, std::ostream * os) { *os << c.arch; }

class generated : public ::testing::TestWithParam<generated_case> {};

// `hillinfer make-model random --arch X` (write_random_model) against arch_ref.py's reading of the
// same GGUF file (its own metadata reading: window pattern, soft-caps, Gemma's 1 + w norms), over a
// prompt longer than the sliding window.
TEST_P(generated, random_model_logits_match_float64_numpy) {
    if (!numpy_available()) GTEST_SKIP() << "/usr/bin/python3 with numpy (Debian python3-numpy) not found";
    const generated_case & c = GetParam();
    test::temp_dir dir;
    const std::string path = dir.file("m.gguf");
    write_random_model(path, random_model_params{.n_vocab = 301, .n_embd = 64, .n_ff = 96, .n_layer = 7,
                                                 .n_head = 4, .n_head_kv = 2, .n_ctx = 64, .type = c.type,
                                                 .seed = 5, .arch = c.arch, .n_swa = c.n_swa});
    std::vector<int32_t> tokens;
    for (int i = 0; i < 24; ++i) tokens.push_back((i * 37 + 11) % 301);
    const auto ref = run_script("arch_ref.py", "gguf-logits " + path + " " + token_list(tokens));
    auto m = model::load(path);
    EXPECT_EQ(m->hp().arch, c.arch);
    EXPECT_EQ(m->hp().n_swa, c.n_swa);
    // The architecture's arithmetic, with the exact f32 products (the int8 products' error: the
    // types/* rows here and test_int8_logits).
    const matmul_mode_scope restore_mode;
    matmul_mode_set(matmul_mode::exact);
    expect_logits_match(*m, tokens, ref, c.tol, std::string(c.arch) + " (make-model)");
}

INSTANTIATE_TEST_SUITE_P(
    archs, generated,
    ::testing::Values(generated_case{"llama", ggml_type::f32, 5, 1e-4f}, generated_case{"qwen2", ggml_type::f32, 0, 1e-4f},
                      generated_case{"qwen3", ggml_type::f32, 6, 1e-4f}, generated_case{"gemma2", ggml_type::f32, 6, 1e-4f},
                      generated_case{"gemma3", ggml_type::f32, 5, 1e-4f}, generated_case{"phi3", ggml_type::f32, 7, 1e-4f},
                      generated_case{"gemma3", ggml_type::q8_0, 5, 2e-3f}),
    [](const auto & info) {
        return std::string(info.param.arch) + "_" + std::string(ggml_type_name(info.param.type));
    });

// A model whose every layer slides attends to the same tokens under every policy — its window — so
// the sparse policies, with a cold tier holding part of each window, decode exactly as dense `full` in RAM.
TEST(sliding_window, every_policy_attends_the_window_wherever_its_tokens_live) {
    test::temp_dir dir;
    const std::string path = dir.file("m.gguf");
    write_random_model(path, random_model_params{.n_vocab = 301, .n_embd = 64, .n_ff = 96, .n_layer = 2, .n_head = 4,
                                                 .n_head_kv = 2, .n_ctx = 128, .type = ggml_type::f32, .seed = 9,
                                                 .arch = "llama", .n_swa = 30});
    auto m = model::load(path);
    ASSERT_EQ(m->hp().window(0), 30);
    ASSERT_EQ(m->hp().window(1), 30);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back((i * 53 + 7) % 301);
    thread_pool pool(2);
    // Greedy continuation's logits over 12 decode steps.
    const auto run = [&](const context_params & cp) {
        session s(*m, cp, pool);
        s.eval(prompt);
        std::vector<float> all;
        for (int step = 0; step < 12; ++step) {
            const float * l = s.logits();
            const int32_t next = int32_t(std::max_element(l, l + m->hp().n_vocab) - l);
            s.eval(std::span<const int32_t>(&next, 1));
            all.insert(all.end(), s.logits(), s.logits() + m->hp().n_vocab);
        }
        return all;
    };
    const std::vector<float> dense = run(context_params{128, ggml_type::f16, 8});
    for (const char * name : {"hillinfer", "streaming", "h2o", "quest"}) {
        context_params cp{128, ggml_type::f16, 8};
        cp.policy.name = name;
        cp.policy.alpha = 0.1;
        cp.kv_dir = dir.file(std::string("kv-") + name);
        std::filesystem::create_directories(cp.kv_dir);
        cp.kv_host_budget = context::host_budget_for(*m, cp, 24);  // 24 of the 30 of the window hot
        const std::vector<float> got = run(cp);
        ASSERT_EQ(got.size(), dense.size());
        double worst = 0.0;
        for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - dense[i])));
        EXPECT_LE(worst, 1e-5) << name;
    }
}

// Gemma-like models whose sliding layers have a window of 6 (gemma2: layers 0 and 2 of 4; gemma3: 0-4
// of 6), decoded past the window under full / hillinfer / streaming / quest with 0% and 75% of the KV
// cold (issue 15 item 4): the logits equal the policy's all-in-RAM run (and under full the float64
// reference on the same tokens), and a sliding layer holds at most its window in every tier — its hot
// slots, its cold pages (kv/cold_logs.h) and the run JSON's counters say so. Rows of 64 bytes: 64
// tokens per cold page, so the 300-token prompt and 70 steps write and drop whole groups.
class sliding_window_kv : public ::testing::TestWithParam<const char *> {};

TEST_P(sliding_window_kv, sliding_layers_keep_only_their_window_in_every_tier) {
    const char * arch = GetParam();
    constexpr int32_t w = 6;
    test::temp_dir dir;
    const std::string path = dir.file("m.gguf");
    const int n_layer = std::string(arch) == "gemma2" ? 4 : 6;
    write_random_model(path, random_model_params{.n_vocab = 301, .n_embd = 64, .n_ff = 96, .n_layer = n_layer,
                                                 .n_head = 4, .n_head_kv = 2, .n_ctx = 512, .type = ggml_type::f32,
                                                 .seed = 11, .arch = arch, .n_swa = w});
    auto m = model::load(path);
    const hparams & hp = m->hp();
    int n_sliding = 0;
    for (int il = 0; il < n_layer; ++il) n_sliding += hp.window(il) == w ? 1 : 0;
    ASSERT_EQ(n_sliding, std::string(arch) == "gemma2" ? 2 : 5);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 300; ++i) prompt.push_back((i * 53 + 7) % 301);
    // Under the sanitizers (test::sanitizer_build) 35 steps: decode still writes the group [256, 320)
    // (at 320 tokens) and the sliding layers drop it (at 326), in half the steps.
    constexpr int n_steps = test::sanitizer_build ? 35 : 70;
    constexpr int64_t n_total = 300 + n_steps;
    thread_pool pool(2);
    struct result {
        std::vector<int32_t> ids;   // prompt and greedy continuation
        std::vector<float> logits;  // f32 [n_steps, n_vocab]: after each step
    };
    const auto run = [&](const context_params & cp, const std::string & what, bool cold) {
        session s(*m, cp, pool);
        s.eval(prompt);
        result r{prompt, {}};
        for (int step = 0; step < n_steps; ++step) {
            const float * l = s.logits();
            const int32_t next = int32_t(std::max_element(l, l + hp.n_vocab) - l);
            r.ids.push_back(next);
            s.eval(std::span<const int32_t>(&next, 1));
            r.logits.insert(r.logits.end(), s.logits(), s.logits() + hp.n_vocab);
        }
        // Every tier holds a sliding layer's window and no more.
        const context & ctx = s.ctx();
        const int64_t n = s.n_past();
        EXPECT_EQ(ctx.n_cold_cells() > 0, cold) << what << ": " << ctx.n_cold_cells() << " token-layers cold";
        int64_t dropped = 0;
        for (int il = 0; il < n_layer; ++il) {
            if (hp.window(il) == 0) {
                EXPECT_EQ(ctx.cells().n_dropped(0, il), 0) << what << " layer " << il;
                continue;
            }
            EXPECT_EQ(ctx.cells().n_dropped(0, il), n - w) << what << " layer " << il;
            EXPECT_LE(ctx.cells().n_hot(il), w) << what << " layer " << il;
            dropped += n - w;
            if (ctx.logs() == nullptr) continue;
            const cold_log_view log = ctx.logs()->log(0, il);
            const int64_t pt = log.page_tokens;
            int64_t with_pages = 0;
            for (size_t g = 0; g < log.groups.size(); ++g) {
                const bool kept = int64_t(g + 1) * pt > n - w;  // the group reaches into the window
                EXPECT_EQ(log.groups[g].first != cold_pool::no_page, kept) << what << " layer " << il << " group " << g;
                with_pages += kept ? 1 : 0;
            }
            EXPECT_LE(with_pages, (w + pt - 1) / pt + 1) << what << " layer " << il;
        }
        EXPECT_EQ(ctx.n_dropped_cells(), dropped) << what;
        const nlohmann::json kv = kv_json(ctx);
        EXPECT_EQ(kv["dropped_cells"].get<int64_t>(), dropped) << what;
        uint64_t hot = 0;
        for (int il = 0; il < n_layer; ++il) hot += uint64_t(ctx.cells().n_hot(il)) * ctx.layout().token_layer_bytes();
        EXPECT_EQ(kv["hot_bytes"].get<uint64_t>(), hot) << what;
        if (ctx.cold() != nullptr) {
            // The full layers' groups and the sliding layers' window groups, in pages (written or open tail).
            const int64_t pt = ctx.layout().page_tokens();
            const uint64_t full_groups = uint64_t(n_layer - n_sliding) * uint64_t(n / pt);
            const uint64_t max_pages = (full_groups + uint64_t(n_sliding) * uint64_t((w + pt - 1) / pt + 1)) *
                                       uint64_t(ctx.layout().pages_per_group());
            EXPECT_GE(kv["cold_bytes"].get<uint64_t>(),
                      full_groups * ctx.layout().pages_per_group() * ctx.layout().page_bytes())
                << what;
            EXPECT_LE(kv["cold_bytes"].get<uint64_t>(), max_pages * ctx.layout().page_bytes()) << what;
        }
        // What the windows dropped is gone: the sequence cannot be cut back, except to 0.
        EXPECT_FALSE(ctx.can_truncate(0, n - 1));
        try {
            s.truncate(n - 1);
            ADD_FAILURE() << what << ": truncate past a dropped window succeeded";
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::usage);
            EXPECT_NE(std::string(e.what()).find("sliding-window"), std::string::npos) << e.what();
        }
        s.truncate(0);
        EXPECT_EQ(s.ctx().n_dropped_cells(), 0);
        return r;
    };
    for (const char * name : {"full", "hillinfer", "streaming", "quest"}) {
        context_params cp{512, ggml_type::f16, 32};
        cp.policy.name = name;
        cp.policy.alpha = 0.3;
        const result ram = run(cp, std::string(name) + " in RAM", false);
        if (std::string(name) == "full" && numpy_available()) {
            // Dense attention, sliding layers over their window: the float64 reference on the same tokens.
            const std::vector<int32_t> all(ram.ids.begin(), ram.ids.end());
            const auto ref = run_script("arch_ref.py", "gguf-logits " + path + " " + token_list(all));
            ASSERT_EQ(ref.size(), all.size());
            double worst = 0.0;
            for (int step = 0; step < n_steps; ++step) {
                const std::vector<double> & r = ref[prompt.size() + size_t(step)];
                double max_ref = 0.0, max_err = 0.0;
                for (int32_t i = 0; i < hp.n_vocab; ++i) {
                    max_ref = std::max(max_ref, std::abs(r[size_t(i)]));
                    const double got = ram.logits[size_t(step) * size_t(hp.n_vocab) + size_t(i)];
                    max_err = std::max(max_err, std::abs(got - r[size_t(i)]));
                }
                worst = std::max(worst, max_err / max_ref);
            }
            std::printf("%s full decode past the window: max |error| / max |logit| = %.2e\n", arch, worst);
            EXPECT_LE(worst, 2e-3) << arch;  // f16 KV
        }
        // 0% and 75% of the 370 tokens cold (72% of 335 under the sanitizers).
        for (const int64_t hot_tokens : {int64_t(400), int64_t(93)}) {
            context_params tc = cp;
            tc.n_segment = 64;  // the prompt in segments: earlier segments' windows drop before later ones run
            tc.kv_dir = dir.file(fmt::format("kv-{}-{}", name, hot_tokens));
            std::filesystem::create_directories(tc.kv_dir);
            tc.kv_host_budget = context::host_budget_for(*m, tc, hot_tokens);
            const std::string what = fmt::format("{} with {} hot tokens", name, hot_tokens);
            const result got = run(tc, what, hot_tokens < n_total);
            ASSERT_EQ(got.logits.size(), ram.logits.size());
            double worst = 0.0;
            for (size_t i = 0; i < got.logits.size(); ++i) {
                worst = std::max(worst, double(std::abs(got.logits[i] - ram.logits[i])));
            }
            EXPECT_LE(worst, 1e-4) << what;
        }
    }

    // The budget: a sliding layer's slots are its window, the new token and the next one's (8); what the uniform
    // split's 93 tokens per layer leave over holds more of the full layers' tokens.
    context_params bc{512, ggml_type::f16, 32};
    bc.kv_dir = dir.file("kv-budget");
    std::filesystem::create_directories(bc.kv_dir);
    bc.kv_host_budget = 93 * hp.kv_bytes_per_token(ggml_type::f16) + context::scoring_copy_bytes(*m, bc);
    const context ctx(*m, bc, pool);
    const int64_t full_slots = std::min<int64_t>(512, (93 * n_layer - 8 * n_sliding) / (n_layer - n_sliding));
    EXPECT_EQ(ctx.hot_slots_max(), full_slots);
    for (int il = 0; il < n_layer; ++il) EXPECT_EQ(ctx.cells().hot_slots(il), hp.window(il) > 0 ? 8 : full_slots) << il;
    EXPECT_EQ(context::host_budget_for(*m, bc, full_slots) - context::scoring_copy_bytes(*m, bc),
              uint64_t(8 * n_sliding + full_slots * (n_layer - n_sliding)) * ctx.layout().token_layer_bytes());
}

// A bug fixed: the pipeline's hint (the previous step's selection) of a sequence started again named
// positions that its sliding layers had dropped since (batch generation reuses sequence slots).
TEST(sliding_window, a_sequence_started_again_decodes_past_its_window) {
    test::temp_dir dir;
    const std::string path = dir.file("m.gguf");
    write_random_model(path, random_model_params{.n_vocab = 301, .n_embd = 64, .n_ff = 96, .n_layer = 2, .n_head = 4,
                                                 .n_head_kv = 2, .n_ctx = 256, .type = ggml_type::f32, .seed = 3,
                                                 .arch = "gemma2", .n_swa = 6});
    auto m = model::load(path);
    thread_pool pool(2);
    context_params cp{256, ggml_type::f16, 32};
    cp.policy.name = "hillinfer";
    cp.kv_dir = dir.file("kv");
    std::filesystem::create_directories(cp.kv_dir);
    cp.kv_host_budget = context::host_budget_for(*m, cp, 40);
    session s(*m, cp, pool);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 200; ++i) prompt.push_back((i * 29 + 5) % 301);
    const int32_t next = 7;
    s.eval(std::span<const int32_t>(prompt.data(), 20));
    for (int step = 0; step < 3; ++step) s.eval(std::span<const int32_t>(&next, 1));
    s.truncate(0);
    s.eval(prompt);
    for (int step = 0; step < 3; ++step) s.eval(std::span<const int32_t>(&next, 1));
    EXPECT_EQ(s.ctx().cells().n_dropped(0, 0), 203 - 6);
}

INSTANTIATE_TEST_SUITE_P(gemma, sliding_window_kv, ::testing::Values("gemma2", "gemma3"),
                         [](const auto & info) { return std::string(info.param); });

// A checkpoint folder written from C++: config.json and one safetensors file of f32 tensors.
struct tiny_folder {
    test::temp_dir dir;
    std::vector<std::vector<float>> data;
    std::vector<safetensors_entry> entries;

    void add(const std::string & name, std::vector<int64_t> shape) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        data.emplace_back(size_t(n), 0.5f);
        entries.push_back({name, ggml_type::f32, std::move(shape), data.back().data(), uint64_t(n) * 4});
    }
    std::string write(const std::string & config) {
        std::ofstream(dir.file("config.json")) << config;
        const std::vector<uint8_t> bytes = safetensors_serialize(entries);
        std::ofstream(dir.file("model.safetensors"), std::ios::binary)
            .write(reinterpret_cast<const char *>(bytes.data()), std::streamsize(bytes.size()));
        return dir.path.string();
    }
};

// The message of the hill::error that loading `path` throws ("" when it loads).
std::string load_error(const std::string & path, exit_code expected = exit_code::bad_input) {
    try {
        model::load(path);
    } catch (const error & e) {
        EXPECT_EQ(e.code(), expected) << e.what();
        return e.what();
    }
    ADD_FAILURE() << path << " loaded";
    return "";
}

#define EXPECT_MENTIONS(msg, text) EXPECT_NE((msg).find(text), std::string::npos) << (msg)

constexpr const char * k_llama_cfg =
    R"({"model_type": "llama", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, )"
    R"("num_attention_heads": 2, "max_position_embeddings": 16)";

TEST(architectures, unsupported_architecture_names_the_field_and_the_supported_values) {
    tiny_folder f;
    f.add("gpt_neox.embed_in.weight", {8, 8});
    const std::string msg = load_error(f.write(R"({"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"]})"));
    EXPECT_MENTIONS(msg, "gpt_neox");
    EXPECT_MENTIONS(msg, "model_type");
    EXPECT_MENTIONS(msg, "llama");
    EXPECT_MENTIONS(msg, "opt");
}

TEST(architectures, unsupported_config_values_name_the_key_and_the_supported_values) {
    const std::pair<const char *, std::vector<const char *>> cases[] = {
        {R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})", {"rope_scaling", "yarn", "linear, llama3"}},
        {R"(, "hidden_act": "gelu"})", {"hidden_act", "gelu", "silu"}},
        {R"(, "mlp_bias": true})", {"mlp_bias"}},
        {R"(, "num_key_value_heads": 3})", {"key/value head count 3"}},
    };
    for (const auto & [extra, words] : cases) {
        tiny_folder f;
        f.add("model.embed_tokens.weight", {8, 8});
        const std::string msg = load_error(f.write(std::string(k_llama_cfg) + extra));
        for (const char * w : words) EXPECT_MENTIONS(msg, w);
    }
    tiny_folder f;
    f.add("model.decoder.embed_tokens.weight", {8, 8});
    const std::string msg = load_error(f.write(
        R"({"model_type": "opt", "vocab_size": 8, "hidden_size": 8, "ffn_dim": 8, "num_hidden_layers": 1, )"
        R"("num_attention_heads": 2, "max_position_embeddings": 16, "activation_function": "gelu"})"));
    EXPECT_MENTIONS(msg, "activation_function");
    EXPECT_MENTIONS(msg, "relu");
}

TEST(architectures, missing_and_misshapen_tensors_are_named) {
    {
        tiny_folder f;
        f.add("model.embed_tokens.weight", {8, 8});
        const std::string msg = load_error(f.write(std::string(k_llama_cfg) + "}"));
        EXPECT_MENTIONS(msg, "output_norm.weight");
        EXPECT_MENTIONS(msg, "missing");
    }
    {
        tiny_folder f;
        f.add("model.embed_tokens.weight", {8, 7});
        const std::string msg = load_error(f.write(std::string(k_llama_cfg) + "}"));
        EXPECT_MENTIONS(msg, "model.embed_tokens.weight");
        EXPECT_MENTIONS(msg, "[8, 7]");
        EXPECT_MENTIONS(msg, "expected [8, 8]");
    }
}

TEST(architectures, gguf_architecture_without_a_loader_is_rejected_naming_the_supported_ones) {
    test::temp_dir dir;
    gguf_writer w;
    w.set_string("general.architecture", "gpt2");
    w.write(dir.file("gpt2.gguf"));
    const std::string msg = load_error(dir.file("gpt2.gguf"));
    EXPECT_MENTIONS(msg, "'gpt2'");
    EXPECT_MENTIONS(msg, "llama, qwen2, qwen, qwen3, gemma2, gemma3, phi3, opt");
}

// A GGUF file with arch's required llama-like keys (n_embd 64, 4 heads: head_dim 16) and no tokenizer,
// plus what `extra` adds; its load error.
std::string gguf_load_error(const std::string & arch, const std::function<void(gguf_writer &)> & extra) {
    test::temp_dir dir;
    gguf_writer w;
    const std::string a = arch + ".";
    w.set_string("general.architecture", arch);
    w.set_u32(a + "vocab_size", 8);
    w.set_u32(a + "context_length", 64);
    w.set_u32(a + "embedding_length", 64);
    w.set_u32(a + "feed_forward_length", 96);
    w.set_u32(a + "block_count", 2);
    w.set_u32(a + "attention.head_count", 4);
    extra(w);
    w.write(dir.file("m.gguf"));
    return load_error(dir.file("m.gguf"));
}

TEST(architectures, bad_or_missing_gguf_metadata_of_the_new_architectures_is_named) {
    EXPECT_MENTIONS(gguf_load_error("gemma2", [](gguf_writer &) {}), "'gemma2.attention.sliding_window' is missing");
    EXPECT_MENTIONS(gguf_load_error("gemma2",
                                    [](gguf_writer & w) {
                                        w.set_u32("gemma2.attention.sliding_window", 8);
                                        w.set_f32("gemma2.attn_logit_softcapping", -1.0f);
                                    }),
                    "'gemma2.attn_logit_softcapping' is -1");
    EXPECT_MENTIONS(gguf_load_error("gemma3", [](gguf_writer & w) { w.set_string("gemma3.final_logit_softcapping", "x"); }),
                    "'gemma3.final_logit_softcapping': expected f32");
    EXPECT_MENTIONS(gguf_load_error("qwen3", [](gguf_writer & w) { w.set_i32("qwen3.attention.sliding_window", -4); }),
                    "'qwen3.attention.sliding_window' is -4");
    const std::vector<float> factors(8, 1.0f);
    EXPECT_MENTIONS(gguf_load_error("phi3",
                                    [&](gguf_writer & w) {
                                        w.add_tensor("rope_factors_long.weight", ggml_type::f32, {8}, factors.data());
                                    }),
                    "'rope_factors_short.weight' is missing");
    EXPECT_MENTIONS(gguf_load_error("phi3",
                                    [&](gguf_writer & w) {
                                        w.add_tensor("rope_factors_long.weight", ggml_type::f32, {8}, factors.data());
                                        w.add_tensor("rope_factors_short.weight", ggml_type::f32, {8}, factors.data());
                                    }),
                    "'phi3.rope.scaling.original_context_length' is missing");
    EXPECT_MENTIONS(gguf_load_error("phi3",
                                    [&](gguf_writer & w) {
                                        w.add_tensor("rope_factors_long.weight", ggml_type::f32, {7}, factors.data());
                                    }),
                    "expected [8]");
}

// Sets the u32 metadata value of `key` in the GGUF file at `path` (the type tag 4 and the value
// follow the key's bytes).
void set_gguf_u32(const std::string & path, const std::string & key, uint32_t v) {
    std::vector<char> b;
    {
        std::ifstream in(path, std::ios::binary);
        b.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const auto at = std::search(b.begin(), b.end(), key.begin(), key.end());
    ASSERT_NE(at, b.end()) << key;
    const size_t type_at = size_t(at - b.begin()) + key.size();
    uint32_t type = 0;
    std::memcpy(&type, b.data() + type_at, 4);
    ASSERT_EQ(type, 4u) << key << " is not a u32";
    std::memcpy(b.data() + type_at + 4, &v, 4);
    std::ofstream(path, std::ios::binary).write(b.data(), std::streamsize(b.size()));
}

// The bug: a GGUF whose block_count is smaller than the layers its tensors hold ran the shorter
// model without a word (stories260K with llama.block_count 5 -> 1 printed "layers: 1").
TEST(architectures, gguf_tensors_of_layers_past_block_count_are_refused) {
    for (const std::string arch : {"llama", "qwen2"}) {
        SCOPED_TRACE(arch);
        test::temp_dir dir;
        const std::string path = dir.file(arch + ".gguf");
        write_random_model(path, random_model_params{.n_vocab = 300,
                                                     .n_embd = 64,
                                                     .n_ff = 96,
                                                     .n_layer = 3,
                                                     .n_head = 4,
                                                     .n_head_kv = 2,
                                                     .n_ctx = 64,
                                                     .type = ggml_type::f32,
                                                     .arch = arch});
        ASSERT_NO_THROW(model::load(path));
        set_gguf_u32(path, arch + ".block_count", 1);
        const std::string msg = load_error(path);
        EXPECT_MENTIONS(msg, path);
        EXPECT_MENTIONS(msg, "layer 2 ('blk.2.");
        EXPECT_MENTIONS(msg, "'" + arch + ".block_count' is 1");
    }
}

// The same for a checkpoint folder: tensors of model.layers.N past num_hidden_layers.
TEST(architectures, hf_tensors_of_layers_past_num_hidden_layers_are_refused) {
    tiny_folder f;
    f.add("model.embed_tokens.weight", {8, 8});
    f.add("model.layers.0.input_layernorm.weight", {8});
    f.add("model.layers.3.input_layernorm.weight", {8});
    f.add("model.layers.1.input_layernorm.weight", {8});
    const std::string dir = f.write(std::string(k_llama_cfg) + "}");  // num_hidden_layers 1
    const std::string msg = load_error(dir);
    EXPECT_MENTIONS(msg, dir);
    EXPECT_MENTIONS(msg, "layer 3 ('model.layers.3.input_layernorm.weight' (blk.3.attn_norm.weight))");
    EXPECT_MENTIONS(msg, "num_hidden_layers in " + dir + "/config.json is 1");
}

TEST(architectures, bad_or_missing_config_values_of_the_new_architectures_are_named) {
    const std::string gemma = R"({"model_type": "gemma2", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, )"
                              R"("num_hidden_layers": 2, "num_attention_heads": 2, "sliding_window": 4)";
    const std::string phi3 = R"({"model_type": "phi3", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, )"
                             R"("num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 64)";
    const std::pair<std::string, std::vector<const char *>> cases[] = {
        {gemma + "}", {"query_pre_attn_scalar", "missing"}},
        {gemma + R"(, "query_pre_attn_scalar": 4, "hidden_activation": "gelu"})",
         {"hidden_activation", "'gelu'", "gelu_pytorch_tanh"}},
        {gemma + R"(, "query_pre_attn_scalar": 4, "final_logit_softcapping": -2.0})", {"final_logit_softcapping", "-2"}},
        {gemma + R"(, "query_pre_attn_scalar": 4, "layer_types": ["full_attention"]})", {"layer_types", "1 entries"}},
        {gemma + R"(, "query_pre_attn_scalar": 4, "layer_types": ["full_attention", "chunked"]})",
         {"layer_types[1]", "chunked"}},
        {phi3 + R"(, "original_max_position_embeddings": 16, "rope_scaling": {"type": "longrope", )"
                R"("long_factor": [1.0], "short_factor": [1.0, 1.0]}})",
         {"long_factor", "1 entries", "head_dim / 2 = 2"}},
        {phi3 + R"(, "rope_scaling": {"type": "longrope", "long_factor": [1.0, 1.0], "short_factor": [1.0, 1.0]}})",
         {"original_max_position_embeddings"}},
        {phi3 + R"(, "partial_rotary_factor": 0.75})", {"partial_rotary_factor", "0.75"}},
    };
    for (const auto & [config, words] : cases) {
        tiny_folder f;
        f.add("model.embed_tokens.weight", {8, 8});
        const std::string msg = load_error(f.write(config));
        for (const char * w : words) EXPECT_MENTIONS(msg, w);
    }
}

TEST(architectures, a_folder_that_is_not_a_checkpoint_is_a_usage_error) {
    test::temp_dir dir;
    const std::string msg = load_error(dir.path.string(), exit_code::usage);
    EXPECT_MENTIONS(msg, "config.json");
}

}  // namespace
}  // namespace hill
