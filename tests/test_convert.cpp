// `hillinfer convert` (model/hf_convert.h): tiny random checkpoints (llama and qwen2 written here;
// qwen and opt by tests/reference/arch_ref.py, the writer test_reference uses) with a tiny
// byte-level BPE tokenizer.json, converted to GGUF; the GGUF's tensors, metadata and tokenizer are
// checked, and the logits of the folder and of the converted file agree.
#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "engine/session.h"
#include "format/gguf_file.h"
#include "format/gguf_writer.h"
#include "format/safetensors_file.h"
#include "model/hf_convert.h"
#include "model/hf_names.h"
#include "model/model.h"
#include "hf_test_util.h"
#include "test_util.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>

namespace hill {
namespace {

using test::write_bpe_tokenizer;
using test::write_text;

using json = nlohmann::json;

struct tiny_dims {
    int64_t n_vocab = 264, n_embd = 64, n_ff = 96, n_layer = 2, n_head = 4, n_head_kv = 2;
};

// Random llama-family checkpoint (llama or qwen2) with f32 (or `type`) weights; `extra` is merged
// into config.json.
void write_llama_checkpoint(const test::temp_dir & dir, const std::string & arch, const json & extra = json::object(),
                            ggml_type type = ggml_type::f32, uint32_t seed = 7) {
    const tiny_dims d;
    const int64_t hd = d.n_embd / d.n_head;
    std::mt19937 rng(seed);
    std::vector<std::vector<uint8_t>> store;
    std::vector<safetensors_entry> es;
    const auto add = [&](const std::string & name, std::vector<int64_t> shape, float scale, float offset = 0.0f) {
        int64_t n = 1;
        for (int64_t s : shape) n *= s;
        const std::vector<float> v = test::random_floats(rng, size_t(n), offset - scale, offset + scale);
        const ggml_type t = shape.size() == 1 ? ggml_type::f32 : type;
        std::vector<uint8_t> bytes(size_t(n) * ggml_block_bytes(t));
        for (int64_t i = 0; i < n; ++i) {
            if (t == ggml_type::f32) std::memcpy(bytes.data() + 4 * i, &v[size_t(i)], 4);
            if (t == ggml_type::f16) { const f16_bits h = fp32_to_fp16(v[size_t(i)]); std::memcpy(bytes.data() + 2 * i, &h, 2); }
            if (t == ggml_type::bf16) { const bf16_bits h = fp32_to_bf16(v[size_t(i)]); std::memcpy(bytes.data() + 2 * i, &h, 2); }
        }
        store.push_back(std::move(bytes));
        es.push_back({name, t, shape, store.back().data(), store.back().size()});
    };
    add("model.embed_tokens.weight", {d.n_vocab, d.n_embd}, 0.5f);
    for (int64_t il = 0; il < d.n_layer; ++il) {
        const std::string p = "model.layers." + std::to_string(il) + ".";
        add(p + "input_layernorm.weight", {d.n_embd}, 0.1f, 1.0f);
        add(p + "self_attn.q_proj.weight", {d.n_head * hd, d.n_embd}, 0.25f);
        add(p + "self_attn.k_proj.weight", {d.n_head_kv * hd, d.n_embd}, 0.25f);
        add(p + "self_attn.v_proj.weight", {d.n_head_kv * hd, d.n_embd}, 0.25f);
        if (arch == "qwen2") {
            add(p + "self_attn.q_proj.bias", {d.n_head * hd}, 0.1f);
            add(p + "self_attn.k_proj.bias", {d.n_head_kv * hd}, 0.1f);
            add(p + "self_attn.v_proj.bias", {d.n_head_kv * hd}, 0.1f);
        }
        add(p + "self_attn.o_proj.weight", {d.n_embd, d.n_head * hd}, 0.25f);
        add(p + "post_attention_layernorm.weight", {d.n_embd}, 0.1f, 1.0f);
        add(p + "mlp.gate_proj.weight", {d.n_ff, d.n_embd}, 0.25f);
        add(p + "mlp.up_proj.weight", {d.n_ff, d.n_embd}, 0.25f);
        add(p + "mlp.down_proj.weight", {d.n_embd, d.n_ff}, 0.25f);
        add(p + "self_attn.rotary_emb.inv_freq", {hd / 2}, 0.1f);  // a buffer convert drops
    }
    add("model.norm.weight", {d.n_embd}, 0.1f, 1.0f);
    add("lm_head.weight", {d.n_vocab, d.n_embd}, 0.5f);
    const std::vector<uint8_t> img = safetensors_serialize(es, {{"format", "pt"}});
    std::ofstream f(dir.file("model.safetensors"), std::ios::binary);
    f.write(reinterpret_cast<const char *>(img.data()), std::streamsize(img.size()));
    ASSERT_TRUE(f.good());

    json config = {
        {"architectures", json::array({arch == "llama" ? "LlamaForCausalLM" : "Qwen2ForCausalLM"})},
        {"model_type", arch},
        {"vocab_size", d.n_vocab},
        {"hidden_size", d.n_embd},
        {"intermediate_size", d.n_ff},
        {"num_hidden_layers", d.n_layer},
        {"num_attention_heads", d.n_head},
        {"num_key_value_heads", d.n_head_kv},
        {"max_position_embeddings", 512},
        {"rms_norm_eps", 1e-5},
        {"rope_theta", 10000.0},
        {"hidden_act", "silu"},
        {"tie_word_embeddings", false},
    };
    config.update(extra);
    write_text(dir.file("config.json"), config.dump(2));
}

// Logits f32 [n_tokens, n_vocab] of `m` for `tokens`.
std::vector<float> logits_of(const model & m, const std::vector<int32_t> & tokens) {
    thread_pool pool(1);
    session s(m, context_params{64, ggml_type::f32, 64, 8192}, pool);
    s.eval(tokens, true);
    return std::vector<float>(s.logits(), s.logits() + tokens.size() * size_t(m.hp().n_vocab));
}

// Max |a - b| relative to max |a|.
double rel_diff(const std::vector<float> & a, const std::vector<float> & b) {
    EXPECT_EQ(a.size(), b.size());
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        d = std::max(d, double(std::fabs(a[i] - b[i])));
        m = std::max(m, double(std::fabs(a[i])));
    }
    return m > 0.0 ? d / m : d;
}

const std::vector<int32_t> k_tokens = {260, 104, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100, 256, 257, 3, 200};

bool numpy_available() {
    const std::string py = HILL_NUMPY_PYTHON;
    return !py.empty() && py.find("NOTFOUND") == std::string::npos &&
           std::system((py + " -c 'import numpy' 2>/dev/null").c_str()) == 0;
}

// A random checkpoint for `config` (transformers' names; `dtype` f32, f16 or bf16) written into
// `dir` by tests/reference/arch_ref.py, plus the tiny BPE tokenizer.
void write_reference_checkpoint(const test::temp_dir & dir, const json & config, const char * dtype) {
    const std::string cmd = fmt::format("{} {}/tests/reference/arch_ref.py write '{}' '{}' {} 11", HILL_NUMPY_PYTHON,
                                        HILL_SOURCE_DIR, dir.path.string(), config.dump(), dtype);
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    write_bpe_tokenizer(dir.path);
}

// Loads the folder and the GGUF file `gguf`, checks they describe the same model, and returns the
// max relative difference of their logits on k_tokens (printed under `name`).
double folder_vs_gguf(const test::temp_dir & dir, const std::string & gguf, const std::string & name) {
    const auto mf = model::load(dir.path.string());
    const auto mg = model::load(gguf);
    EXPECT_EQ(mg->format(), "gguf");
    EXPECT_EQ(mg->hp().arch, mf->hp().arch);
    EXPECT_EQ(mg->hp().n_vocab, mf->hp().n_vocab);
    EXPECT_EQ(mg->hp().n_embd_word, mf->hp().n_embd_word);
    EXPECT_EQ(mg->hp().norm_before, mf->hp().norm_before);
    EXPECT_EQ(mg->hp().n_ff, mf->hp().n_ff);
    EXPECT_EQ(mg->hp().n_ctx_train, mf->hp().n_ctx_train);
    EXPECT_EQ(mg->hp().rms_eps, mf->hp().rms_eps);
    EXPECT_EQ(mg->n_params(), mf->n_params());
    const double d = rel_diff(logits_of(*mf, k_tokens), logits_of(*mg, k_tokens));
    std::printf("%s: folder vs GGUF max |diff| / max |logit| = %.2e\n", name.c_str(), d);
    return d;
}

// Dimensions that are multiples of 32 so that Q8_0 covers every matrix; vocab_size holds the tiny
// tokenizer (261 tokens); 64 positions hold logits_of's context.
json opt_config(bool norm_before, int64_t word_embed_proj_dim) {
    return {{"model_type", "opt"},
            {"architectures", json::array({"OPTForCausalLM"})},
            {"vocab_size", 264},
            {"hidden_size", 64},
            {"ffn_dim", 96},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"max_position_embeddings", 64},
            {"activation_function", "relu"},
            {"do_layer_norm_before", norm_before},
            {"word_embed_proj_dim", word_embed_proj_dim}};
}

