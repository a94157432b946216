// hillinfer generate --prompts: many prompts decoded --parallel at a time with continuous batching.
// One JSON object per prompt, in input order, each with the ids it gets alone (greedy), with the KV
// in RAM and mostly cold; bad prompt files name the line and the field.
#include "cli_test_util.h"
#include "model/synthetic_model.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace hill {
namespace {

using test::run_cli;

class cli_batch : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir = new test::temp_dir();
        write_random_model(dir->file("m.gguf"), random_model_params{.n_vocab = 300, .n_embd = 64, .n_ff = 96,
                                                                    .n_layer = 2, .n_head = 4, .n_head_kv = 2,
                                                                    .n_ctx = 256});
    }
    static void TearDownTestSuite() { delete dir; }
    static std::string model() { return dir->file("m.gguf"); }
    static std::string write(const std::string & name, const std::string & text) {
        std::ofstream(dir->file(name)) << text;
        return dir->file(name);
    }
    static test::temp_dir * dir;
};
test::temp_dir * cli_batch::dir = nullptr;

std::vector<nlohmann::json> json_lines(const std::string & out) {
    std::vector<nlohmann::json> v;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
        if (!line.empty()) v.push_back(nlohmann::json::parse(line));
    }
    return v;
}

TEST_F(cli_batch, prompts_decode_in_batches_what_they_decode_alone_in_input_order) {
    const std::vector<std::string> texts = {"hello world", "a much longer prompt that has more words in it than the others",
                                            "x", "four words right here", "the end of it all"};
    std::string jsonl;
    for (size_t i = 0; i < texts.size(); ++i) {
        jsonl += "{\"prompt\": \"" + texts[i] + "\", \"n_predict\": " + std::to_string(6 + 3 * i) + "}\n";
        if (i == 2) jsonl += "\n";  // blank lines are skipped
    }
    const std::string file = write("p.jsonl", jsonl);
    std::vector<std::vector<int>> alone;
    for (size_t i = 0; i < texts.size(); ++i) {
        const auto r = run_cli("generate -m " + model() + " -p '" + texts[i] + "' -n " + std::to_string(6 + 3 * i) +
                                   " --temp 0 --json", " 2>/dev/null");
        ASSERT_EQ(r.code, 0) << r.out;
        alone.push_back(nlohmann::json::parse(r.out)["ids"].get<std::vector<int>>());
    }
    for (const bool cold : {false, true}) {
        for (const int parallel : {1, 2, 5}) {
            // Cold: 24 hot tokens per sequence and layer (256 B each), the sinks, the window and 3 more.
            const std::string kv =
                cold ? " --kv-host-budget " + std::to_string(6 * parallel) + "K --kv-dir " + dir->file("kv") : "";
            SCOPED_TRACE("parallel " + std::to_string(parallel) + kv);
            const auto r = run_cli("generate -m " + model() + " --prompts " + file + " --parallel " +
                                   std::to_string(parallel) + " --temp 0 --json" + kv, " 2>" + dir->file("err"));
            ASSERT_EQ(r.code, 0) << r.out << test::read_whole_file(dir->file("err"));
            const auto objs = json_lines(r.out);
            ASSERT_EQ(objs.size(), texts.size());
            for (size_t i = 0; i < objs.size(); ++i) {
                EXPECT_EQ(objs[i]["index"], i);
                EXPECT_EQ(objs[i]["stop"], "length");
                EXPECT_EQ(objs[i]["ids"].get<std::vector<int>>(), alone[i]) << "prompt " << i;
                EXPECT_LE(objs[i]["max_batch"].get<int>(), parallel);
            }
            const std::string err = test::read_whole_file(dir->file("err"));
            EXPECT_NE(err.find("largest batch " + std::to_string(parallel)), std::string::npos) << err;
            if (cold) {
                // The cold share counts the finished sequences as they ended (their KV is freed by then).
                const size_t at = err.find("KV cache: ");
                ASSERT_NE(at, std::string::npos) << err;
                EXPECT_GT(std::stod(err.substr(at + 10)), 0.0) << err;
            }
        }
    }
    // More parallel sequences than prompts: as many as there are prompts.
    const auto wide = run_cli("generate -m " + model() + " --prompts " + file + " --parallel 100 --temp 0 --json",
                              " 2>" + dir->file("err"));
    EXPECT_EQ(wide.code, 0) << wide.out;
    EXPECT_NE(test::read_whole_file(dir->file("err")).find("parallel 5;"), std::string::npos);
    // Text mode: each prompt and its completion, in input order.
    const auto t = run_cli("generate -m " + model() + " --prompts " + file + " --temp 0", " 2>/dev/null");
    ASSERT_EQ(t.code, 0) << t.out;
    size_t at = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
        const size_t p = t.out.find("--- prompt " + std::to_string(i + 1) + " (", at);
        ASSERT_NE(p, std::string::npos) << t.out;
        at = p + 1;
    }
}

