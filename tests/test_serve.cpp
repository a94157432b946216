// `hillinfer serve` as a child process on an ephemeral port, driven with cpp-httplib's client, on the
// chat models `make-model random --chat-template` builds: health and models, greedy completions equal to
// `generate`, chat through the template, streaming (server-sent events, [DONE]), stop strings, the
// OpenAI-style errors of a fixed list of bad requests (the server keeps serving), the API key, the
// queue bound (503), a client that goes away (its KV freed, seen in /metrics), and SIGTERM (the running
// stream finishes, the cold-pool files are removed; /health answers 503 meanwhile), and a stop requested
// before the listener runs (in-process). In the sanitizer builds a report on a server's stderr
// fails the test that stopped it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_util.h"
#include "core/thread_pool.h"
#include "engine/context.h"
#include "model/synthetic_model.h"
#include "server/server.h"
#include "test_util.h"

namespace hill {
namespace {

using json = nlohmann::json;

const std::string k_dims = " --n-embd 64 --n-ff 96 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ctx 4096";

// A `hillinfer serve` child process; its port read from the line it prints on stderr.
class serve_process {
public:
    serve_process(const std::string & args, const std::string & err_path) : err_(err_path) {
        const std::string cmd =
            "exec " + std::string(HILL_CLI_PATH) + " serve --port 0 -t 2 " + args + " >/dev/null 2>" + err_;
        pid_ = ::fork();
        if (pid_ == 0) {
            ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char *>(nullptr));
            ::_exit(127);
        }
        const std::regex re("listening on http://[0-9.]+:([0-9]+)");
        for (int i = 0; i < 3000 && port_ == 0; ++i) {
            std::smatch mt;
            const std::string err = test::read_whole_file(err_);
            if (std::regex_search(err, mt, re)) port_ = std::stoi(mt[1]);
            int st = 0;
            if (port_ == 0 && ::waitpid(pid_, &st, WNOHANG) == pid_) {
                pid_ = -1;
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    ~serve_process() {
        if (pid_ > 0) stop(SIGTERM, 30.0);
    }
    int port() const { return port_; }
    std::string err() const { return test::read_whole_file(err_); }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port_);
        c.set_read_timeout(60, 0);
        return c;
    }
    // Sends sig and waits for the exit (SIGKILL after timeout_s); the exit status, or 128 + signal.
    int stop(int sig, double timeout_s) {
        signal(sig);
        return wait(timeout_s);
    }
    // Sends sig (a second SIGTERM or SIGINT kills the server at once: wait() after the first).
    void signal(int sig) const { ::kill(pid_, sig); }
    // Waits for the exit (SIGKILL after timeout_s); the exit status, or 128 + signal.
    int wait(double timeout_s) {
        int st = 0;
        const auto t0 = std::chrono::steady_clock::now();
        while (::waitpid(pid_, &st, WNOHANG) != pid_) {
            if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
                ::kill(pid_, SIGKILL);
                ::waitpid(pid_, &st, 0);
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        pid_ = -1;
        // In the sanitizer builds the server reports on its stderr, which no request sees: a race, a
        // memory error or a leak in the child fails the test here.
        const std::string e = err();
        for (const char * report :
             {"WARNING: ThreadSanitizer", "ERROR: AddressSanitizer", "ERROR: LeakSanitizer", ": runtime error: "}) {
            EXPECT_EQ(e.find(report), std::string::npos) << "the server's stderr:\n" << e;
        }
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }

private:
    std::string err_;
    pid_t pid_ = -1;
    int port_ = 0;
};

// The value of a Prometheus sample `name` (with its labels) in a /metrics text; -1 when absent.
double metric(const std::string & text, const std::string & name) {
    const size_t p = text.find("\n" + name + " ");
    if (p == std::string::npos) return -1;
    return std::stod(text.substr(p + name.size() + 2));
}

// The events of a server-sent event stream: the data of each "data: " line.
std::vector<std::string> sse_events(const std::string & body) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos < body.size()) {
        const size_t end = body.find("\n\n", pos);
        EXPECT_NE(end, std::string::npos) << "an event ends with an empty line: " << body.substr(pos);
        if (end == std::string::npos) break;
        const std::string ev = body.substr(pos, end - pos);
        EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
        out.push_back(ev.substr(6));
        pos = end + 2;
    }
    return out;
}

class serve_test : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir = new test::temp_dir();
        const auto r =
            test::run_cli("make-model random --chat-template chatml" + k_dims + " -o " + dir->file("chatml.gguf"));
        ASSERT_EQ(r.code, 0) << r.out;
        const auto r2 = test::run_cli("make-model random" + k_dims + " -o " + dir->file("plain.gguf"));
        ASSERT_EQ(r2.code, 0) << r2.out;
        srv = new serve_process("-m " + dir->file("chatml.gguf") + " -c 512 --parallel 3 --body-limit 1M",
                                dir->file("serve.err"));
        ASSERT_GT(srv->port(), 0) << srv->err();
    }
    static void TearDownTestSuite() {
        delete srv;
        delete dir;
    }
    static std::string model(const std::string & name) { return dir->file(name + ".gguf"); }
    static json post(const std::string & path, const json & body, int expect_status = 200) {
        auto c = srv->client();
        const auto res = c.Post(path, body.dump(), "application/json");
        EXPECT_TRUE(res) << "no response: " << httplib::to_string(res.error());
        if (!res) return json();
        EXPECT_EQ(res->status, expect_status) << res->body;
        return json::parse(res->body);
    }
    // generate --json on the same model and context: the reference of greedy output.
    static json generate(const std::string & prompt, int n, bool special) {
        const std::string in = dir->file("prompt.txt");
        std::ofstream(in, std::ios::binary) << prompt;
        const auto r = test::run_cli("generate -m " + model("chatml") + " -c 512 -t 2 --temp 0 --json -n " +
                                         std::to_string(n) + (special ? " --special" : "") + " -f " + in,
                                     " 2>/dev/null");
        EXPECT_EQ(r.code, 0) << r.out;
        return json::parse(r.out);
    }
    static test::temp_dir * dir;
    static serve_process * srv;
};
test::temp_dir * serve_test::dir = nullptr;
serve_process * serve_test::srv = nullptr;

TEST_F(serve_test, health_and_models) {
    auto c = srv->client();
    const auto h = c.Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
    EXPECT_EQ(json::parse(h->body).at("status"), "ok");
    const auto m = c.Get("/v1/models");
    ASSERT_TRUE(m);
    const json j = json::parse(m->body);
    EXPECT_EQ(j.at("object"), "list");
    ASSERT_EQ(j.at("data").size(), 1u);
    EXPECT_EQ(j.at("data")[0].at("id"), "chatml.gguf");
    // The model file's modification time: written by the fixture moments ago.
    const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    EXPECT_GT(j.at("data")[0].at("created").get<int64_t>(), now - 3600) << j.dump();
    EXPECT_LE(j.at("data")[0].at("created").get<int64_t>(), now + 5) << j.dump();
}