TEST(convert, llama_f32_tensors_metadata_tokenizer_and_logits) {
    test::temp_dir dir;
    write_llama_checkpoint(dir, "llama");
    write_bpe_tokenizer(dir.path);
    const std::string out = dir.file("out.gguf");
    const convert_result r = convert_hf_to_gguf(dir.path.string(), out, {});
    EXPECT_EQ(r.arch, "llama");
    EXPECT_EQ(r.type, ggml_type::f32);
    EXPECT_EQ(r.n_permuted, 4);  // q and k of 2 layers
    EXPECT_EQ(r.tokenizer_model, "gpt2");
    EXPECT_TRUE(r.warnings.empty());

    const auto g = gguf_file::open(out);
    EXPECT_EQ(g->get_string("general.architecture"), "llama");
    EXPECT_EQ(g->get_uint("general.file_type"), 0u);
    EXPECT_EQ(g->get_uint("llama.block_count"), 2u);
    EXPECT_EQ(g->get_uint("llama.embedding_length"), 64u);
    EXPECT_EQ(g->get_uint("llama.feed_forward_length"), 96u);
    EXPECT_EQ(g->get_uint("llama.attention.head_count"), 4u);
    EXPECT_EQ(g->get_uint("llama.attention.head_count_kv"), 2u);
    EXPECT_EQ(g->get_uint("llama.context_length"), 512u);
    EXPECT_EQ(g->get_uint("llama.rope.dimension_count"), 16u);
    EXPECT_NEAR(*g->get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);
    EXPECT_EQ(g->find("llama.rope.scaling.type"), nullptr);
    // 1 + 2 × 9 + 2 tensors; the inv_freq buffers are dropped.
    EXPECT_EQ(g->tensors().size(), 21u);
    for (const char * n : {"token_embd.weight", "output_norm.weight", "output.weight", "blk.1.attn_q.weight",
                           "blk.1.ffn_gate.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"}) {
        EXPECT_NE(g->find_tensor(n), nullptr) << n;
    }
    const gguf_tensor_info * te = g->find_tensor("token_embd.weight");
    EXPECT_EQ(te->ne[0], 64);
    EXPECT_EQ(te->ne[1], 264);

    // q rows permuted from rotate-half to adjacent pairs; v unchanged.
    const auto src = safetensors_file::open(dir.file("model.safetensors"));
    const safetensors_tensor * hq = src->find("model.layers.1.self_attn.q_proj.weight");
    const gguf_tensor_info * gq = g->find_tensor("blk.1.attn_q.weight");
    ASSERT_NE(gq, nullptr);
    for (int64_t row = 0; row < 64; ++row) {
        const int64_t from = rotate_half_source_row(row, 16);
        EXPECT_EQ(std::memcmp(gq->data + row * 64 * 4, static_cast<const uint8_t *>(hq->data) + from * 64 * 4, 64 * 4), 0)
            << row;
    }
    const safetensors_tensor * hv = src->find("model.layers.1.self_attn.v_proj.weight");
    EXPECT_EQ(std::memcmp(g->find_tensor("blk.1.attn_v.weight")->data, hv->data, hv->size_bytes), 0);

    // Tokenizer keys, and the same ids from the GGUF tokenizer as from the folder's.
    EXPECT_EQ(g->get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(g->get_string("tokenizer.ggml.pre"), "gpt-2");
    EXPECT_EQ(g->get_string_array("tokenizer.ggml.tokens")->size(), 264u);  // padded to vocab_size
    EXPECT_EQ(g->get_string_array("tokenizer.ggml.tokens")->at(263), "[PAD263]");
    EXPECT_EQ(g->get_int_array("tokenizer.ggml.token_type")->at(263), 5);
    EXPECT_EQ(g->get_string_array("tokenizer.ggml.merges")->at(2), "he ll");
    EXPECT_EQ(g->get_int_array("tokenizer.ggml.token_type")->at(260), 3);
    EXPECT_EQ(g->get_uint("tokenizer.ggml.bos_token_id"), 260u);
    const auto tg = load_tokenizer(*g);
    const auto tf = load_tokenizer_folder(dir.path.string());
    for (const char * text : {"hello world", "hello, hello!\n  shell <|endoftext|> héllo"}) {
        EXPECT_EQ(tg->encode(text, true), tf->encode(text, true)) << text;
        EXPECT_EQ(tg->encode_with_special(text, false), tf->encode_with_special(text, false)) << text;
    }
    EXPECT_EQ(tg->encode("hello", false), (std::vector<int32_t>{259}));

    // The folder and the converted file compute the same logits.
    const auto mf = model::load(dir.path.string());
    const auto mg = model::load(out);
    EXPECT_EQ(mg->format(), "gguf");
    EXPECT_LT(rel_diff(logits_of(*mf, k_tokens), logits_of(*mg, k_tokens)), 1e-4);
}

TEST(convert, quantized_and_float_types) {
    test::temp_dir dir;
    write_llama_checkpoint(dir, "llama", json::object(), ggml_type::bf16);
    write_bpe_tokenizer(dir.path);
    const auto mf = model::load(dir.path.string());
    const std::vector<float> ref = logits_of(*mf, k_tokens);
    struct want {
        std::optional<ggml_type> type;
        ggml_type expect;
        uint32_t file_type;
        double tol;
    };
    for (const want & w : {want{std::nullopt, ggml_type::bf16, 32, 1e-4}, want{ggml_type::f16, ggml_type::f16, 1, 2e-2},
                           want{ggml_type::f32, ggml_type::f32, 0, 1e-4}, want{ggml_type::q8_0, ggml_type::q8_0, 7, 5e-2},
                           // 8 and 16 times Q8_0's error (0.015 for this fixed checkpoint: 0.11-0.14 for
                           // Q5_0/Q5_1, 0.31 for Q4_1, as 3 and 4 fewer bits make it), with a margin.
                           want{ggml_type::q5_1, ggml_type::q5_1, 9, 0.25}, want{ggml_type::q5_0, ggml_type::q5_0, 8, 0.25},
                           want{ggml_type::q4_1, ggml_type::q4_1, 3, 0.5}}) {
        SCOPED_TRACE(ggml_type_name(w.expect));
        const std::string out = dir.file("out.gguf");
        const convert_result r = convert_hf_to_gguf(dir.path.string(), out, {w.type});
        EXPECT_EQ(r.type, w.expect);
        EXPECT_EQ(r.n_fallback, 0);
        EXPECT_EQ(r.tokenizer_model, "gpt2");
        const auto g = gguf_file::open(out);
        EXPECT_EQ(g->get_uint("general.file_type"), w.file_type);
        EXPECT_EQ(g->find_tensor("blk.0.ffn_down.weight")->type, w.expect);
        EXPECT_EQ(g->find_tensor("token_embd.weight")->type, w.expect);
        EXPECT_EQ(g->find_tensor("blk.0.attn_norm.weight")->type, ggml_type::f32);
        if (ggml_block_size(w.expect) > 1) {
            EXPECT_EQ(g->get_uint("general.quantization_version"), 2u);
        }
        const auto mg = model::load(out);
        const double err = rel_diff(ref, logits_of(*mg, k_tokens));
        EXPECT_LT(err, w.tol);
        RecordProperty(std::string(ggml_type_name(w.expect)) + "_rel_logit_diff", std::to_string(err));
    }
}

// q4_k_m on rows of 64 and 96 (not multiples of 256): llama.cpp's fallbacks, Q4_K -> Q5_0 and the
// output's Q6_K -> Q8_0, counted; file_type 15 (Q4_K_M).
TEST(convert, q4_k_m_falls_back_on_narrow_rows) {
    test::temp_dir dir;
    write_llama_checkpoint(dir, "llama");
    write_bpe_tokenizer(dir.path);
    const std::string out = dir.file("out.gguf");
    const convert_result r = convert_hf_to_gguf(dir.path.string(), out, {weight_scheme(ggml_type::q4_k, true)});
    EXPECT_EQ(r.type, weight_scheme(ggml_type::q4_k, true));
    EXPECT_EQ(r.n_fallback, r.n_tensors - 5);  // all but the 5 norms (2 layers × 2 + output_norm)
    const auto g = gguf_file::open(out);
    EXPECT_EQ(g->get_uint("general.file_type"), 15u);
    EXPECT_EQ(g->find_tensor("output.weight")->type, ggml_type::q8_0);
    EXPECT_EQ(g->find_tensor("blk.1.attn_v.weight")->type, ggml_type::q8_0);  // layer 1 of 2: more bits
    EXPECT_EQ(g->find_tensor("blk.0.attn_v.weight")->type, ggml_type::q5_0);
    EXPECT_EQ(g->find_tensor("blk.0.attn_q.weight")->type, ggml_type::q5_0);
    EXPECT_EQ(g->find_tensor("token_embd.weight")->type, ggml_type::q5_0);
    EXPECT_NE(model::load(out), nullptr);
}

TEST(convert, qwen2_biases_not_permuted) {
    test::temp_dir dir;
    write_llama_checkpoint(dir, "qwen2");
    write_bpe_tokenizer(dir.path);
    const std::string out = dir.file("out.gguf");
    const convert_result r = convert_hf_to_gguf(dir.path.string(), out, {});
    EXPECT_EQ(r.arch, "qwen2");
    EXPECT_EQ(r.n_permuted, 0);
    const auto g = gguf_file::open(out);
    EXPECT_EQ(g->get_string("general.architecture"), "qwen2");
    EXPECT_EQ(g->get_uint("qwen2.block_count"), 2u);
    ASSERT_NE(g->find_tensor("blk.1.attn_k.bias"), nullptr);
    const auto src = safetensors_file::open(dir.file("model.safetensors"));
    const safetensors_tensor * hq = src->find("model.layers.0.self_attn.q_proj.weight");
    EXPECT_EQ(std::memcmp(g->find_tensor("blk.0.attn_q.weight")->data, hq->data, hq->size_bytes), 0);
    const auto mf = model::load(dir.path.string());
    const auto mg = model::load(out);
    EXPECT_LT(rel_diff(logits_of(*mf, k_tokens), logits_of(*mg, k_tokens)), 1e-4);
}

TEST(convert, rope_scaling_linear_and_llama3) {
    test::temp_dir dir;
    write_llama_checkpoint(dir, "llama", {{"rope_scaling", {{"type", "linear"}, {"factor", 4.0}}}});
    write_bpe_tokenizer(dir.path);
    convert_hf_to_gguf(dir.path.string(), dir.file("lin.gguf"), {});
    const auto g = gguf_file::open(dir.file("lin.gguf"));
    EXPECT_EQ(g->get_string("llama.rope.scaling.type"), "linear");
    EXPECT_NEAR(*g->get_float("llama.rope.scaling.factor"), 4.0, 1e-6);
    EXPECT_LT(rel_diff(logits_of(*model::load(dir.path.string()), k_tokens),
                       logits_of(*model::load(dir.file("lin.gguf")), k_tokens)),
              1e-4);

    test::temp_dir dir3;
    write_llama_checkpoint(dir3, "llama",
                           {{"rope_theta", 500000.0},
                            {"rope_scaling",
                             {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}}}});
    write_bpe_tokenizer(dir3.path);
    const convert_result r = convert_hf_to_gguf(dir3.path.string(), dir3.file("l3.gguf"), {});
    const auto g3 = gguf_file::open(dir3.file("l3.gguf"));
    const gguf_tensor_info * rf = g3->find_tensor("rope_freqs.weight");
    ASSERT_NE(rf, nullptr);
    EXPECT_EQ(rf->ne[0], 8);
    EXPECT_EQ(r.n_tensors, 22);
    EXPECT_LT(rel_diff(logits_of(*model::load(dir3.path.string()), k_tokens),
                       logits_of(*model::load(dir3.file("l3.gguf")), k_tokens)),
              1e-4);
}

