// Helpers shared by the suites that write Hugging Face checkpoint folders (convert, CLI).
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "core/fp16.h"
#include "core/ggml_type.h"
#include "format/safetensors_file.h"
#include "tokenizer/bpe_tokenizer.h"

namespace hill::test {

inline void write_text(const std::filesystem::path & path, const std::string & s) {
    std::ofstream f(path, std::ios::binary);
    f << s;
    ASSERT_TRUE(f.good()) << path;
}

// A tiny byte-level BPE in `dir` (tokenizer.json + tokenizer_config.json): the 256 byte pieces,
// merges "h e", "l l", "he ll", "hell o", and the special token "<|endoftext|>" (id 260). 261 tokens.
inline void write_bpe_tokenizer(const std::filesystem::path & dir) {
    using json = nlohmann::json;
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[bpe_byte_to_piece(uint8_t(b))] = b;
    const std::vector<std::pair<std::string, std::string>> merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}};
    json jm = json::array();
    int id = 256;
    for (const auto & [a, b] : merges) {
        vocab[a + b] = id++;
        jm.push_back(a + " " + b);
    }
    const json tok = {
        {"version", "1.0"},
        {"added_tokens", json::array({{{"id", 260}, {"content", "<|endoftext|>"}, {"special", true}}})},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", jm}}},
    };
    write_text(dir / "tokenizer.json", tok.dump());
    write_text(dir / "tokenizer_config.json", json{{"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}}.dump());
}

// A tiny Hugging Face llama checkpoint in `dir`: config.json and model.safetensors with n_vocab
// embedding rows, n_embd 8, one layer (one head), n_ff 16, tied output; matrices of `type` (f32,
// f16 or bf16; norms f32) holding sin(k) / 4 for element k of the file. `header_pad` extra spaces
// end the header JSON: 1 puts the data section, and every tensor, at an odd offset (the format
// allows it; the reference writer pads to a multiple of 8).
inline void write_tiny_llama_checkpoint(const std::filesystem::path & dir, int64_t n_vocab,
                                        ggml_type type = ggml_type::f32, size_t header_pad = 0) {
    constexpr int64_t n_embd = 8, n_ff = 16;
    const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                                   {"model_type", "llama"},
                                   {"vocab_size", n_vocab},
                                   {"hidden_size", n_embd},
                                   {"intermediate_size", n_ff},
                                   {"num_hidden_layers", 1},
                                   {"num_attention_heads", 1},
                                   {"num_key_value_heads", 1},
                                   {"max_position_embeddings", 4096},
                                   {"rms_norm_eps", 1e-5},
                                   {"rope_theta", 10000.0},
                                   {"hidden_act", "silu"},
                                   {"tie_word_embeddings", true}};
    write_text(dir / "config.json", config.dump());
    std::vector<std::vector<uint8_t>> store;
    std::vector<safetensors_entry> entries;
    int64_t k = 0;
    const auto add = [&](const std::string & name, const std::vector<int64_t> & shape) {
        const ggml_type t = shape.size() == 2 ? type : ggml_type::f32;
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        std::vector<uint8_t> & b = store.emplace_back(size_t(n) * ggml_block_bytes(t));
        for (int64_t i = 0; i < n; ++i, ++k) {
            const float v = std::sin(float(k)) / 4;
            if (t == ggml_type::f32) std::memcpy(b.data() + 4 * i, &v, 4);
            const uint16_t h = t == ggml_type::f16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
            if (t != ggml_type::f32) std::memcpy(b.data() + 2 * i, &h, 2);
        }
        entries.push_back({name, t, shape, b.data(), b.size()});
    };
    store.reserve(16);
    add("model.embed_tokens.weight", {n_vocab, n_embd});
    add("model.norm.weight", {n_embd});
    const std::string p = "model.layers.0.";
    add(p + "input_layernorm.weight", {n_embd});
    add(p + "post_attention_layernorm.weight", {n_embd});
    for (const char * m : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
        add(p + "self_attn." + m + ".weight", {n_embd, n_embd});
    }
    add(p + "mlp.gate_proj.weight", {n_ff, n_embd});
    add(p + "mlp.up_proj.weight", {n_ff, n_embd});
    add(p + "mlp.down_proj.weight", {n_embd, n_ff});
    std::vector<uint8_t> bytes = safetensors_serialize(entries);
    if (header_pad > 0) {
        uint64_t n_header = 0;
        std::memcpy(&n_header, bytes.data(), 8);
        bytes.insert(bytes.begin() + std::ptrdiff_t(8 + n_header), header_pad, uint8_t(' '));
        n_header += header_pad;
        std::memcpy(bytes.data(), &n_header, 8);
    }
    std::ofstream f(dir / "model.safetensors", std::ios::binary);
    f.write(reinterpret_cast<const char *>(bytes.data()), std::streamsize(bytes.size()));
    ASSERT_TRUE(f.good()) << dir;
}

}  // namespace hill::test
