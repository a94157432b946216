// Load test of `hillinfer serve` on loopback (docs/serve.md "Load test"): --clients concurrent
// streaming clients send --requests requests in all, of mixed prompt lengths, greedy; bounded in count
// and time (--seconds: stops by itself). Every stream must be well-formed (data: events of JSON chunks
// with one id, one finish_reason, the usage chunk, then [DONE]) and not mixed with another's: each request's prompt is
// one of --distinct prompts whose greedy text was first taken alone (non-streaming), and its streamed
// text must equal that reference — a token of another stream breaks it. With --disconnect P a client
// goes away at a random point of a fraction P of the streams; at the end /metrics must show no running
// request and no KV of running requests (the cancelled ones' KV freed). Prints p50/p99 time to first
// token, tokens/s, and the server's metrics of interest; exit code 1 on a check that failed.
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

double metric(const std::string & text, const std::string & name) {
    const size_t p = text.find("\n" + name + " ");
    return p == std::string::npos ? -1 : std::stod(text.substr(p + name.size() + 2));
}

double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

}  // namespace

int main(int argc, char ** argv) {
    CLI::App app{"load test of hillinfer serve (streaming clients on loopback)"};
    std::string host = "127.0.0.1";
    int port = 8080, clients = 32, requests = 400, distinct = 16, max_tokens = 32, seed = 1;
    double disconnect = 0.0, seconds = 600;
    std::string api_key;
    app.add_option("--host", host)->capture_default_str();
    app.add_option("--port", port)->capture_default_str();
    app.add_option("--clients", clients, "concurrent streaming clients")->capture_default_str();
    app.add_option("--requests", requests, "requests in all")->capture_default_str();
    app.add_option("--distinct", distinct, "distinct prompts (8 to 128 words)")->capture_default_str();
    app.add_option("--max-tokens", max_tokens)->capture_default_str();
    app.add_option("--disconnect", disconnect, "share of streams whose client goes away at a random point")
        ->capture_default_str();
    app.add_option("--seconds", seconds, "stop sending after this long")->capture_default_str();
    app.add_option("--seed", seed)->capture_default_str();
    app.add_option("--api-key", api_key);
    CLI11_PARSE(app, argc, argv);

    const auto client = [&] {
        httplib::Client c(host, port);
        c.set_read_timeout(300, 0);
        if (!api_key.empty()) c.set_bearer_token_auth(api_key);
        return c;
    };
    // Prompts of mixed lengths, each naming its number.
    std::vector<std::string> prompts;
    for (int i = 0; i < distinct; ++i) {
        std::string p = "Request " + std::to_string(i) + ": repeat your number.";
        const int words = 8 << (i % 5);
        for (int w = 0; w < words; ++w) p += " word" + std::to_string((w * 7 + i) % 50);
        prompts.push_back(p);
    }
    std::vector<std::string> ref(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        auto c = client();
        const json body = {{"prompt", prompts[i]}, {"max_tokens", max_tokens}, {"temperature", 0}};
        const auto r = c.Post("/v1/completions", body.dump(), "application/json");
        if (!r || r->status != 200) {
            std::fprintf(stderr, "bench_serve: reference %zu failed: %s\n", i,
                         r ? r->body.c_str() : httplib::to_string(r.error()).c_str());
            return 1;
        }
        ref[i] = json::parse(r->body).at("choices")[0].at("text");
    }

    std::atomic<int> next{0}, n_ok{0}, n_bad{0}, n_cut{0}, n_busy{0};
    std::atomic<int64_t> n_tokens{0};
    std::mutex mu;
    std::vector<double> ttft;
    std::vector<std::string> problems;
    const auto t0 = clock_type::now();
    const auto elapsed = [&] { return std::chrono::duration<double>(clock_type::now() - t0).count(); };
    std::vector<std::thread> th;
    for (int t = 0; t < clients; ++t) {
        th.emplace_back([&, t] {
            std::mt19937 rng(uint32_t(seed * 1000 + t));
            auto c = client();
            for (int k; (k = next.fetch_add(1)) < requests && elapsed() < seconds;) {
                const size_t pi = size_t(k) % prompts.size();
                const bool cut = std::uniform_real_distribution<double>(0, 1)(rng) < disconnect;
                const int cut_after = std::uniform_int_distribution<int>(1, std::max(1, max_tokens / 2))(rng);
                const json body = {{"prompt", prompts[pi]},
                                   {"max_tokens", max_tokens},
                                   {"temperature", 0},
                                   {"stream", true},
                                   {"stream_options", {{"include_usage", true}}}};
                httplib::Request req;
                req.method = "POST";
                req.path = "/v1/completions";
                req.body = body.dump();
                req.set_header("Content-Type", "application/json");
                std::string buf;
                int n_events = 0;
                double first = -1;
                const auto ts = clock_type::now();
                req.content_receiver = [&](const char * d, size_t n, uint64_t, uint64_t) {
                    if (first < 0) first = std::chrono::duration<double>(clock_type::now() - ts).count();
                    buf.append(d, n);
                    return !(cut && ++n_events >= cut_after);
                };
                const auto res = c.send(req);
                if (cut && !res) {
                    ++n_cut;
                    c.stop();
                    continue;
                }
                std::string why;
                if (!res)
                    why = "no response: " + httplib::to_string(res.error());
                else if (res->status == 503) {
                    ++n_busy;
                    continue;
                } else if (res->status != 200)
                    why = "status " + std::to_string(res->status) + ": " + res->body;
                std::string text, id;
                int n_finish = 0;
                int64_t n_generated = -1;  // the usage chunk's completion_tokens
                bool done = false;
                for (size_t pos = 0; why.empty() && pos < buf.size();) {
                    const size_t end = buf.find("\n\n", pos);
                    if (end == std::string::npos || buf.compare(pos, 6, "data: ") != 0) {
                        why = "malformed event at byte " + std::to_string(pos);
                        break;
                    }
                    const std::string data = buf.substr(pos + 6, end - pos - 6);
                    pos = end + 2;
                    if (data == "[DONE]") {
                        done = pos == buf.size();
                        if (!done) why = "events after [DONE]";
                        break;
                    }
                    try {
                        const json e = json::parse(data);
                        if (id.empty()) id = e.at("id");
                        if (e.at("id") != id) why = "two ids in one stream";
                        if (e.at("choices").empty()) {
                            n_generated = e.at("usage").at("completion_tokens");
                            continue;
                        }
                        const json & ch = e.at("choices").at(0);
                        text += ch.at("text").get<std::string>();
                        n_finish += ch.at("finish_reason").is_null() ? 0 : 1;
                    } catch (const std::exception & ex) {
                        why = std::string("bad chunk: ") + ex.what();
                    }
                }
                if (why.empty() && !done) why = "no [DONE] at the end";
                if (why.empty() && n_generated < 0) why = "no usage chunk";
                if (why.empty() && n_finish != 1) why = "finish_reason in " + std::to_string(n_finish) + " chunks";
                if (why.empty() && text != ref[pi])
                    why = "text differs from prompt " + std::to_string(pi) + "'s (mixed?)";
                std::lock_guard lk(mu);
                if (!why.empty()) {
                    ++n_bad;
                    if (problems.size() < 10) problems.push_back("request " + std::to_string(k) + ": " + why);
                    continue;
                }
                ++n_ok;
                n_tokens += n_generated;
                ttft.push_back(first);
            }
        });
    }
    for (auto & x : th) x.join();
    const double wall = elapsed();
    // The cancelled requests end at the server's next step: wait for it to settle.
    std::string m;
    for (int i = 0; i < 500; ++i) {
        m = client().Get("/metrics")->body;
        if (metric(m, "hillinfer_requests_running") == 0 && metric(m, "hillinfer_kv_tokens_running") == 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::printf("requests: %d ok, %d cut by the client, %d refused busy (503), %d BAD; %d clients, wall %.1f s\n",
                n_ok.load(), n_cut.load(), n_busy.load(), n_bad.load(), clients, wall);
    std::printf("time to first token: p50 %.3f s, p99 %.3f s; generated tokens %lld, %.1f tokens/s aggregate\n",
                percentile(ttft, 0.5), percentile(ttft, 0.99), (long long)n_tokens.load(),
                double(n_tokens.load()) / wall);
    for (const char * name : {"hillinfer_requests_cancelled_total", "hillinfer_requests_running",
                              "hillinfer_kv_tokens_running", "hillinfer_kv_tokens_kept", "hillinfer_step_seconds_max",
                              "hillinfer_hot_share", "hillinfer_kv_bytes{tier=\"hot\"}",
                              "hillinfer_kv_bytes{tier=\"cold\"}", "hillinfer_storage_link_bytes_total"}) {
        std::printf("  %s %g\n", name, metric(m, name));
    }
    for (const std::string & p : problems) std::printf("  %s\n", p.c_str());
    bool ok = n_bad == 0 && n_ok > 0;
    if (metric(m, "hillinfer_requests_running") != 0 || metric(m, "hillinfer_kv_tokens_running") != 0) {
        std::printf("FAIL: requests still running or their KV not freed\n");
        ok = false;
    }
    if (disconnect > 0 && n_cut > 0 && metric(m, "hillinfer_requests_cancelled_total") < 1) {
        std::printf("FAIL: clients went away and no request was cancelled\n");
        ok = false;
    }
    std::printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