TEST(convert, sentencepiece_style_tokenizer_json) {
    // Llama-2 style: BPE with byte_fallback, "▁" for space, Prepend normalizer, <unk> <s> </s>.
    test::temp_dir dir;
    write_llama_checkpoint(dir, "llama");
    const std::string sp = "\xe2\x96\x81";
    json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
    for (int b = 0; b < 128; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;  // ASCII: enough here
    int id = 131;
    for (const std::string & p : std::vector<std::string>{sp, "h", "e", "l", "o", "w", "r", "d"}) vocab[p] = id++;
    const std::vector<std::pair<std::string, std::string>> merges = {
        {"h", "e"}, {"l", "l"}, {sp, "he"}, {sp + "he", "ll"}, {sp + "hell", "o"}};
    json jm = json::array();
    for (const auto & [a, b] : merges) {
        vocab[a + b] = id++;
        jm.push_back(a + " " + b);
    }
    const json tok = {
        {"added_tokens", json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                      {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                      {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
        {"normalizer",
         {{"type", "Sequence"},
          {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", sp}},
                                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}}})}}},
        {"pre_tokenizer", nullptr},
        {"model", {{"type", "BPE"}, {"byte_fallback", true}, {"unk_token", "<unk>"}, {"vocab", vocab}, {"merges", jm}}},
    };
    write_text(dir.file("tokenizer.json"), tok.dump());
    const std::string chat = "{% for message in messages %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endfor %}";
    write_text(dir.file("tokenizer_config.json"),
               json{{"bos_token", "<s>"}, {"add_bos_token", true}, {"chat_template", chat}}.dump());
    // The folder's model cannot load this tokenizer (byte-level only), but convert can write it.
    const convert_result r = convert_hf_to_gguf(dir.path.string(), dir.file("spm.gguf"), {});
    EXPECT_EQ(r.tokenizer_model, "llama");
    const auto g = gguf_file::open(dir.file("spm.gguf"));
    EXPECT_EQ(g->get_string("tokenizer.ggml.model"), "llama");
    EXPECT_EQ(g->get_uint("tokenizer.ggml.bos_token_id"), 1u);
    EXPECT_EQ(g->get_uint("tokenizer.ggml.eos_token_id"), 2u);
    EXPECT_EQ(g->get_uint("tokenizer.ggml.unknown_token_id"), 0u);
    EXPECT_EQ(g->get_bool("tokenizer.ggml.add_space_prefix"), true);
    EXPECT_EQ(g->get_string("tokenizer.chat_template"), chat);
    const std::vector<int64_t> types = *g->get_int_array("tokenizer.ggml.token_type");
    EXPECT_EQ(types[0], 3);  // <unk> is also a special added token
    EXPECT_EQ(types[3], 6);  // <0x00>
    EXPECT_EQ(types[131], 1);
    EXPECT_EQ(types[263], 5);  // padding up to vocab_size
    const auto t = load_tokenizer(*g);
    const int32_t hello = vocab[sp + "hello"].get<int32_t>();
    EXPECT_EQ(t->encode("hello", true), (std::vector<int32_t>{1, hello}));
    // "hello wo": ▁hello ▁ w o; a byte outside the vocab falls back to <0xXX>.
    const std::vector<int32_t> ids = t->encode("hello w!", false);
    EXPECT_EQ(ids, (std::vector<int32_t>{hello, vocab[sp].get<int32_t>(), vocab["w"].get<int32_t>(), 3 + '!'}));
}

