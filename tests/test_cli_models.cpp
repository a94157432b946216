// `hillinfer tokenize` and `hillinfer info` on every model source: GGUF files (also vocab-only),
// Hugging Face checkpoint folders of each architecture, tokenizer-only folders.
#include "format/safetensors_file.h"
#include "model/synthetic_model.h"
#include "hf_test_util.h"
#include "cli_test_util.h"
#include "test_util.h"
#include "tokenizer/bpe_tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sys/wait.h>

namespace hill {
namespace {

using test::write_bpe_tokenizer;
using test::write_text;

using json = nlohmann::json;

using result = test::cli_result;

result run(const std::string & args, const std::string & redirect = " 2>&1") {
    return test::run_cli(args, redirect);
}

#define EXPECT_MENTIONS(out, text) EXPECT_NE((out).find(text), std::string::npos) << (out)

// The weights of an HF checkpoint of `config` (llama, qwen2 or opt), all 0.01, in model.safetensors,
// and config.json: enough for `info` (shapes only) and for loading.
void write_checkpoint(const std::filesystem::path & dir, const json & cfg) {
    std::filesystem::create_directories(dir);
    const std::string mt = cfg.at("model_type");
    const int64_t V = cfg.at("vocab_size"), E = cfg.at("hidden_size"), L = cfg.at("num_hidden_layers"),
                  H = cfg.at("num_attention_heads");
    std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
    if (mt == "llama" || mt == "qwen2") {
        const int64_t KV = cfg.value("num_key_value_heads", H), D = E / H, F = cfg.at("intermediate_size");
        shapes.push_back({"model.embed_tokens.weight", {V, E}});
        for (int64_t i = 0; i < L; ++i) {
            const std::string p = "model.layers." + std::to_string(i) + ".";
            shapes.push_back({p + "input_layernorm.weight", {E}});
            shapes.push_back({p + "self_attn.q_proj.weight", {H * D, E}});
            shapes.push_back({p + "self_attn.k_proj.weight", {KV * D, E}});
            shapes.push_back({p + "self_attn.v_proj.weight", {KV * D, E}});
            shapes.push_back({p + "self_attn.o_proj.weight", {E, H * D}});
            shapes.push_back({p + "post_attention_layernorm.weight", {E}});
            shapes.push_back({p + "mlp.gate_proj.weight", {F, E}});
            shapes.push_back({p + "mlp.up_proj.weight", {F, E}});
            shapes.push_back({p + "mlp.down_proj.weight", {E, F}});
            if (mt == "qwen2") {
                shapes.push_back({p + "self_attn.q_proj.bias", {H * D}});
                shapes.push_back({p + "self_attn.k_proj.bias", {KV * D}});
                shapes.push_back({p + "self_attn.v_proj.bias", {KV * D}});
            }
        }
        shapes.push_back({"model.norm.weight", {E}});
        shapes.push_back({"lm_head.weight", {V, E}});
    } else {
        ASSERT_EQ(mt, "opt");
        const int64_t F = cfg.at("ffn_dim"), P = cfg.at("max_position_embeddings");
        const int64_t W = cfg.value("word_embed_proj_dim", E);
        const std::string d = "model.decoder.";
        shapes.push_back({d + "embed_tokens.weight", {V, W}});
        shapes.push_back({d + "embed_positions.weight", {P + 2, E}});
        if (W != E) {
            shapes.push_back({d + "project_in.weight", {E, W}});
            shapes.push_back({d + "project_out.weight", {W, E}});
        }
        for (int64_t i = 0; i < L; ++i) {
            const std::string p = d + "layers." + std::to_string(i) + ".";
            for (const char * proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
                shapes.push_back({p + "self_attn." + proj + ".weight", {E, E}});
                shapes.push_back({p + "self_attn." + proj + ".bias", {E}});
            }
            for (const char * ln : {"self_attn_layer_norm", "final_layer_norm"}) {
                shapes.push_back({p + ln + ".weight", {E}});
                shapes.push_back({p + ln + ".bias", {E}});
            }
            shapes.push_back({p + "fc1.weight", {F, E}});
            shapes.push_back({p + "fc1.bias", {F}});
            shapes.push_back({p + "fc2.weight", {E, F}});
            shapes.push_back({p + "fc2.bias", {E}});
        }
        if (cfg.value("do_layer_norm_before", true)) {
            shapes.push_back({d + "final_layer_norm.weight", {E}});
            shapes.push_back({d + "final_layer_norm.bias", {E}});
        }
    }
    std::vector<std::vector<float>> store;
    std::vector<safetensors_entry> es;
    for (auto & [name, shape] : shapes) {
        int64_t n = 1;
        for (int64_t s : shape) n *= s;
        store.emplace_back(size_t(n), 0.01f);
        es.push_back({name, ggml_type::f32, shape, store.back().data(), uint64_t(n) * 4});
    }
    const std::vector<uint8_t> img = safetensors_serialize(es);
    std::ofstream(dir / "model.safetensors", std::ios::binary)
        .write(reinterpret_cast<const char *>(img.data()), std::streamsize(img.size()));
    write_text(dir / "config.json", cfg.dump(2));
}

// A tiny byte-level BPE tokenizer.json: the 256 byte pieces, merges "h e", "l l", "he ll",
// "hell o", and the special token "<|endoftext|>" (260), which doubles as BOS and EOS: no BOS is
// added.
const json k_llama = {
    {"model_type", "llama"}, {"vocab_size", 264}, {"hidden_size", 64}, {"intermediate_size", 96},
    {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
    {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0},
    {"tie_word_embeddings", false}};
const json k_opt = {
    {"model_type", "opt"}, {"vocab_size", 264}, {"hidden_size", 64}, {"ffn_dim", 96}, {"num_hidden_layers", 2},
    {"num_attention_heads", 4}, {"max_position_embeddings", 128}, {"activation_function", "relu"},
    {"do_layer_norm_before", true}};

class cli_models : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir = new test::temp_dir();
        write_random_model(dir->file("m.gguf"), random_model_params{.n_vocab = 300, .n_embd = 64, .n_ff = 96,
                                                                    .n_layer = 2, .n_head = 4, .n_head_kv = 2,
                                                                    .n_ctx = 64});
        write_checkpoint(dir->path / "llama", k_llama);
        write_bpe_tokenizer(dir->path / "llama");
        json llama3 = k_llama;
        llama3["rope_theta"] = 500000.0;
        llama3["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                  {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
        write_checkpoint(dir->path / "llama3", llama3);
        json qwen2 = k_llama;
        qwen2["model_type"] = "qwen2";
        write_checkpoint(dir->path / "qwen2", qwen2);
        write_checkpoint(dir->path / "opt", k_opt);
        json opt_post = k_opt;
        opt_post["do_layer_norm_before"] = false;
        opt_post["word_embed_proj_dim"] = 32;
        write_checkpoint(dir->path / "opt-post", opt_post);
        std::filesystem::create_directories(dir->path / "tok-only");
        write_bpe_tokenizer(dir->path / "tok-only");
    }
    static void TearDownTestSuite() { delete dir; }
    static std::string path(const std::string & name) { return dir->file(name); }
    static test::temp_dir * dir;
};
test::temp_dir * cli_models::dir = nullptr;

// --- tokenize ---------------------------------------------------------------------------------

TEST_F(cli_models, tokenize_vocab_only_gguf_prints_real_bytes) {
    HILL_REQUIRE_DATA(gguf, "tokenizers/llamacpp-vocab/ggml-vocab-gpt-2.gguf");
    // The bug: tokenize loaded the whole model, and a vocab-only GGUF (no weights, architecture
    // gpt2) failed. GPT-2 adds no BOS.
    result r = run("tokenize -m " + gguf + " -p 'Hello world' --ids");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out, "15496 995\n");
    // Pieces as the bytes they stand for (" world", not the byte-level "Ġworld"); a newline, a
    // backslash and a quote escaped; valid UTF-8 as is.
    write_text(path("text.txt"), "Hello world\n\\'caf\xc3\xa9");
    r = run("tokenize -m " + gguf + " -f " + path("text.txt"), " 2>/dev/null");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_MENTIONS(r.out, "  15496 'Hello'\n");
    EXPECT_MENTIONS(r.out, "    995 ' world'\n");
    EXPECT_MENTIONS(r.out, "'\\n'");
    EXPECT_MENTIONS(r.out, "\\\\");
    EXPECT_MENTIONS(r.out, "\\'");
    EXPECT_MENTIONS(r.out, "\xc3\xa9'");
    EXPECT_EQ(r.out.find("\xc4\xa0"), std::string::npos) << r.out;  // no "Ġ"
}

TEST_F(cli_models, tokenize_partial_utf8_pieces_are_escaped) {
    HILL_REQUIRE_DATA(gguf, "tokenizers/llamacpp-vocab/ggml-vocab-gpt-2.gguf");
    // An emoji GPT-2 splits into three tokens ("\xf0\x9f", "\xa6", "\x99"): no piece is valid UTF-8
    // alone, so each shows its bytes as \xNN, and together they are the character's four bytes.
    const result r = run("tokenize -m " + gguf + " -p '\xf0\x9f\xa6\x99'", " 2>/dev/null");
    EXPECT_EQ(r.code, 0) << r.out;
    std::string bytes;
    for (size_t i = r.out.find("\\x"); i != std::string::npos; i = r.out.find("\\x", i + 4)) {
        bytes += char(std::stoi(r.out.substr(i + 2, 2), nullptr, 16));
    }
    EXPECT_EQ(bytes, "\xf0\x9f\xa6\x99") << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3) << r.out;
}