TEST_F(serve_test, greedy_completion_equals_generate) {
    const std::string prompt = "Once upon a time there was";
    const json ref = generate(prompt, 12, false);
    const json j =
        post("/v1/completions", {{"model", "chatml.gguf"}, {"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}});
    EXPECT_EQ(j.at("object"), "text_completion");
    ASSERT_EQ(j.at("choices").size(), 1u);
    EXPECT_EQ(j.at("choices")[0].at("text"), ref.at("text"));
    const std::string ref_stop = ref.at("stop");
    EXPECT_EQ(j.at("choices")[0].at("finish_reason"), ref_stop == "length" ? "length" : "stop");
    EXPECT_EQ(j.at("usage").at("prompt_tokens"), ref.at("prompt_tokens"));
    EXPECT_EQ(j.at("usage").at("completion_tokens"), ref.at("generated_tokens"));
    EXPECT_EQ(j.at("usage").at("total_tokens"), int(ref.at("prompt_tokens")) + int(ref.at("generated_tokens")));
    EXPECT_EQ(j.at("x_hillinfer").at("policy"), "full");
    EXPECT_TRUE(j.at("x_hillinfer").at("alpha").is_null()) << "full attends every token: no alpha applies";
    EXPECT_GT(double(j.at("x_hillinfer").at("attended_share")), 0.0);
}

TEST_F(serve_test, concurrent_greedy_completions_equal_each_alone) {
    std::vector<std::string> prompts = {"The cat", "A long time ago in a galaxy", "Hello",
                                        "One two three four five six", "Why is the sky"};
    std::vector<std::string> alone;
    for (const std::string & p : prompts) alone.push_back(generate(p, 20, false).at("text"));
    std::vector<std::string> got(prompts.size());
    std::vector<std::thread> th;
    for (size_t i = 0; i < prompts.size(); ++i) {
        th.emplace_back([&, i] {
            auto c = srv->client();
            const json body = {{"prompt", prompts[i]}, {"max_tokens", 20}, {"temperature", 0}};
            const auto res = c.Post("/v1/completions", body.dump(), "application/json");
            if (res && res->status == 200) got[i] = json::parse(res->body).at("choices")[0].at("text");
        });
    }
    for (auto & t : th) t.join();
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], alone[i]) << prompts[i];
}

TEST_F(serve_test, chat_uses_the_template_and_streams_the_same_text) {
    const json body = {
        {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi there"}}}},
        {"max_tokens", 10},
        {"temperature", 0}};
    const json j = post("/v1/chat/completions", body);
    EXPECT_EQ(j.at("object"), "chat.completion");
    const json & msg = j.at("choices")[0].at("message");
    EXPECT_EQ(msg.at("role"), "assistant");
    const std::string content = msg.at("content");
    const json ref = generate(
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", 10,
        true);
    EXPECT_EQ(j.at("usage").at("prompt_tokens"), ref.at("prompt_tokens"));
    const std::string ref_text = ref.at("text");
    if (j.at("choices")[0].at("finish_reason") == "length") {
        EXPECT_EQ(content, ref_text);
    } else {  // the end-of-turn token came first: the reply is what generate printed before it
        EXPECT_EQ(ref_text.rfind(content, 0), 0u) << content << " | " << ref_text;
    }

    json sbody = body;
    sbody["stream"] = true;
    sbody["stream_options"] = {{"include_usage", true}};
    auto c = srv->client();
    const auto res = c.Post("/v1/chat/completions", sbody.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    EXPECT_NE(res->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
    const std::vector<std::string> ev = sse_events(res->body);
    ASSERT_GE(ev.size(), 4u) << res->body;
    EXPECT_EQ(ev.back(), "[DONE]");
    std::string streamed;
    int n_finish = 0;
    for (size_t i = 0; i + 1 < ev.size(); ++i) {
        const json e = json::parse(ev[i]);
        EXPECT_EQ(e.at("object"), "chat.completion.chunk");
        EXPECT_EQ(e.at("id"), json::parse(ev[0]).at("id")) << "one id for the whole stream";
        if (i == 0) {  // as OpenAI's: the role alone first, with empty content
            EXPECT_EQ(e.at("choices")[0].at("delta"), json({{"role", "assistant"}, {"content", ""}})) << ev[i];
        } else {
            EXPECT_FALSE(e.at("choices").empty() ? false : e.at("choices")[0].at("delta").contains("role")) << ev[i];
        }
        if (e.at("choices").empty()) {  // the usage chunk, last
            EXPECT_EQ(i + 2, ev.size());
            EXPECT_EQ(e.at("usage").at("prompt_tokens"), j.at("usage").at("prompt_tokens"));
            EXPECT_EQ(e.at("usage").at("completion_tokens"), j.at("usage").at("completion_tokens"));
            continue;
        }
        const json & ch = e.at("choices")[0];
        if (ch.at("delta").contains("content")) streamed += ch.at("delta").at("content").get<std::string>();
        if (!ch.at("finish_reason").is_null()) {
            ++n_finish;
            EXPECT_EQ(ch.at("finish_reason"), j.at("choices")[0].at("finish_reason"));
        }
    }
    EXPECT_EQ(n_finish, 1);
    EXPECT_EQ(streamed, content);
}

TEST_F(serve_test, stop_string_ends_the_text_before_it) {
    const json full =
        post("/v1/completions", {{"prompt", "Once upon a time there was"}, {"max_tokens", 32}, {"temperature", 0}});
    const std::string text = full.at("choices")[0].at("text");
    // The stop string: one whole character from the middle of the text.
    std::vector<size_t> starts;
    for (size_t i = 0; i < text.size(); ++i) {
        if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) starts.push_back(i);
    }
    starts.push_back(text.size());
    ASSERT_GE(starts.size(), 4u) << text;
    const size_t mid = starts.size() / 2;
    const std::string stop = text.substr(starts[mid], starts[mid + 1] - starts[mid]);
    const json j =
        post("/v1/completions",
             {{"prompt", "Once upon a time there was"}, {"max_tokens", 32}, {"temperature", 0}, {"stop", {stop}}});
    EXPECT_EQ(j.at("choices")[0].at("text"), text.substr(0, text.find(stop)));
    EXPECT_EQ(j.at("choices")[0].at("finish_reason"), "stop");
    // Streamed: the same text, never a piece of the stop string.
    auto c = srv->client();
    const json sb = {{"prompt", "Once upon a time there was"},
                     {"max_tokens", 32},
                     {"temperature", 0},
                     {"stop", stop},
                     {"stream", true}};
    const auto res = c.Post("/v1/completions", sb.dump(), "application/json");
    ASSERT_TRUE(res);
    std::string streamed;
    for (const std::string & e : sse_events(res->body)) {
        if (e != "[DONE]") streamed += json::parse(e).at("choices")[0].at("text").get<std::string>();
    }
    EXPECT_EQ(streamed, j.at("choices")[0].at("text"));
}

TEST_F(serve_test, bad_requests_get_4xx_json_and_the_server_goes_on) {
    struct bad {
        std::string name, path, body;
        int status;
        std::string param;  // "" : not checked
    };
    const std::string big(10u << 20, 'x');
    const std::vector<bad> cases = {
        {"empty body", "/v1/completions", "", 400, ""},
        {"truncated JSON", "/v1/completions", R"({"prompt": "abc", "max_tok)", 400, ""},
        {"not an object", "/v1/completions", "[1, 2]", 400, ""},
        {"prompt a number", "/v1/completions", R"({"prompt": 5})", 400, "prompt"},
        {"no prompt", "/v1/completions", R"({"max_tokens": 5})", 400, "prompt"},
        {"max_tokens a string", "/v1/completions", R"({"prompt": "a", "max_tokens": "ten"})", 400, "max_tokens"},
        {"max_tokens negative", "/v1/completions", R"({"prompt": "a", "max_tokens": -1})", 400, "max_tokens"},
        {"huge max_tokens", "/v1/completions", R"({"prompt": "a", "max_tokens": 1000000000000})", 400, "max_tokens"},
        {"temperature a string", "/v1/completions", R"({"prompt": "a", "temperature": "hot"})", 400, "temperature"},
        {"temperature out of range", "/v1/completions", R"({"prompt": "a", "temperature": 7})", 400, "temperature"},
        {"top_p zero", "/v1/completions", R"({"prompt": "a", "top_p": 0})", 400, "top_p"},
        {"stream a string", "/v1/completions", R"({"prompt": "a", "stream": "yes"})", 400, "stream"},
        {"n = 2", "/v1/completions", R"({"prompt": "a", "n": 2})", 400, "n"},
        {"seed negative", "/v1/completions", R"({"prompt": "a", "seed": -3})", 400, "seed"},
        {"stop a number", "/v1/completions", R"({"prompt": "a", "stop": 3})", 400, "stop"},
        {"unknown model", "/v1/completions", R"({"prompt": "a", "model": "gpt-5"})", 404, "model"},
        {"messages a string", "/v1/chat/completions", R"({"messages": "hello"})", 400, "messages"},
        {"messages empty", "/v1/chat/completions", R"({"messages": []})", 400, "messages"},
        {"bad role", "/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "x"}]})", 400,
         "messages[0].role"},
        {"content a number", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": 1}]})", 400,
         "messages[0].content"},
        {"invalid UTF-8", "/v1/completions", "{\"prompt\": \"a\xff\xfe b\"}", 400, ""},
        {"invalid UTF-8 in a message", "/v1/chat/completions",
         "{\"messages\": [{\"role\": \"user\", \"content\": \"\xc3\"}]}", 400, ""},
        {"prompt longer than the context", "/v1/completions", json({{"prompt", std::string(6000, 'z')}}).dump(), 400,
         "prompt"},
        {"10 MB body", "/v1/completions", "{\"prompt\": \"" + big + "\"}", 413, ""},
        // 200 KB that nest 100,000 arrays: printing the value in the message used to overflow the stack.
        {"nested 100,000 deep", "/v1/completions",
         "{\"prompt\": \"a\", \"max_tokens\": " + std::string(100000, '[') + std::string(100000, ']') + "}", 400, ""},
        {"unknown path", "/v1/embeddings", R"({"input": "a"})", 404, ""},
    };
    auto c = srv->client();
    for (const bad & b : cases) {
        SCOPED_TRACE(b.name);
        const auto res = c.Post(b.path, b.body, "application/json");
        ASSERT_TRUE(res) << httplib::to_string(res.error());
        EXPECT_EQ(res->status, b.status) << res->body;
        json j;
        ASSERT_NO_THROW(j = json::parse(res->body)) << res->body;
        ASSERT_TRUE(j.contains("error")) << res->body;
        EXPECT_TRUE(j["error"].at("message").is_string());
        EXPECT_FALSE(j["error"].at("message").get<std::string>().empty());
        EXPECT_TRUE(j["error"].at("type").is_string());
        EXPECT_TRUE(j["error"].contains("code"));
        if (!b.param.empty()) {
            EXPECT_EQ(j["error"].at("param"), b.param);
        }
    }
    // Named in the message: the counts of a prompt too long, the room for max_tokens.
    const auto r = c.Post("/v1/completions", R"({"prompt": "a", "max_tokens": 1000000000000})", "application/json");
    ASSERT_TRUE(r);
    EXPECT_NE(r->body.find("context of 512 tokens"), std::string::npos) << r->body;
    // Still serving.
    const json ok = post("/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 3}, {"temperature", 0}});
    EXPECT_EQ(ok.at("usage").at("completion_tokens"), 3);
}

TEST_F(serve_test, a_body_is_read_whatever_its_content_type_up_to_the_body_limit) {
    // A JSON body of `size` bytes (its prompt short, the rest an ignored field).
    const auto body_of = [](size_t size) {
        json j = {{"prompt", "Hello"}, {"max_tokens", 2}, {"temperature", 0}, {"user", ""}};
        j["user"] = std::string(size - j.dump().size(), 'u');
        return j.dump();
    };
    auto c = srv->client();
    c.set_keep_alive(true);  // a refused body must leave the connection in step for the next request
    // curl -d sends application/x-www-form-urlencoded, which cpp-httplib caps at 8192 bytes of its own
    // (it used to answer 413 naming --body-limit).
    for (const size_t size : {size_t(8000), size_t(8331), size_t(100000)}) {
        SCOPED_TRACE(size);
        const auto r = c.Post("/v1/completions", body_of(size), "application/x-www-form-urlencoded");
        ASSERT_TRUE(r) << httplib::to_string(r.error());
        EXPECT_EQ(r->status, 200) << r->body;
    }
    // Over --body-limit (1M here), whatever the Content-Type and the transfer encoding.
    const std::string big = body_of(size_t(2) << 20);
    const auto expect_413 = [](const httplib::Result & r) {
        ASSERT_TRUE(r) << httplib::to_string(r.error());
        EXPECT_EQ(r->status, 413) << r->body;
        EXPECT_EQ(json::parse(r->body).at("error").at("code"), "body_too_large") << r->body;
        EXPECT_NE(r->body.find("limit of 1048576 bytes (--body-limit)"), std::string::npos) << r->body;
    };
    expect_413(c.Post("/v1/completions", big, "application/x-www-form-urlencoded"));
    // Chunked (no Content-Length, which is all cpp-httplib checks: such a body used to be read whole).
    const auto chunked = [&](const std::string & body) {
        return c.Post(
            "/v1/completions",
            [&body](size_t offset, httplib::DataSink & sink) {
                const size_t n = std::min<size_t>(64 << 10, body.size() - offset);
                if (n > 0) return sink.write(body.data() + offset, n);
                sink.done();
                return true;
            },
            "application/json");
    };
    expect_413(chunked(big));
    const auto small = chunked(body_of(20000));
    ASSERT_TRUE(small);
    EXPECT_EQ(small->status, 200) << small->body;
    // Multipart: not JSON.
    const auto mp = c.Post("/v1/completions", httplib::MultipartFormDataItems{{"prompt", "Hello", "", ""}});
    ASSERT_TRUE(mp);
    EXPECT_EQ(mp->status, 415) << mp->body;
    EXPECT_NE(mp->body.find("Content-Type: application/json"), std::string::npos) << mp->body;
    // A path that reads no body of its own: cpp-httplib's cap is named as such.
    const auto other = c.Post("/v1/embeddings", body_of(9000), "application/x-www-form-urlencoded");
    ASSERT_TRUE(other);
    EXPECT_EQ(other->status, 413) << other->body;
    EXPECT_NE(other->body.find("application/x-www-form-urlencoded is limited to 8192 bytes"), std::string::npos)
        << other->body;
    EXPECT_EQ(other->body.find("--body-limit"), std::string::npos) << other->body;
    const auto ok = c.Post("/v1/completions", body_of(500), "application/json");
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << ok->body;
}

// A body over the limit that would take long to drop is not read to its end. Chunked (no Content-Length)
// and never ending: past the limit the server drops at most 16 MiB more (or another --body-limit, if
// larger), then answers 413 and closes the connection, so the handler thread is free again (it used to
// drop the bytes for as long as they came). With a Content-Length beyond that: 413 before any of it is
// read (cpp-httplib used to read and drop all of it first). Either way the server serves on.
TEST_F(serve_test, a_body_too_large_to_drain_is_cut_off) {
    // The client writes on after the server closed: a failed write, not a signal (hillinfer serve ignores
    // SIGPIPE itself, tools/hillinfer.cpp).
    const auto old_pipe = std::signal(SIGPIPE, SIG_IGN);
    const std::string block(64 << 10, 'u');
    const size_t bound = size_t(256) << 20;  // the test's own: what the client sends at most
    for (const bool declared : {false, true}) {
        SCOPED_TRACE(declared ? "Content-Length" : "chunked");
        auto c = srv->client();
        c.set_write_timeout(10, 0);
        std::atomic<size_t> sent{0};
        const auto provider = [&](size_t, httplib::DataSink & sink) {
            if (sent.load() >= bound) {
                sink.done();
                return true;
            }
            sent += block.size();
            return sink.write(block.data(), block.size());
        };
        const auto r =
            declared ? c.Post(
                           "/v1/completions", bound,
                           [&](size_t offset, size_t, httplib::DataSink & sink) { return provider(offset, sink); },
                           "application/json")
                     : c.Post("/v1/completions", provider, "application/json");
        // Chunked: the limit (1 MiB here) and 16 MiB more, plus what the sockets buffer; declared: about
        // what the sockets buffer.
        EXPECT_LT(sent.load(), size_t(declared ? 16 : 64) << 20) << "bytes sent before the server stopped reading";
        if (r) {
            EXPECT_EQ(r->status, 413) << r->body;
        }
    }
    auto c2 = srv->client();
    const auto ok =
        c2.Post("/v1/completions", R"({"prompt": "Hello", "max_tokens": 2, "temperature": 0})", "application/json");
    std::signal(SIGPIPE, old_pipe);
    ASSERT_TRUE(ok) << httplib::to_string(ok.error());
    EXPECT_EQ(ok->status, 200) << ok->body;
}

// One raw HTTP exchange with the server on 127.0.0.1:port (for requests cpp-httplib's client will not
// send): writes `request`, reads one response (its headers and Content-Length bytes of body; or until the
// server closes, or 5 s pass). Returns what was read, and sets `seconds` to how long the answer took.
std::string raw_exchange(int port, const std::string & request, double & seconds) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return "";
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string out;
    const auto t0 = std::chrono::steady_clock::now();
    if (::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0 &&
        ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == ssize_t(request.size())) {
        char buf[4096];
        for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) {
            out.append(buf, size_t(n));
            const size_t head = out.find("\r\n\r\n"), cl = out.find("Content-Length: ");
            if (head != std::string::npos && cl != std::string::npos && cl < head &&
                out.size() >= head + 4 + std::stoul(out.substr(cl + 16))) {
                break;
            }
        }
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ::close(fd);
    return out;
}

// A body's framing is checked before any of it is read (RFC 9112 §6): a Content-Length that is not one
// decimal number ("-5" and an overflowing one used to be read by cpp-httplib as a huge length, its bytes
// dropped for as long as they came), differing ones, one beside Transfer-Encoding, and a POST with
// neither (cpp-httplib used to wait for the connection to close) are answered 400 at once, naming what
// is wrong, and the connection is closed.
TEST_F(serve_test, a_malformed_body_length_is_refused_before_the_body_is_read) {
    const std::string body = R"({"prompt": "Hello", "max_tokens": 2, "temperature": 0})";
    const auto post = [&](const std::string & headers) {
        return "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" + headers +
               "\r\n" + body;
    };
    const std::string n = std::to_string(body.size());
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"Content-Length: -5\r\n", "the Content-Length header '-5' is not a number of bytes"},
        {"Content-Length: 99999999999999999999999\r\n", "'99999999999999999999999' is not a number of bytes"},
        {"Content-Length: 12abc\r\n", "'12abc' is not a number of bytes"},
        {"Content-Length: " + n + "\r\nContent-Length: 5\r\n", "Content-Length headers that differ"},
        {"Content-Length: " + n + "\r\nTransfer-Encoding: chunked\r\n", "both Content-Length and Transfer-Encoding"},
        {"", "neither Content-Length nor Transfer-Encoding"},
    };
    for (const auto & [headers, want] : cases) {
        SCOPED_TRACE(headers);
        double seconds = 0;
        const std::string r = raw_exchange(srv->port(), post(headers), seconds);
        EXPECT_EQ(r.rfind("HTTP/1.1 400", 0), 0u) << r;
        EXPECT_NE(r.find(want), std::string::npos) << r;
        EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
        EXPECT_LT(seconds, 2.0) << "answered only when the read timed out";
    }
    double seconds = 0;
    const std::string ok =
        raw_exchange(srv->port(), post("Content-Length: " + n + "\r\nConnection: close\r\n"), seconds);
    EXPECT_EQ(ok.rfind("HTTP/1.1 200", 0), 0u) << ok;
}

TEST_F(serve_test, a_client_that_goes_away_frees_its_kv) {
    auto c = srv->client();
    const json body = {
        {"prompt", "Tell me a long story"}, {"max_tokens", 400}, {"temperature", 0.8}, {"seed", 7}, {"stream", true}};
    int n_chunks = 0;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char *, size_t, uint64_t, uint64_t) { return ++n_chunks < 3; };
    const auto res = c.send(req);
    EXPECT_FALSE(res) << "the client stopped reading";
    EXPECT_GE(n_chunks, 3);
    // The server notices at its next write, ends the request and frees its KV.
    std::string m;
    for (int i = 0; i < 500; ++i) {
        m = c.Get("/metrics")->body;
        if (metric(m, "hillinfer_requests_cancelled_total") >= 1 && metric(m, "hillinfer_kv_tokens_running") == 0)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_GE(metric(m, "hillinfer_requests_cancelled_total"), 1) << m;
    EXPECT_EQ(metric(m, "hillinfer_kv_tokens_running"), 0) << m;
    EXPECT_EQ(metric(m, "hillinfer_requests_running"), 0) << m;
    EXPECT_EQ(metric(m, "hillinfer_kv_tokens"), metric(m, "hillinfer_kv_tokens_kept")) << m;
    EXPECT_GT(metric(m, "hillinfer_completion_tokens_total"), 0) << m;
    EXPECT_GE(metric(m, "hillinfer_step_seconds_max"), 0) << m;
}

TEST_F(serve_test, a_returning_conversation_reuses_its_kv) {
    json messages = {{{"role", "user"}, {"content", "Tell me about the cats of the old town, all of them"}}};
    const json t1 = post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}});
    const int64_t p1 = t1.at("usage").at("prompt_tokens");
    messages.push_back({{"role", "assistant"}, {"content", t1.at("choices")[0].at("message").at("content")}});
    messages.push_back({{"role", "user"}, {"content", "And the dogs?"}});
    const json t2 = post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}});
    const int64_t cached = t2.at("usage").at("prompt_tokens_details").at("cached_tokens");
    // Turn 1's prompt (up to the tokens at its end that turn 2's text tokenizes differently) is not prefilled again.
    EXPECT_GE(cached, p1 - 3) << t2.dump();
    EXPECT_LT(cached, int64_t(t2.at("usage").at("prompt_tokens")));
    EXPECT_EQ(t2.at("x_hillinfer").at("reused_tokens"), cached);
}