TEST(convert, opt_pre_norm) {
    if (!numpy_available()) GTEST_SKIP() << "/usr/bin/python3 with numpy (Debian python3-numpy) not found";
    test::temp_dir dir;
    write_reference_checkpoint(dir, opt_config(true, 64), "f16");
    const std::string out = dir.file("out.gguf");
    const convert_result r = convert_hf_to_gguf(dir.path.string(), out, {});
    EXPECT_EQ(r.arch, "opt");
    EXPECT_EQ(r.type, ggml_type::f16);
    EXPECT_EQ(r.n_permuted, 0);
    EXPECT_EQ(r.tokenizer_model, "gpt2");
    const auto g = gguf_file::open(out);
    EXPECT_EQ(g->get_string("general.architecture"), "opt");
    EXPECT_EQ(g->get_uint("opt.context_length"), 64u);
    EXPECT_EQ(g->get_uint("opt.feed_forward_length"), 96u);
    EXPECT_EQ(g->get_uint("opt.word_embedding_length"), 64u);
    EXPECT_EQ(g->get_bool("opt.layer_norm_before"), true);
    EXPECT_NEAR(*g->get_float("opt.attention.layer_norm_epsilon"), 1e-5, 1e-9);
    const gguf_tensor_info * pos = g->find_tensor("position_embd.weight");
    ASSERT_NE(pos, nullptr);
    EXPECT_EQ(pos->ne[1], 66);  // max_position_embeddings + OPT's 2 reserved rows
    EXPECT_NE(g->find_tensor("output_norm.bias"), nullptr);
    EXPECT_EQ(g->find_tensor("token_embd_proj.weight"), nullptr);
    EXPECT_EQ(g->find_tensor("output.weight"), nullptr);  // tied to token_embd
    const auto mg = model::load(out);
    EXPECT_EQ(mg->hp().position, position_kind::learned);
    EXPECT_EQ(mg->hp().norm, norm_kind::layer);
    EXPECT_EQ(mg->hp().ffn, ffn_kind::relu);
    EXPECT_TRUE(mg->hp().norm_before);
    EXPECT_LT(folder_vs_gguf(dir, out, "opt f16"), 1e-4);
}