TEST_F(cli_models, tokenize_checkpoint_and_tokenizer_folders) {
    for (const char * folder : {"llama", "tok-only"}) {
        result r = run("tokenize -m " + path(folder) + " -p hello --ids");
        EXPECT_EQ(r.code, 0) << folder << ": " << r.out;
        EXPECT_EQ(r.out, "259\n") << folder;
        r = run("tokenize -m " + path(folder) + " -p 'hello hi'", " 2>/dev/null");
        EXPECT_EQ(r.code, 0) << r.out;
        EXPECT_EQ(r.out, "    259 'hello'\n     32 ' '\n    104 'h'\n    105 'i'\n") << folder;
    }
    // A checkpoint folder without tokenizer files: the error names the folder and what was looked for.
    const result r = run("tokenize -m " + path("opt") + " -p hi");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_MENTIONS(r.out, path("opt"));
    EXPECT_MENTIONS(r.out, "tokenizer.json");
    // --tokenizer is for llama2.c checkpoints only.
    EXPECT_EQ(run("tokenize -m " + path("llama") + " --tokenizer " + path("m.gguf") + " -p hi").code, 2);
    EXPECT_EQ(run("tokenize -m " + path("m.gguf") + " --tokenizer " + path("m.gguf") + " -p hi").code, 2);
}