// The API key, the queue bound and SIGTERM, on servers of their own.
TEST_F(serve_test, a_port_in_use_is_an_error) {
    const auto r = test::run_cli("serve -m " + model("plain") + " -c 64 --port " + std::to_string(srv->port()));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("cannot listen on 127.0.0.1:" + std::to_string(srv->port())), std::string::npos) << r.out;
}

TEST_F(serve_test, api_key_is_required_on_v1) {
    serve_process s("-m " + model("plain") + " -c 256 --api-key sesame", dir->file("key.err"));
    ASSERT_GT(s.port(), 0) << s.err();
    auto c = s.client();
    const std::string body = R"({"prompt": "a", "max_tokens": 2})";
    auto r = c.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
    EXPECT_EQ(json::parse(r->body).at("error").at("code"), "invalid_api_key");
    r = c.Post("/v1/completions", {{"Authorization", "Bearer wrong"}}, body, "application/json");
    EXPECT_EQ(r->status, 401);
    r = c.Post("/v1/completions", {{"Authorization", "Bearer sesame"}}, body, "application/json");
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(c.Get("/health")->status, 200);
    r = c.Post("/v1/chat/completions", {{"Authorization", "Bearer sesame"}},
               R"({"messages": [{"role": "user", "content": "x"}]})", "application/json");
    EXPECT_EQ(r->status, 400) << "a model without a chat template";
    EXPECT_NE(r->body.find("--chat-template"), std::string::npos) << r->body;
}