// opt-350m's shape: post-norm blocks, no final LayerNorm, word embeddings narrower than hidden_size
// with project_in / project_out.
TEST(convert, opt_350m_like_post_norm_projected_embedding) {
    if (!numpy_available()) GTEST_SKIP() << "/usr/bin/python3 with numpy (Debian python3-numpy) not found";
    test::temp_dir dir;
    write_reference_checkpoint(dir, opt_config(false, 32), "f32");
    const std::string out = dir.file("out.gguf");
    const convert_result r = convert_hf_to_gguf(dir.path.string(), out, {});
    EXPECT_EQ(r.type, ggml_type::f32);
    const auto g = gguf_file::open(out);
    EXPECT_EQ(g->get_uint("opt.word_embedding_length"), 32u);
    EXPECT_EQ(g->get_bool("opt.layer_norm_before"), false);
    const gguf_tensor_info * proj_in = g->find_tensor("token_embd_proj.weight");
    ASSERT_NE(proj_in, nullptr);
    EXPECT_EQ(proj_in->ne[0], 32);
    EXPECT_EQ(proj_in->ne[1], 64);
    EXPECT_NE(g->find_tensor("output_proj.weight"), nullptr);
    EXPECT_EQ(g->find_tensor("output_norm.weight"), nullptr);
    EXPECT_EQ(g->find_tensor("token_embd.weight")->ne[0], 32);
    const auto mg = model::load(out);
    EXPECT_FALSE(mg->hp().norm_before);
    EXPECT_EQ(mg->hp().n_embd_word, 32);
    EXPECT_EQ(mg->proj_in().n_cols, 32);
    EXPECT_EQ(mg->proj_out().n_rows, 32);
    EXPECT_LT(folder_vs_gguf(dir, out, "opt 350m-like f32"), 1e-4);

    const std::string q8 = dir.file("q8.gguf");
    const convert_result rq = convert_hf_to_gguf(dir.path.string(), q8, {ggml_type::q8_0});
    EXPECT_EQ(rq.n_fallback, 0);
    EXPECT_EQ(gguf_file::open(q8)->find_tensor("token_embd_proj.weight")->type, ggml_type::q8_0);
    EXPECT_LT(folder_vs_gguf(dir, q8, "opt 350m-like q8_0"), 5e-2);
}