TEST_F(cli_models, tokenize_gguf_model_bos_and_control_tokens) {
    result r = run("tokenize -m " + path("m.gguf") + " -p ab --ids");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out.substr(0, 2), "1 ") << r.out;
    const std::string with_bos = r.out;
    r = run("tokenize -m " + path("m.gguf") + " -p ab --ids --no-bos");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_EQ("1 " + r.out, with_bos);
    // BOS, a control token, is shown by name; SentencePiece's space prefix as a real space.
    r = run("tokenize -m " + path("m.gguf") + " -p ab", " 2>/dev/null");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out.substr(0, 21), "      1 <s> (control)") << r.out;
    EXPECT_EQ(r.out.find("\xe2\x96\x81"), std::string::npos) << r.out;  // no "▁"
    // A llama2.c checkpoint still needs --tokenizer.
    write_text(path("x.bin"), std::string(64, '\0'));
    r = run("tokenize -m " + path("x.bin") + " -p hi");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_MENTIONS(r.out, "--tokenizer");
}

// --- info -------------------------------------------------------------------------------------

TEST_F(cli_models, info_gguf_llama) {
    const result r = run("info -m " + path("m.gguf"));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_MENTIONS(r.out, "positions:        RoPE, adjacent pairs (2i, 2i + 1), freq base 10000, linear scale 1\n");
    EXPECT_MENTIONS(r.out, "normalization:    RMSNorm, pre-norm, eps 1e-05\n");
    EXPECT_MENTIONS(r.out, "activation:       SwiGLU");
    EXPECT_MENTIONS(r.out, "biases:           none\n");
}

