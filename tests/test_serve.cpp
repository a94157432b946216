// `hillinfer serve` as a child process on an ephemeral port, driven with cpp-httplib's client, on the
// chat models `make-model random --chat-template` builds: health and models, greedy completions equal to
// `generate`, chat through the template, streaming (server-sent events, [DONE]), stop strings, the
// OpenAI-style errors of a fixed list of bad requests (the server keeps serving), the API key, the
// queue bound (503), a client that goes away (its KV freed, seen in /metrics), and SIGTERM (the running
// stream finishes, the cold-pool files are removed).
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_util.h"
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
        ::kill(pid_, sig);
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
        if (i == 0) {
            EXPECT_EQ(e.at("choices")[0].at("delta").at("role"), "assistant");
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
    EXPECT_NE(s.err().find("stopping; 1 requests to finish"), std::string::npos) << s.err();
}

}  // namespace
}  // namespace hill
