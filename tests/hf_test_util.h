// Helpers shared by the suites that write Hugging Face checkpoint folders (convert, CLI).
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

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

}  // namespace hill::test