TEST_F(serve_test, a_full_queue_answers_503_and_sigterm_finishes_the_running_stream) {
    // One sequence, no queue. The running request is a chat (its stream starts with the role event at
    // once) with a long message prefilled 16 tokens per step, so that it still runs when the second
    // request comes and when SIGTERM comes. A small host budget: its KV goes to the cold pool in kv/.
    const std::string kv = dir->file("kv");
    std::filesystem::create_directories(kv);
    serve_process s("-m " + model("chatml") +
                        " -c 4096 --parallel 1 --queue 0 --prefill-chunk 16 --kv-host-budget 64K "
                        "--kv-dir " +
                        kv,
                    dir->file("queue.err"));
    ASSERT_GT(s.port(), 0) << s.err();
    std::string message;
    for (int i = 0; i < 150; ++i) message += "line " + std::to_string(i) + " of a long letter. ";
    std::atomic<int> n_chunks{0};
    std::string body;
    std::thread streamer([&] {
        auto c = s.client();
        const json b = {{"messages", {{{"role", "user"}, {"content", message}}}},
                        {"max_tokens", 40},
                        {"temperature", 0.8},
                        {"seed", 1},
                        {"stream", true},
                        {"stream_options", {{"include_usage", true}}}};
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/chat/completions";
        req.body = b.dump();
        req.set_header("Content-Type", "application/json");
        req.content_receiver = [&](const char * d, size_t n, uint64_t, uint64_t) {
            body.append(d, n);
            ++n_chunks;
            return true;
        };
        c.send(req);
    });
    for (int i = 0; i < 3000 && n_chunks < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    auto c = s.client();
    const auto r = c.Post("/v1/completions", R"({"prompt": "a", "max_tokens": 2})", "application/json");
    EXPECT_TRUE(r);
    if (r) {
        EXPECT_EQ(r->status, 503) << r->body;
        EXPECT_EQ(r->get_header_value("Retry-After"), "1");
        EXPECT_NE(r->body.find("\"code\":\"queue_full\""), std::string::npos) << r->body;
    }
    EXPECT_FALSE(std::filesystem::is_empty(kv)) << "the cold pool's files";
    EXPECT_EQ(s.stop(SIGTERM, 120.0), 0) << s.err();
    streamer.join();
    const std::vector<std::string> ev = sse_events(body);
    ASSERT_GE(ev.size(), 4u) << body;
    EXPECT_EQ(ev.back(), "[DONE]") << "the running stream finished";
    const json usage = json::parse(ev[ev.size() - 2]).at("usage");
    EXPECT_GT(usage.at("prompt_tokens"), 1000) << usage;
    EXPECT_GE(usage.at("completion_tokens"), 1) << usage;
    EXPECT_FALSE(json::parse(ev[ev.size() - 3]).at("choices")[0].at("finish_reason").is_null());
    EXPECT_TRUE(std::filesystem::is_empty(kv)) << "the cold-pool files are removed";
    EXPECT_NE(s.err().find("stopping; 1 request to finish"), std::string::npos) << s.err();
}

TEST_F(serve_test, sigint_stops_the_server_with_exit_code_0) {
    // SIGINT or SIGTERM is how a server is stopped: exit 0 after the drain (the other commands exit 130).
    serve_process s("-m " + model("plain") + " -c 256", dir->file("sigint.err"));
    ASSERT_GT(s.port(), 0) << s.err();
    EXPECT_EQ(s.client().Get("/health")->status, 200);
    EXPECT_EQ(s.stop(SIGINT, 30.0), 0) << s.err();
    EXPECT_NE(s.err().find("hillinfer serve: stopped"), std::string::npos) << s.err();
}

TEST_F(serve_test, health_answers_503_while_the_server_drains) {
    // One sequence prefilling a ~770-token prompt one token per step: the request still runs for 0.2 to 1.5 s
    // after SIGTERM (release build, idle or loaded 2-core machine), while the server drains.
    serve_process s("-m " + model("chatml") + " -c 4096 --parallel 1 --prefill-chunk 1", dir->file("drain.err"));
    ASSERT_GT(s.port(), 0) << s.err();
    auto c = s.client();
    const auto up = c.Get("/health");
    ASSERT_TRUE(up);
    EXPECT_EQ(up->status, 200);
    EXPECT_EQ(up->body, R"({"status":"ok"})");
    std::string prompt;
    for (int i = 0; i < 40; ++i) prompt += "line " + std::to_string(i) + " of a long letter. ";
    int running_status = 0;
    std::thread running([&] {
        const auto r =
            s.client().Post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}}.dump(),
                            "application/json");
        if (r) running_status = r->status;
    });
    for (int i = 0; i < 1000 && metric(c.Get("/metrics")->body, "hillinfer_requests_running") != 1; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    s.signal(SIGTERM);
    auto h = c.Get("/health");
    for (int i = 0; i < 2000 && h && h->status == 200; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        h = c.Get("/health");
    }
    ASSERT_TRUE(h) << "the server answers /health while it drains: " << s.err();
    EXPECT_EQ(h->status, 503) << h->body;
    EXPECT_EQ(h->body, R"({"status":"shutting_down"})");
    EXPECT_EQ(h->get_header_value("Content-Type"), "application/json");
    const auto refused = c.Post("/v1/completions", R"({"prompt": "a", "max_tokens": 2})", "application/json");
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 503) << refused->body;
    EXPECT_NE(refused->body.find("\"code\":\"shutting_down\""), std::string::npos) << refused->body;
    running.join();
    EXPECT_EQ(running_status, 200) << "the running request finishes";
    EXPECT_EQ(s.wait(60.0), 0) << s.err();
    EXPECT_NE(s.err().find("stopping; 1 request to finish"), std::string::npos) << s.err();
}

