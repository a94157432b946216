// `hillinfer chat` driven through standard input, on chat models `make-model random --chat-template`
// builds: turns, the KV kept between them (only each turn's new text prefilled), greedy turn 1 equal
// to `generate --special` on the same text, an empty line, a message too long for the context, Ctrl-C
// mid-reply and at the prompt, EOF, and the template errors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cli_test_util.h"
#include "test_util.h"

namespace hill {
namespace {

using json = nlohmann::json;

#define EXPECT_MENTIONS(out, text) EXPECT_NE((out).find(text), std::string::npos) << (out)

// A small model, so that every test runs in about a second.
const std::string k_dims = " --n-embd 64 --n-ff 96 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ctx 4096";

class cli_chat : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir = new test::temp_dir();
        for (const char * family : {"chatml", "llama3"}) {
            const auto r = test::run_cli("make-model random --chat-template " + std::string(family) + k_dims + " -o " +
                                         dir->file(std::string(family) + ".gguf"));
            ASSERT_EQ(r.code, 0) << r.out;
        }
        const auto r = test::run_cli("make-model random" + k_dims + " -o " + dir->file("plain.gguf"));
        ASSERT_EQ(r.code, 0) << r.out;
    }
    static void TearDownTestSuite() { delete dir; }
    static std::string model(const std::string & name) { return dir->file(name + ".gguf"); }
    static std::string input(const std::string & name, const std::string & text) {
        std::ofstream(dir->file(name), std::ios::binary) << text;
        return dir->file(name);
    }
    // chat --json with `text` on standard input; the JSON object (stdout) and stderr.
    static std::pair<json, std::string> chat_json(const std::string & args, const std::string & text,
                                                  int * code = nullptr) {
        const std::string in = input("in.txt", text), err = dir->file("err.txt");
        const auto r = test::run_cli("chat " + args + " --json -t 2 <" + in, " 2>" + err);
        if (code != nullptr) *code = r.code;
        EXPECT_EQ(r.code, 0) << r.out << test::read_whole_file(err);
        json j;
        try {
            j = json::parse(r.out);
        } catch (const std::exception & e) {
            ADD_FAILURE() << e.what() << ": " << r.out << test::read_whole_file(err);
        }
        return {j, test::read_whole_file(err)};
    }
    static test::temp_dir * dir;
};
test::temp_dir * cli_chat::dir = nullptr;

