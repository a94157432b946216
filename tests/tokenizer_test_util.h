// Helpers shared by the tokenizer suites on real vocabularies: llama.cpp's `.inp`/`.out` expected
// ids files, whole-file reads, and the round trip of the Gutenberg books.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

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

// Encodes every string of `c`; every one must give the expected ids and decode back. Returns the
// number of strings that match.
inline size_t expect_matches(const tokenizer & t, const vocab_case & c, const char * what) {
    size_t n_ok = 0;
    for (size_t i = 0; i < c.inputs.size() && i < c.expected.size(); ++i) {
        const auto ids = t.encode(c.inputs[i], false);
        EXPECT_EQ(ids, c.expected[i]) << what << ": string " << i << " '" << c.inputs[i] << "'";
        EXPECT_EQ(t.decode(ids), c.inputs[i]) << what << ": string " << i;
        n_ok += ids == c.expected[i];
    }
    std::printf("[ %s ] %zu/%zu strings match llama.cpp's expected ids\n", what, n_ok, c.inputs.size());
    return n_ok;
}

// CPU time of the calling thread, seconds: steadier than wall time on a shared machine.
inline double thread_cpu_s() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Round trip of every book, with the encode throughput (single thread, per CPU second).
inline void round_trip_books(const tokenizer & t, const char * name) {
    const std::string dir = test::data_dir() + "/text/gutenberg";
    std::vector<std::string> books;
    for (const auto & e : std::filesystem::directory_iterator(dir)) {
        if (e.path().extension() == ".txt") books.push_back(e.path().string());
    }
    std::sort(books.begin(), books.end());
    ASSERT_FALSE(books.empty()) << dir;
    double total_bytes = 0, total_s = 0;
    for (const auto & path : books) {
        const std::string text = read_all(path);
        const double t0 = thread_cpu_s();
        const auto ids = t.encode(text, false);
        const double t1 = thread_cpu_s();
        const std::string back = t.decode(ids);
        const double t2 = thread_cpu_s();
        const std::string file = std::filesystem::path(path).filename().string();
        EXPECT_TRUE(back == text) << name << ": round trip of " << file << " differs (" << back.size() << " vs "
                                  << text.size() << " bytes)";
        std::printf("[ %s ] %-36s %8.2f MB %9zu tokens (%.2f B/token)  encode %6.2f MB/s  decode %7.1f MB/s\n", name,
                    file.c_str(), text.size() / 1e6, ids.size(), double(text.size()) / double(ids.size()),
                    text.size() / 1e6 / (t1 - t0), text.size() / 1e6 / (t2 - t1));
        total_bytes += double(text.size());
        total_s += t1 - t0;
    }
    std::printf("[ %s ] all books: %.2f MB, encode %.2f s, %.2f MB/s (one thread, CPU time)\n", name, total_bytes / 1e6,
                total_s, total_bytes / 1e6 / total_s);
    ::testing::Test::RecordProperty(std::string(name) + "_encode_MBps", std::to_string(total_bytes / 1e6 / total_s));
}

}  // namespace hill::test