// Qwen-1: one fused c_attn (q, k, v rows) with bias, not permuted; feed_forward_length twice the
// w1/w2 width.
TEST(convert, qwen_fused_qkv) {
    if (!numpy_available()) GTEST_SKIP() << "/usr/bin/python3 with numpy (Debian python3-numpy) not found";
    test::temp_dir dir;
    const json config = {{"model_type", "qwen"},       {"architectures", json::array({"QWenLMHeadModel"})},
                         {"vocab_size", 264},          {"hidden_size", 64},
                         {"intermediate_size", 192},   {"num_hidden_layers", 2},
                         {"num_attention_heads", 4},   {"kv_channels", 16},
                         {"seq_length", 64},           {"max_position_embeddings", 64},
                         {"layer_norm_epsilon", 1e-6}, {"rotary_emb_base", 10000},
                         {"rotary_pct", 1.0},          {"no_bias", true}};
    write_reference_checkpoint(dir, config, "bf16");
    const std::string out = dir.file("out.gguf");
    const convert_result r = convert_hf_to_gguf(dir.path.string(), out, {});
    EXPECT_EQ(r.arch, "qwen");
    EXPECT_EQ(r.type, ggml_type::bf16);
    EXPECT_EQ(r.n_permuted, 0);
    const auto g = gguf_file::open(out);
    EXPECT_EQ(g->get_string("general.architecture"), "qwen");
    EXPECT_EQ(g->get_uint("qwen.feed_forward_length"), 192u);
    const gguf_tensor_info * qkv = g->find_tensor("blk.1.attn_qkv.weight");
    ASSERT_NE(qkv, nullptr);
    EXPECT_EQ(qkv->ne[0], 64);
    EXPECT_EQ(qkv->ne[1], 192);
    EXPECT_NE(g->find_tensor("blk.1.attn_qkv.bias"), nullptr);
    // Stored as in the checkpoint: c_attn's bytes unchanged.
    const auto src = safetensors_file::open(dir.file("model.safetensors"));
    const safetensors_tensor * hq = src->find("transformer.h.1.attn.c_attn.weight");
    ASSERT_NE(hq, nullptr);
    EXPECT_EQ(std::memcmp(qkv->data, hq->data, hq->size_bytes), 0);
    EXPECT_LT(folder_vs_gguf(dir, out, "qwen bf16"), 1e-4);
}