// --- the on-disk prompt cache (--cache-dir) ---------------------------------------------------------

json post_to(const serve_process & s, const std::string & path, const json & body, int expect_status = 200) {
    auto c = s.client();
    const auto res = c.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res) << "no response: " << httplib::to_string(res.error());
    if (!res) return json();
    EXPECT_EQ(res->status, expect_status) << res->body;
    return json::parse(res->body);
}

json chat_body(const json & messages) {
    return {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}};
}

json user(const std::string & text) {
    return {{"role", "user"}, {"content", text}};
}

// The next turn's messages: the reply of `turn`, then a new user message.
json next_turn(json messages, const json & turn, const std::string & text) {
    messages.push_back({{"role", "assistant"}, {"content", turn.at("choices")[0].at("message").at("content")}});
    messages.push_back(user(text));
    return messages;
}

// The *.hpc files of a cache directory and their bytes.
std::vector<std::filesystem::path> cache_files(const std::string & dir, uint64_t * bytes = nullptr) {
    std::vector<std::filesystem::path> out;
    if (bytes) *bytes = 0;
    for (const auto & e : std::filesystem::directory_iterator(dir)) {
        if (e.path().extension() != ".hpc") continue;
        out.push_back(e.path());
        if (bytes) *bytes += e.file_size();
    }
    return out;
}