TEST_F(cli_chat, three_turns_prefill_only_each_new_turn) {
    const auto [j, err] = chat_json("-m " + model("chatml") + " --temp 0 -n 12 -c 1024 --system 'Be brief.'",
                                    "Hello there\n\nHow are you?\n   \nTell me more\n");
    ASSERT_EQ(j.at("turns").size(), 3u) << j.dump(1);  // the empty lines were ignored
    EXPECT_EQ(j.at("template"), "chatml");
    const json & t = j.at("turns");
    EXPECT_EQ(
        t[0].at("prompt_text"),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(t[0].at("reused_tokens"), 0);
    int64_t prefilled = 0, generated = 0;
    for (size_t i = 0; i < 3; ++i) {
        SCOPED_TRACE(i);
        const int64_t n_gen = t[i].at("generated_tokens");
        EXPECT_GE(n_gen, 0);
        EXPECT_TRUE(t[i].at("stop") == "end_of_turn" || t[i].at("stop") == "length") << t[i].dump();
        if (i > 0) {
            // The whole conversation so far stays in the KV: only the new turn's text is prefilled,
            // starting with what closes the reply.
            EXPECT_EQ(t[i].at("reused_tokens"), t[i - 1].at("n_past"));
            EXPECT_EQ(t[i].at("prompt_text").get<std::string>().rfind("<|im_end|>\n<|im_start|>user\n", 0), 0u);
            EXPECT_LT(t[i].at("prompt_tokens").get<int64_t>(), t[i].at("reused_tokens").get<int64_t>());
        }
        prefilled += t[i].at("prompt_tokens").get<int64_t>();
        generated += n_gen;
        EXPECT_EQ(t[i].at("n_past"), prefilled + generated);
    }
    EXPECT_EQ(j.at("prefill_tokens"), prefilled);
    EXPECT_EQ(j.at("n_past"), prefilled + generated);
    EXPECT_MENTIONS(err, "chat: 3 turns answered");
    EXPECT_MENTIONS(err, "per turn: ");
}

TEST_F(cli_chat, sampled_replies_end_at_the_end_of_turn_token) {
    const auto [j, err] = chat_json("-m " + model("chatml") + " --seed 3 -c 2048", "Hello there\nHow are you?\n");
    const json & t = j.at("turns");
    ASSERT_EQ(t.size(), 2u) << j.dump(1);
    EXPECT_EQ(t[0].at("stop"), "end_of_turn") << t[0].dump();
    EXPECT_EQ(t[1].at("reused_tokens"), t[0].at("n_past"));
    EXPECT_EQ(t[1].at("prompt_text"), "<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n");
}

TEST_F(cli_chat, greedy_turn_one_equals_generate_on_the_formatted_prompt) {
    for (const char * family : {"chatml", "llama3"}) {
        SCOPED_TRACE(family);
        const auto [j, err] = chat_json("-m " + model(family) + " --temp 0 -n 16 -c 512", "Tell me a story\n");
        ASSERT_EQ(j.at("turns").size(), 1u);
        const json & t = j.at("turns")[0];
        const std::string prompt = input("prompt.txt", t.at("prompt_text").get<std::string>());
        const auto g = test::run_cli(
            "generate -m " + model(family) + " -f " + prompt + " --special --temp 0 -n 16 -c 512 --json -t 2",
            " 2>/dev/null");
        ASSERT_EQ(g.code, 0) << g.out;
        const json gj = json::parse(g.out);
        EXPECT_EQ(gj.at("prompt_tokens"), t.at("prompt_tokens"));
        const std::vector<int32_t> chat_ids = t.at("ids"), gen_ids = gj.at("ids");
        ASSERT_LE(chat_ids.size(), gen_ids.size());
        EXPECT_EQ(std::vector<int32_t>(gen_ids.begin(), gen_ids.begin() + long(chat_ids.size())), chat_ids);
    }
}

TEST_F(cli_chat, tiered_kv_gives_the_same_conversation) {
    const std::string lines = "Hello there\nHow are you?\nTell me more\n";
    const auto [ram, e1] = chat_json("-m " + model("chatml") + " --temp 0 -n 24 -c 1024", lines);
    const auto [tiered, e2] = chat_json(
        "-m " + model("chatml") + " --temp 0 -n 24 -c 1024 --kv-host-budget 8K --kv-dir " + dir->file("kv"), lines);
    ASSERT_EQ(ram.at("turns").size(), 3u);
    ASSERT_EQ(tiered.at("turns").size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(tiered.at("turns")[i].at("ids"), ram.at("turns")[i].at("ids")) << i;
    EXPECT_GT(tiered.at("kv").at("cold_share").get<double>(), 0.0) << tiered.at("kv").dump();
    EXPECT_MENTIONS(e2, "KV cache:");
}

TEST_F(cli_chat, long_message_refused_when_it_does_not_fit_and_the_chat_goes_on) {
    std::string paste;
    while (paste.size() < 100 * 1024) paste += "the quick brown fox jumps over the lazy dog ";
    const auto [j, err] =
        chat_json("-m " + model("chatml") + " --temp 0 -n 4 -c 512", "Hi\n" + paste + "\nStill there?\n");
    const json & t = j.at("turns");
    ASSERT_EQ(t.size(), 3u) << j.dump(1);
    EXPECT_EQ(t[1].at("stop"), "refused");
    EXPECT_MENTIONS(t[1].at("error").get<std::string>(), "context holds 512 tokens");
    EXPECT_MENTIONS(err, "not sent");
    EXPECT_NE(t[2].at("stop"), "refused");
    EXPECT_EQ(t[2].at("reused_tokens"), t[0].at("n_past"));  // the refused message left the KV as it was

    // A long message that fits is prefilled in one turn (longer than a terminal's 4095-byte line).
    const std::string long_line = paste.substr(0, 6000);
    const auto [j2, err2] = chat_json("-m " + model("chatml") + " --temp 0 -n 4 -c 8192", long_line + "\n");
    ASSERT_EQ(j2.at("turns").size(), 1u);
    EXPECT_GT(j2.at("turns")[0].at("prompt_tokens").get<int64_t>(), 1000);
}

// A line too long for any context is dropped as it is read, not kept: `chat < /dev/zero` grew
// without bound. Its bytes are read to its end (the next line is the next message).
TEST_F(cli_chat, a_line_longer_than_any_context_holds_is_dropped_unread) {
    const std::string huge(20u << 20, 'a');  // 20 MiB without a newline
    const auto [j, err] =
        chat_json("-m " + model("chatml") + " --temp 0 -n 4 -c 512", "Hi\n" + huge + "\nStill there?\n");
    const json & t = j.at("turns");
    ASSERT_EQ(t.size(), 3u) << j.dump(1);
    EXPECT_EQ(t[1].at("stop"), "refused");
    EXPECT_MENTIONS(t[1].at("error").get<std::string>(), "the message is more than ");
    EXPECT_MENTIONS(t[1].at("error").get<std::string>(), "bytes and the context holds 512 tokens");
    EXPECT_NE(t[2].at("stop"), "refused");
    EXPECT_EQ(t[2].at("reused_tokens"), t[0].at("n_past"));
    // The same line last, without a newline: refused, and the chat ends.
    const auto [j2, err2] = chat_json("-m " + model("chatml") + " --temp 0 -n 4 -c 512", "Hi\n" + huge);
    ASSERT_EQ(j2.at("turns").size(), 2u);
    EXPECT_EQ(j2.at("turns")[1].at("stop"), "refused");
}

// A standard input that cannot be read is an error, not the end of the chat.
TEST_F(cli_chat, an_unreadable_standard_input_is_an_error) {
    for (const std::string & redirect : {std::string(" <&-"), " <" + dir->path.string()}) {
        const auto r = test::run_cli("chat -m " + model("chatml") + " -n 4" + redirect);
        EXPECT_EQ(r.code, 1) << redirect << "\n" << r.out;
        EXPECT_MENTIONS(r.out, "cannot read standard input: ");
    }
}

// --ignore-eos: the reply runs to -n where it would end at EOS.
TEST_F(cli_chat, ignore_eos_runs_the_reply_to_n) {
    const std::string args = "-m " + model("plain") + " --chat-template llama2 --temp 0 -c 4096 -n 400";
    const auto [j, err] = chat_json(args, "Tell me everything\n");
    ASSERT_EQ(j.at("turns").size(), 1u);
    EXPECT_EQ(j.at("turns")[0].at("stop"), "end_of_turn") << j;
    const auto [k, err2] = chat_json(args + " --ignore-eos", "Tell me everything\n");
    ASSERT_EQ(k.at("turns").size(), 1u);
    EXPECT_EQ(k.at("turns")[0].at("stop"), "length") << k;
    EXPECT_EQ(k.at("turns")[0].at("generated_tokens"), 400) << k;
}

TEST_F(cli_chat, full_context_ends_the_reply_with_a_message) {
    // The plain model under the llama2 template stops only at EOS: replies run into the context.
    const auto [j, err] = chat_json("-m " + model("plain") + " --chat-template llama2 --temp 0 -c 64", "Hello\n");
    ASSERT_EQ(j.at("turns").size(), 1u);
    EXPECT_EQ(j.at("turns")[0].at("stop"), "context");
    EXPECT_EQ(j.at("n_past"), 64);
    EXPECT_MENTIONS(err, "the context is full (64 tokens)");
}

TEST_F(cli_chat, template_errors) {
    auto r = test::run_cli("chat -m " + model("plain") + " </dev/null");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_MENTIONS(r.out, "has no chat template");
    EXPECT_MENTIONS(r.out, "llama2, llama3, chatml, mistral, gemma, phi3, phi4, deepseek");
    r = test::run_cli("chat -m " + model("chatml") + " --chat-template alpaca </dev/null");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_MENTIONS(r.out, "unknown chat template 'alpaca'");
    r = test::run_cli("chat -m " + model("chatml") + " --chat-template gemma </dev/null");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_MENTIONS(r.out, "'<end_of_turn>', which is not a token of the model's vocabulary");
    // EOF at once: a clean end with the summary.
    r = test::run_cli("chat -m " + model("chatml") + " </dev/null");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_MENTIONS(r.out, "chat: 0 turns answered");
}

// The chat with its standard input on a pipe we write to, its output in files.
struct chat_process {
    static inline int n_started = 0;
    pid_t pid = -1;
    int in = -1;
    std::string out, err;

    // Files of their own per process: a test must not see the previous one's output.
    chat_process(const std::string & args, const test::temp_dir & d)
        : out(d.file("p" + std::to_string(++n_started) + ".out")),
          err(d.file("p" + std::to_string(n_started) + ".err")) {
        int fds[2];
        EXPECT_EQ(::pipe(fds), 0);
        const std::string cmd = "exec " + std::string(HILL_CLI_PATH) + " chat " + args + " >" + out + " 2>" + err;
        pid = ::fork();
        if (pid == 0) {
            ::dup2(fds[0], 0);
            ::close(fds[0]);
            ::close(fds[1]);
            ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char *>(nullptr));
            ::_exit(127);
        }
        ::close(fds[0]);
        in = fds[1];
    }
    void send(const std::string & s) const { EXPECT_EQ(::write(in, s.data(), s.size()), ssize_t(s.size())); }
    // Waits until `file` holds more than n bytes (at most timeout_s).
    static bool wait_for(const std::string & file, size_t n, double timeout_s) {
        const auto t0 = std::chrono::steady_clock::now();
        while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < timeout_s) {
            if (test::read_whole_file(file).size() > n) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return false;
    }
    int finish(double timeout_s) {
        if (in >= 0) ::close(in);
        in = -1;
        const auto t0 = std::chrono::steady_clock::now();
        int st = 0;
        while (::waitpid(pid, &st, WNOHANG) != pid) {
            if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
                ::kill(pid, SIGKILL);
                ::waitpid(pid, &st, 0);
                return -1;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
};

TEST_F(cli_chat, ctrl_c_stops_the_reply_and_the_chat_goes_on) {
    // Replies of 3000 tokens (--ignore-eos: the plain model's EOS, which it reaches after ~200 tokens, a few
    // milliseconds in a release build, is never sampled), so that the signal reaches a reply in progress.
    chat_process p("-m " + model("plain") + " --chat-template llama2 --temp 0 -c 4096 -n 3000 --ignore-eos -t 2", *dir);
    p.send("Tell me everything\n");
    ASSERT_TRUE(chat_process::wait_for(p.out, 20, 60.0)) << test::read_whole_file(p.err);
    ::kill(p.pid, SIGINT);
    EXPECT_TRUE(chat_process::wait_for(p.err, std::string("[reply stopped]").size() - 1, 20.0));
    p.send("And then?\n");
    const int code = p.finish(120.0);
    const std::string err = test::read_whole_file(p.err);
    EXPECT_EQ(code, 0) << err;
    EXPECT_MENTIONS(err, "[reply stopped]");
    EXPECT_MENTIONS(err, "chat: 2 turns answered");
}

TEST_F(cli_chat, sigterm_ends_the_chat_with_the_summary) {
    chat_process p("-m " + model("plain") + " --chat-template llama2 --temp 0 -c 4096 -n 3000 --ignore-eos -t 2", *dir);
    p.send("Tell me everything\n");
    ASSERT_TRUE(chat_process::wait_for(p.out, 20, 60.0)) << test::read_whole_file(p.err);
    ::kill(p.pid, SIGTERM);
    ASSERT_TRUE(chat_process::wait_for(p.err, 40, 20.0));
    const int code = p.finish(30.0);  // stdin still open: the chat ended by itself
    const std::string err = test::read_whole_file(p.err);
    EXPECT_EQ(code, 130) << err;
    EXPECT_MENTIONS(err, "[reply stopped]");
    EXPECT_MENTIONS(err, "chat: 1 turn answered");
}

TEST_F(cli_chat, ctrl_c_at_the_prompt_ends_the_chat) {
    chat_process p("-m " + model("chatml") + " --temp 0 -n 4 -c 256 -t 2", *dir);
    p.send("Hi\n");
    ASSERT_TRUE(chat_process::wait_for(p.out, 0, 60.0));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the reply is done; the chat waits for a line
    ::kill(p.pid, SIGINT);
    const int code = p.finish(30.0);
    const std::string err = test::read_whole_file(p.err);
    EXPECT_EQ(code, 0) << err;
    EXPECT_MENTIONS(err, "chat: 1 turn answered");
}

}  // namespace
}  // namespace hill