// Every key convert writes for opt is required; the error names the missing one.
TEST(convert, opt_gguf_missing_keys_are_named) {
    const char * keys[] = {"opt.context_length",        "opt.embedding_length",     "opt.feed_forward_length",
                           "opt.block_count",           "opt.attention.head_count", "opt.attention.layer_norm_epsilon",
                           "opt.word_embedding_length", "opt.layer_norm_before"};
    test::temp_dir dir;
    for (const char * missing : keys) {
        gguf_writer w;
        w.set_string("general.architecture", "opt");
        for (const char * k : keys) {
            if (std::string(k) == missing) continue;
            if (std::string(k) == "opt.attention.layer_norm_epsilon") {
                w.set_f32(k, 1e-5f);
            } else if (std::string(k) == "opt.layer_norm_before") {
                w.set_bool(k, true);
            } else {
                w.set_u32(k, 8);
            }
        }
        const std::string path = dir.file("opt.gguf");
        w.write(path);
        try {
            model::load(path);
            ADD_FAILURE() << "loaded without " << missing;
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::bad_input) << e.what();
            EXPECT_NE(std::string(e.what()).find(fmt::format("'{}'", missing)), std::string::npos) << e.what();
        }
    }
}

TEST(convert, errors) {
    test::temp_dir dir;
    EXPECT_THROW(convert_hf_to_gguf(dir.path.string(), dir.file("x.gguf"), {}), error);  // no config.json
    write_llama_checkpoint(dir, "llama", {{"model_type", "gpt_neox"}, {"architectures", json::array({"GPTNeoX"})}});
    try {
        convert_hf_to_gguf(dir.path.string(), dir.file("x.gguf"), {});
        ADD_FAILURE();
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("gpt_neox"), std::string::npos) << e.what();
    }
    write_llama_checkpoint(dir, "llama");
    EXPECT_THROW(convert_hf_to_gguf(dir.path.string(), dir.file("no/such/dir/x.gguf"), {}), error);
    // No tokenizer files: written without tokenizer keys, with a warning.
    const convert_result r = convert_hf_to_gguf(dir.path.string(), dir.file("x.gguf"), {});
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_NE(r.warnings[0].find("no tokenizer"), std::string::npos) << r.warnings[0];
    EXPECT_EQ(r.tokenizer_model, "");
    EXPECT_EQ(gguf_file::open(dir.file("x.gguf"))->find("tokenizer.ggml.model"), nullptr);
    {
        // ... and it loads, to run on token ids, like the folder it came from.
        const auto folder = model::load(dir.path.string());
        const auto gguf = model::load(dir.file("x.gguf"));
        EXPECT_FALSE(gguf->has_tokenizer());
        EXPECT_EQ(gguf->hp().n_vocab, folder->hp().n_vocab);
        EXPECT_THROW(gguf->tokenizer(), error);
    }
    // A tokenizer larger than vocab_size.
    write_llama_checkpoint(dir, "llama", {{"vocab_size", 100}});
    write_bpe_tokenizer(dir.path);
    EXPECT_THROW(convert_hf_to_gguf(dir.path.string(), dir.file("x.gguf"), {}), error);
}