TEST_F(serve_test, a_conversation_whose_sequence_was_taken_reuses_its_kv_from_the_cache_dir) {
    // The reference: the same turns on the fixture's server, turn 2 reusing turn 1's KV from its sequence.
    const json a1_msgs = json::array({user("Tell me about the cats of the old town, all of them")});
    const json ref1 = post("/v1/chat/completions", chat_body(a1_msgs));
    const json a2_msgs = next_turn(a1_msgs, ref1, "And the dogs?");
    const json ref2 = post("/v1/chat/completions", chat_body(a2_msgs));
    const int64_t p1 = ref1.at("usage").at("prompt_tokens");
    ASSERT_GE(int64_t(ref2.at("usage").at("prompt_tokens_details").at("cached_tokens")), p1 - 3) << ref2.dump();

    // One sequence: conversation B takes it from A, whose KV goes to the cache directory.
    const std::string cache = dir->file("cache-a");
    serve_process s("-m " + model("chatml") + " -c 512 --parallel 1 --cache-dir " + cache, dir->file("cache-a.err"));
    ASSERT_GT(s.port(), 0) << s.err();
    const json a1 = post_to(s, "/v1/chat/completions", chat_body(a1_msgs));
    EXPECT_EQ(a1.at("choices")[0].at("message"), ref1.at("choices")[0].at("message"));
    EXPECT_EQ(a1.at("x_hillinfer").at("cache_dir_tokens"), 0);
    EXPECT_TRUE(cache_files(cache).empty()) << "A keeps its KV in its sequence while nobody needs it";
    const json b = post_to(s, "/v1/chat/completions", chat_body(json::array({user("What is the capital of Peru?")})));
    ASSERT_EQ(cache_files(cache).size(), 1u) << "A's KV, saved when B took its sequence";
    const json a2 = post_to(s, "/v1/chat/completions", chat_body(a2_msgs));
    const int64_t cached = a2.at("usage").at("prompt_tokens_details").at("cached_tokens");
    EXPECT_GE(cached, p1 - 3) << a2.dump();
    EXPECT_LT(cached, int64_t(a2.at("usage").at("prompt_tokens")));
    EXPECT_EQ(a2.at("x_hillinfer").at("cache_dir_tokens"), cached) << "loaded from the cache directory";
    EXPECT_EQ(a2.at("choices")[0].at("message"), ref2.at("choices")[0].at("message")) << "greedy output unchanged";
    const std::string m = s.client().Get("/metrics")->body;
    EXPECT_EQ(metric(m, "hillinfer_prompt_cache_hits_total"), 1) << m;
    EXPECT_EQ(metric(m, "hillinfer_prompt_cache_hit_tokens_total"), double(cached)) << m;
    EXPECT_EQ(metric(m, "hillinfer_prompt_cache_saves_total"), 2) << "A, then B when A took the sequence back";
    EXPECT_EQ(metric(m, "hillinfer_prompt_cache_errors_total"), 0) << m;

    // A restart: the kept sequence (A's turn 2) is saved at shutdown and the new server loads it.
    EXPECT_EQ(s.stop(SIGTERM, 60.0), 0) << s.err();
    serve_process s2("-m " + model("chatml") + " -c 512 --parallel 1 --cache-dir " + cache, dir->file("cache-b.err"));
    ASSERT_GT(s2.port(), 0) << s2.err();
    const json a3_msgs = next_turn(a2_msgs, a2, "And the birds?");
    const json a3 = post_to(s2, "/v1/chat/completions", chat_body(a3_msgs));
    EXPECT_GE(int64_t(a3.at("x_hillinfer").at("cache_dir_tokens")), int64_t(a2.at("usage").at("prompt_tokens")) - 3)
        << a3.dump();
}