TEST_F(cli_batch, bad_prompt_files_name_the_line_and_the_field) {
    const std::string g = "generate -m " + model() + " --prompts ";
    for (const auto & [text, expected] : std::vector<std::pair<std::string, std::string>>{
             {"{\"prompt\": \"a\"}\n{\"prompt\": 5}\n", "line 2: /prompt: expected a string"},
             {"{\"prompt\": \"a\", \"n_predict\": -1}\n", "line 1: /n_predict: expected an integer in [0,"},
             {"{\"prompt\": \"a\", \"temp\": 1}\n", "line 1: /temp: unknown field"},
             {"{\"prompt\": \"a\"\n", "line 1: a prompt is not valid JSON"},
             {"[1, 2]\n", "line 1"}}) {
        const auto r = run_cli(g + write("bad.jsonl", text));
        EXPECT_EQ(r.code, 1) << text << r.out;
        EXPECT_NE(r.out.find(expected), std::string::npos) << text << r.out;
    }
    const auto empty = run_cli(g + write("empty.jsonl", "\n\n"));
    EXPECT_EQ(empty.code, 1) << empty.out;  // a bad input file (exit 2 is for flags and missing files)
    EXPECT_NE(empty.out.find("holds no prompt"), std::string::npos) << empty.out;
    EXPECT_EQ(run_cli(g + dir->file("missing.jsonl")).code, 2);
    EXPECT_EQ(run_cli(g + write("ok.jsonl", "{\"prompt\": \"a\"}\n") + " --parallel 0").code, 2);
    EXPECT_EQ(run_cli(g + write("ok2.jsonl", "{\"prompt\": \"a\"}\n") + " -p b").code, 2);
    const auto lone = run_cli("generate -m " + model() + " -p hi -n 1 --parallel 3");
    EXPECT_EQ(lone.code, 2) << lone.out;
    EXPECT_NE(lone.out.find("--parallel goes with --prompts"), std::string::npos) << lone.out;
}

// A prompt longer than the context fails alone; the others are generated; exit code 1 at the end.
TEST_F(cli_batch, a_prompt_longer_than_the_context_fails_alone) {
    std::string longp;
    for (int i = 0; i < 80; ++i) longp += "word ";
    const std::string file = write("long.jsonl", "{\"prompt\": \"hi\"}\n{\"prompt\": \"" + longp + "\"}\n{\"prompt\": \"yo\"}\n");
    const auto r = run_cli("generate -m " + model() + " --prompts " + file + " -c 64 -n 4 --temp 0 --json",
                           " 2>" + dir->file("err"));
    EXPECT_EQ(r.code, 1) << r.out;
    // The failure is on stderr too (stdout may go to a pipe), naming the prompt.
    const std::string err = test::read_whole_file(dir->file("err"));
    EXPECT_NE(err.find("prompt 2 failed: "), std::string::npos) << err;
    EXPECT_NE(err.find("1 failed"), std::string::npos) << err;
    const auto objs = json_lines(r.out);
    ASSERT_EQ(objs.size(), 3u);
    EXPECT_EQ(objs[0]["stop"], "length");
    EXPECT_EQ(objs[1]["stop"], "error");
    EXPECT_NE(objs[1]["error"].get<std::string>().find("longer than the context"), std::string::npos);
    EXPECT_EQ(objs[2]["stop"], "length");
}

}  // namespace
}  // namespace hill