// convert refuses what the engine could not run, and never writes over its own input.
TEST(convert, refuses_broken_checkpoints_and_its_own_files_as_output) {
    test::temp_dir dir;
    write_llama_checkpoint(dir, "llama", {{"num_hidden_layers", 3}});  // the tensors are for 2 layers
    try {
        convert_hf_to_gguf(dir.path.string(), dir.file("x.gguf"), {});
        ADD_FAILURE() << "converted";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("'model.layers.2.input_layernorm.weight' (blk.2.attn_norm.weight)"),
                  std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(dir.file("x.gguf")));
    write_llama_checkpoint(dir, "llama");
    // The files of the other tokenizer formats too (a GPT-2 folder's encoder.json + vocab.bpe were written over).
    for (const char * f : {"vocab.json", "merges.txt", "encoder.json", "vocab.bpe"}) write_text(dir.file(f), f);
    for (const char * own :
         {"config.json", "model.safetensors", "vocab.json", "merges.txt", "encoder.json", "vocab.bpe"}) {
        try {
            convert_hf_to_gguf(dir.path.string(), dir.file(own), {});
            ADD_FAILURE() << own;
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::usage) << e.what();
            EXPECT_NE(std::string(e.what()).find("own file"), std::string::npos) << e.what();
        }
    }
    for (const char * f : {"vocab.json", "merges.txt", "encoder.json", "vocab.bpe"}) {
        std::ifstream in(dir.file(f));
        EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), f) << "written over";
        std::filesystem::remove(dir.file(f));
    }
    EXPECT_NO_THROW(model::load(dir.path.string()));  // untouched
}

}  // namespace
}  // namespace hill