TEST_F(cli_models, info_llama_folders_rotate_half_and_llama3_factors) {
    result r = run("info -m " + path("llama"));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_MENTIONS(r.out, "(hf)");
    EXPECT_MENTIONS(r.out,
                    "positions:        RoPE, rotate-half pairs (i, i + head_dim/2), freq base 10000, linear scale 1\n");
    EXPECT_EQ(r.out.find("frequency factors"), std::string::npos) << r.out;
    r = run("info -m " + path("llama3"));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_MENTIONS(r.out, "freq base 500000, linear scale 1, frequency factors 1 to 8 over 8 pairs (Llama 3");
    r = run("info -m " + path("llama3") + " --json");
    EXPECT_EQ(r.code, 0) << r.out;
    const json j = json::parse(r.out);
    EXPECT_EQ(j.at("position"), "rope");
    EXPECT_EQ(j.at("rope_layout"), "rotate_half");
    EXPECT_EQ(j.at("rope_freq_factors").size(), 8u);
    EXPECT_EQ(j.at("rope_freq_factors").front(), 1.0);
    EXPECT_EQ(j.at("rope_freq_factors").back(), 8.0);
    EXPECT_EQ(j.at("norm"), "rms");
    EXPECT_EQ(j.at("ffn"), "swiglu");
    EXPECT_EQ(j.at("biases"), json::array());
}

TEST_F(cli_models, info_qwen2_lists_qkv_biases) {
    const result r = run("info -m " + path("qwen2"));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_MENTIONS(r.out, "architecture:     qwen2\n");
    EXPECT_MENTIONS(r.out, "biases:           q, k, v\n");
}

TEST_F(cli_models, info_opt_learned_positions_layernorm_relu) {
    // The bug: OPT printed a RoPE line.
    result r = run("info -m " + path("opt"));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out.find("RoPE"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("rope"), std::string::npos) << r.out;
    EXPECT_MENTIONS(r.out, "positions:        learned absolute embeddings, 128 positions\n");
    EXPECT_MENTIONS(r.out, "normalization:    LayerNorm, pre-norm");
    EXPECT_MENTIONS(r.out, "activation:       ReLU MLP");
    EXPECT_MENTIONS(r.out, "biases:           q, k, v, attn_output, ffn_up, ffn_down, norm\n");
    r = run("info -m " + path("opt-post"));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_MENTIONS(r.out, "embedding:        64 (word embedding 32, projected in and out)\n");
    EXPECT_MENTIONS(r.out, "normalization:    LayerNorm, post-norm (no final norm)");
    r = run("info -m " + path("opt") + " --json");
    EXPECT_EQ(r.code, 0) << r.out;
    const json j = json::parse(r.out);
    EXPECT_EQ(j.at("position"), "learned");
    EXPECT_EQ(j.at("n_positions"), 128);
    EXPECT_FALSE(j.contains("rope_freq_base"));
    EXPECT_FALSE(j.contains("rope_layout"));
    EXPECT_EQ(j.at("norm"), "layer");
    EXPECT_EQ(j.at("norm_before"), true);
    EXPECT_EQ(j.at("ffn"), "relu");
    EXPECT_EQ(j.at("biases").size(), 7u);
}

}  // namespace
}  // namespace hill