TEST_F(serve_test, the_cache_dir_stays_under_its_limit_least_recently_used_first) {
    // An entry of the ~60 prompt tokens and the reply is ~18 KB (260 bytes per token: its id and 2 layers of
    // 64-byte K and V rows): 40K holds two, not three.
    const std::string cache = dir->file("cache-lru");
    serve_process s("-m " + model("chatml") + " -c 512 --parallel 1 --cache-dir " + cache + " --cache-dir-limit 40K",
                    dir->file("cache-lru.err"));
    ASSERT_GT(s.port(), 0) << s.err();
    const std::vector<std::string> topics = {
        "the cats of the old town, every single one of them", "the rivers of the northern valleys and their bridges",
        "the old lighthouse keeper and the storms of winter", "the market square on a busy summer morning"};
    std::vector<json> msgs, turns;
    for (const std::string & t : topics) {
        msgs.push_back(json::array({user("Tell me about " + t)}));
        turns.push_back(post_to(s, "/v1/chat/completions", chat_body(msgs.back())));
    }
    uint64_t bytes = 0;
    EXPECT_LE(cache_files(cache, &bytes).size(), 2u);
    EXPECT_LE(bytes, 40u * 1024) << "the limit";
    std::string m = s.client().Get("/metrics")->body;
    EXPECT_EQ(metric(m, "hillinfer_prompt_cache_saves_total"), 3) << m;
    EXPECT_GE(metric(m, "hillinfer_prompt_cache_evictions_total"), 1) << m;
    EXPECT_EQ(metric(m, "hillinfer_prompt_cache_bytes"), double(bytes)) << m;
    // The third conversation (the most recently saved) comes back from the cache; the first was evicted.
    const json c3 = post_to(s, "/v1/chat/completions", chat_body(next_turn(msgs[2], turns[2], "Go on")));
    EXPECT_GE(int64_t(c3.at("x_hillinfer").at("cache_dir_tokens")),
              int64_t(turns[2].at("usage").at("prompt_tokens")) - 3)
        << c3.dump();
    const json c1 = post_to(s, "/v1/chat/completions", chat_body(next_turn(msgs[0], turns[0], "Go on")));
    EXPECT_LT(int64_t(c1.at("usage").at("prompt_tokens_details").at("cached_tokens")),
              int64_t(turns[0].at("usage").at("prompt_tokens")) / 2)
        << c1.dump();
    EXPECT_LE(cache_files(cache, &bytes).size(), 2u);
    EXPECT_LE(bytes, 40u * 1024);
}

TEST_F(serve_test, a_corrupt_cache_file_is_removed_and_the_prompt_prefilled) {
    const std::string cache = dir->file("cache-bad");
    serve_process s("-m " + model("chatml") + " -c 512 --parallel 1 --cache-dir " + cache, dir->file("cache-bad.err"));
    ASSERT_GT(s.port(), 0) << s.err();
    const json a1_msgs = json::array({user("Tell me about the cats of the old town, all of them")});
    const json a1 = post_to(s, "/v1/chat/completions", chat_body(a1_msgs));
    post_to(s, "/v1/chat/completions", chat_body(json::array({user("What is the capital of Peru?")})));
    const auto files = cache_files(cache);
    ASSERT_EQ(files.size(), 1u);
    {  // one byte of the last layer's V rows flipped
        std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(-40, std::ios::end);
        char c = 0;
        f.get(c);
        f.seekp(-40, std::ios::end);
        f.put(char(c ^ 0x5a));
    }
    const json a2 = post_to(s, "/v1/chat/completions", chat_body(next_turn(a1_msgs, a1, "And the dogs?")));
    EXPECT_EQ(a2.at("x_hillinfer").at("cache_dir_tokens"), 0) << a2.dump();
    EXPECT_LT(int64_t(a2.at("usage").at("prompt_tokens_details").at("cached_tokens")),
              int64_t(a1.at("usage").at("prompt_tokens")) / 2);
    EXPECT_FALSE(std::filesystem::exists(files[0])) << "the corrupt file is removed";
    const std::string m = s.client().Get("/metrics")->body;
    EXPECT_EQ(metric(m, "hillinfer_prompt_cache_errors_total"), 1) << m;
    EXPECT_EQ(metric(m, "hillinfer_prompt_cache_hits_total"), 0) << m;
    EXPECT_NE(s.err().find("failed verification"), std::string::npos) << s.err();
    EXPECT_NE(s.err().find("checksum"), std::string::npos) << s.err();
}

TEST_F(serve_test, an_unusable_cache_dir_is_a_warning_and_requests_succeed) {
    const std::string file = dir->file("not-a-dir");
    std::ofstream(file) << "x";
    serve_process s("-m " + model("chatml") + " -c 512 --parallel 1 --cache-dir " + file + "/cache",
                    dir->file("cache-nodir.err"));
    ASSERT_GT(s.port(), 0) << s.err();
    for (const char * q : {"Hello there", "Something else entirely, please"}) {
        const json j = post_to(s, "/v1/chat/completions", chat_body(json::array({user(q)})));
        EXPECT_GE(int64_t(j.at("usage").at("completion_tokens")), 1) << j.dump();
    }
    const std::string m = s.client().Get("/metrics")->body;
    EXPECT_EQ(metric(m, "hillinfer_prompt_cache_errors_total"), 1) << "the failed save of the first conversation";
    EXPECT_NE(s.err().find("cannot create the directory"), std::string::npos) << s.err();
    EXPECT_NE(s.err().find("cannot save"), std::string::npos) << s.err();
}

// --- client disconnects -----------------------------------------------------------------------------

TEST_F(serve_test, a_non_streaming_client_that_goes_away_cancels_its_request) {
    // A long prompt prefilled 16 tokens per step and many tokens to generate: still running when the
    // client gives up after 300 ms.
    serve_process s("-m " + model("chatml") + " -c 4096 --parallel 1 --prefill-chunk 16", dir->file("gone.err"));
    ASSERT_GT(s.port(), 0) << s.err();
    std::string prompt;
    for (int i = 0; i < 60; ++i) prompt += "line " + std::to_string(i) + " of a long letter. ";
    auto c = s.client();
    c.set_read_timeout(0, 300 * 1000);
    const auto r = c.Post("/v1/completions",
                          json{{"prompt", prompt}, {"max_tokens", 2000}, {"temperature", 0.8}, {"seed", 3}}.dump(),
                          "application/json");
    EXPECT_FALSE(r) << "the client timed out: " << (r ? r->body : "");
    auto c2 = s.client();
    std::string m;
    for (int i = 0; i < 500; ++i) {
        m = c2.Get("/metrics")->body;
        if (metric(m, "hillinfer_requests_cancelled_total") >= 1 && metric(m, "hillinfer_requests_running") == 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(metric(m, "hillinfer_requests_cancelled_total"), 1) << m;
    EXPECT_EQ(metric(m, "hillinfer_requests_running"), 0) << m;
    EXPECT_EQ(metric(m, "hillinfer_kv_tokens"), 0) << "a cancelled request's KV is freed, not kept\n" << m;
    EXPECT_LT(metric(m, "hillinfer_completion_tokens_total"), 2000) << m;
}

TEST_F(serve_test, attended_share_is_the_requests_own) {
    // streaming attends the 4 sinks and the 16-token window: a long context's share is small, a context
    // within 20 tokens attends everything, whatever ran before it.
    serve_process s("-m " + model("chatml") + " -c 512 --policy streaming", dir->file("share.err"));
    ASSERT_GT(s.port(), 0) << s.err();
    std::string prompt;
    for (int i = 0; i < 20; ++i) prompt += "word" + std::to_string(i) + " ";
    const json lng = post_to(s, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}});
    ASSERT_GT(int64_t(lng.at("usage").at("prompt_tokens")), 100) << lng.dump();
    EXPECT_EQ(lng.at("x_hillinfer").at("policy"), "streaming");
    EXPECT_LT(double(lng.at("x_hillinfer").at("attended_share")), 0.25) << lng.dump();
    const json sht = post_to(s, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 4}, {"temperature", 0}});
    ASSERT_LE(int64_t(sht.at("usage").at("total_tokens")), 20) << sht.dump();
    ASSERT_GE(int64_t(sht.at("usage").at("completion_tokens")), 2) << "at least one decode step";
    EXPECT_EQ(double(sht.at("x_hillinfer").at("attended_share")), 1.0) << sht.dump();
    const json one = post_to(s, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 1}, {"temperature", 0}});
    EXPECT_TRUE(one.at("x_hillinfer").at("attended_share").is_null()) << "no decode step: " << one.dump();
}

