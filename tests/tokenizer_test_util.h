// Helpers shared by the tokenizer suites on real vocabularies: llama.cpp's `.inp`/`.out` expected
// ids files and whole-file reads.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace hill::test {

inline std::string read_all(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    EXPECT_TRUE(f.good()) << path;
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// llama.cpp's `.inp` framing: every test string is followed by the line "__ggml_vocab_test__", so
// the file is a sequence of `string + "\n__ggml_vocab_test__\n"` (a string may be empty or consist
// of newlines; it never contains the separator line).
inline std::vector<std::string> split_inp(const std::string & text) {
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t j = text.find(sep, pos);
        if (j == std::string::npos) {
            ADD_FAILURE() << "text after the last separator: '" << text.substr(pos) << "'";
            break;
        }
        out.push_back(text.substr(pos, j - pos));
        pos = j + sep.size();
    }
    return out;
}

// `.out`: one line of space-separated ids per string (an empty line for the empty string); the
// last line has no trailing newline.
inline std::vector<std::vector<int32_t>> split_out(const std::string & text) {
    std::vector<std::vector<int32_t>> out;
    size_t pos = 0;
    while (true) {
        const size_t j = text.find('\n', pos);
        std::istringstream line(text.substr(pos, j == std::string::npos ? std::string::npos : j - pos));
        std::vector<int32_t> ids;
        for (int32_t id; line >> id;) ids.push_back(id);
        out.push_back(std::move(ids));
        if (j == std::string::npos) break;
        pos = j + 1;
    }
    if (!text.empty() && text.back() == '\n') out.pop_back();  // tolerate a final newline
    return out;
}

struct vocab_case {
    std::vector<std::string> inputs;
    std::vector<std::vector<int32_t>> expected;
};

inline vocab_case read_case(const std::string & inp, const std::string & out) {
    vocab_case c{split_inp(read_all(inp)), split_out(read_all(out))};
    EXPECT_EQ(c.inputs.size(), c.expected.size()) << inp;
    return c;
}

}  // namespace hill::test