// --- stopping at once, in-process ------------------------------------------------------------------

// A stop requested before the listener thread has started (a SIGINT or SIGTERM during start-up) used to be
// lost: cpp-httplib 0.11.4's Server::stop() does nothing until listen_after_bind() has set is_running(),
// and run() then waited for the listener thread forever (/health kept answering 200). 50 servers in a row,
// each told to stop before it starts: each run() returns.
TEST(serve_stop, a_stop_requested_before_the_listener_starts_ends_run) {
    std::signal(SIGPIPE, SIG_IGN);
    test::temp_dir d;
    write_random_model(d.file("m.gguf"), random_model_params{.n_vocab = 300,
                                                             .n_embd = 32,
                                                             .n_ff = 64,
                                                             .n_layer = 1,
                                                             .n_head = 2,
                                                             .n_head_kv = 1,
                                                             .n_ctx = 64,
                                                             .seed = 5});
    const auto m = model::load(d.file("m.gguf"));
    thread_pool pool(2);
    context ctx(*m, context_params{.n_ctx = 64, .n_seq = 1}, pool);
    server::server_params sp;
    sp.port = 0;
    sp.parallel = 1;
    sp.queue = 0;  // 5 handler threads per server, not 69
    sp.model_id = "m";
    for (int i = 0; i < 50; ++i) {
        auto srv = std::make_unique<server::server>(*m, ctx, std::nullopt, sp);
        ASSERT_GT(srv->bind(), 0);
        auto done = std::make_shared<std::atomic<bool>>(false);
        server::server * s = srv.get();
        std::thread t([s, done] {
            s->run([] { return true; });
            *done = true;
        });
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!*done && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (!*done) {
            // The hung thread keeps the server: leaked, so that the test can report instead of hanging too.
            ADD_FAILURE() << "server " << i << ": run() did not return within 10 s of a stop requested at once";
            t.detach();
            (void)srv.release();
            return;
        }
        t.join();
    }
}

// --- a storage fault, in-process (the fault hook is context_params::io_faults, as in test_kv_faults) ---

TEST(serve_faults, a_storage_fault_fails_the_request_it_touches_and_the_server_goes_on) {
    std::signal(SIGPIPE, SIG_IGN);
    test::temp_dir d;
    write_random_model(d.file("m.gguf"), random_model_params{.n_vocab = 300,
                                                             .n_embd = 64,
                                                             .n_ff = 96,
                                                             .n_layer = 2,
                                                             .n_head = 4,
                                                             .n_head_kv = 2,
                                                             .n_ctx = 512,
                                                             .seed = 3});
    const auto m = model::load(d.file("m.gguf"));
    std::atomic<bool> fail_reads{false};
    const io_fault_hook hook = [&](const io_issue & is, int64_t r) {
        return fail_reads && is.op == io_op::read ? int64_t(-EIO) : r;
    };
    // 48 hot tokens per layer (2 sequences): most of a long prompt's KV is only in the cold pool, read at every step.
    context_params cp{.n_ctx = 400,
                      .kv_dir = d.file("kv"),
                      .storage = csd::storage_params{.io_faults = hook},
                      .io_faults = hook,
                      .n_seq = 2};
    cp.kv_host_budget = context::host_budget_for(*m, cp, 48);
    thread_pool pool(2);
    context ctx(*m, cp, pool);
    server::server_params sp;
    sp.port = 0;
    sp.parallel = 2;
    sp.model_id = "m";
    sp.prefix_reuse = false;  // every request prefills its prompt: the same computation each time
    server::server srv(*m, ctx, std::nullopt, sp);
    const int port = srv.bind();
    std::atomic<bool> stop{false};
    std::thread engine([&] { srv.run([&] { return stop.load(); }); });
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    std::string long_prompt;
    for (int i = 0; i < 40; ++i) long_prompt += "word" + std::to_string(i) + " ";
    const std::string body = json{{"prompt", long_prompt}, {"max_tokens", 8}, {"temperature", 0}}.dump();

    const auto ok = c.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(ok);
    ASSERT_EQ(ok->status, 200) << ok->body;
    ASSERT_GT(int64_t(json::parse(ok->body).at("usage").at("prompt_tokens")), 100) << "a prompt that goes cold";

    fail_reads = true;
    const auto bad = c.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 500) << bad->body;
    const json e = json::parse(bad->body).at("error");
    EXPECT_EQ(e.at("code"), "generation_failed");
    EXPECT_NE(e.at("message").get<std::string>().find("Input/output error"), std::string::npos) << e;
    // A streaming request that the fault touches: an error event, then [DONE].
    const auto bad_stream =
        c.Post("/v1/completions",
               json{{"prompt", long_prompt}, {"max_tokens", 8}, {"temperature", 0}, {"stream", true}}.dump(),
               "application/json");
    ASSERT_TRUE(bad_stream);
    const std::vector<std::string> ev = sse_events(bad_stream->body);
    ASSERT_GE(ev.size(), 2u) << bad_stream->body;
    EXPECT_EQ(ev.back(), "[DONE]");
    EXPECT_EQ(json::parse(ev[ev.size() - 2]).at("error").at("code"), "generation_failed") << bad_stream->body;

    fail_reads = false;  // the fault is gone: the server serves, and what it generates is what it did before
    const auto again = c.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(again);
    ASSERT_EQ(again->status, 200) << again->body;
    EXPECT_EQ(json::parse(again->body).at("choices"), json::parse(ok->body).at("choices"));
    // The engine thread updates /metrics after the step that answered: poll.
    std::string mt;
    for (int i = 0; i < 500; ++i) {
        mt = c.Get("/metrics")->body;
        if (metric(mt, "hillinfer_kv_tokens") == 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(metric(mt, "hillinfer_http_responses_total{code=\"500\"}"), 1) << mt;
    EXPECT_EQ(metric(mt, "hillinfer_kv_tokens"), 0) << "the failed requests' KV is freed\n" << mt;
    stop = true;
    engine.join();
}

}  // namespace
}  // namespace hill
