#include "server/server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/sys_info.h"
#include "engine/batch_generator.h"
#include "engine/prompt_cache_dir.h"
#include "server/api_request.h"

namespace hill::server {

using json = nlohmann::json;

// Named, not anonymous: server::impl holds these types, and in a unity build this file is an included
// one, where a member of an anonymous-namespace type is a -Wsubobject-linkage error.
namespace detail {

std::string dump(const json & j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_error(httplib::Response & res, const api_error & e) {
    res.status = e.status;
    res.set_content(error_body(e), "application/json");
}

// The socket of the connection req came on; -1 when not found. cpp-httplib 0.11.4 gives handlers no
// access to it (0.18.5 added Request::is_connection_closed; why its other ways do not fit: docs/serve.md,
// "Cancellation"), so it is found among the process's descriptors by its addresses: the local port, the
// peer's port and address (as cpp-httplib writes them: getnameinfo, numeric). The connection's thread is
// the caller's, so the descriptor stays open meanwhile.
int connection_socket(const httplib::Request & req) {
    std::error_code ec;
    for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        int fd = -1;
        if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc()) continue;
        sockaddr_storage peer{}, local{};
        socklen_t n_peer = sizeof(peer), n_local = sizeof(local);
        if (::getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &n_peer) != 0 ||
            ::getsockname(fd, reinterpret_cast<sockaddr *>(&local), &n_local) != 0) {
            continue;
        }
        const auto port = [](const sockaddr_storage & a) {
            if (a.ss_family == AF_INET) return int(ntohs(reinterpret_cast<const sockaddr_in &>(a).sin_port));
            if (a.ss_family == AF_INET6) return int(ntohs(reinterpret_cast<const sockaddr_in6 &>(a).sin6_port));
            return -1;
        };
        if (port(local) != req.local_port || port(peer) != req.remote_port) continue;
        char host[NI_MAXHOST];
        if (::getnameinfo(reinterpret_cast<const sockaddr *>(&peer), n_peer, host, sizeof(host), nullptr, 0,
                          NI_NUMERICHOST) != 0 ||
            req.remote_addr != host) {
            continue;
        }
        return fd;
    }
    return -1;
}

// Whether the peer closed the connection (or reset it): a peek reads end-of-file or fails. Data the
// client sent meanwhile (a pipelined request) is left where it is.
bool connection_closed(int fd) {
    char c = 0;
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

// One request between its HTTP handler and the engine thread.
struct job {
    api_request api;
    generation_request gen;
    std::vector<std::string> stop;  // stop strings
    bool trim_first_space = false;  // after a lone BOS, as `generate` prints (SentencePiece)
    std::string id;                 // "cmpl-N" / "chatcmpl-N"
    int64_t created = 0;            // Unix seconds

    // Engine thread only.
    size_t gen_id = 0;
    std::string raw;    // the generated text
    size_t posted = 0;  // bytes of raw posted to `text`
    bool stop_hit = false;

    // Shared, under mu.
    std::mutex mu;
    std::condition_variable cv;
    std::string text;  // posted text a stream has not taken yet (non-streaming: all of it)
    bool done = false;
    std::string finish;              // "stop" or "length" when done without error
    std::optional<api_error> error;  // the request failed
    int64_t completion_tokens = 0;
    int64_t reused_tokens = 0;  // prompt tokens whose KV was kept from an earlier request
    json x_hillinfer;
};

}  // namespace detail

using namespace detail;

struct server::impl {
    const model & m;
    context & ctx;
    std::optional<chat_template> tmpl;
    server_params p;
    std::vector<int32_t> chat_stop_ids;
    std::string bos_text, eos_text;
    int64_t model_created = 0;  // /v1/models "created": the model file's modification time, Unix seconds
    httplib::Server http;
    std::thread listener;
    std::atomic<bool> listener_returned{false};  // listen_after_bind() has returned
    std::unique_ptr<prompt_cache_dir> disk;  // --cache-dir; nullptr: none
    batch_generator gen;
    batch_progress cb;

    // Inbox from the handlers, under mu.
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::shared_ptr<job>> inbox, cancels;
    bool accepting = true;
    int64_t in_flight = 0;  // accepted and not finished
    std::atomic<uint64_t> next_id{0};

    // Engine thread only.
    std::unordered_map<size_t, std::shared_ptr<job>> active;  // by generator id

    // Metrics, under metrics_mu.
    std::mutex metrics_mu;
    std::map<int, uint64_t> responses;  // by HTTP status
    uint64_t prompt_tokens = 0, completion_tokens = 0, cancelled = 0, finished = 0;
    std::string engine_metrics;  // the engine's gauges, written by the engine thread

    impl(const model & mm, context & c, std::optional<chat_template> t, const server_params & pp)
        : m(mm),
          ctx(c),
          tmpl(std::move(t)),
          p(pp),
          gen(c, pp.parallel, mm.tokenizer().vocab().eos, pp.prefill_chunk, pp.prefix_reuse) {
        const vocab & v = m.tokenizer().vocab();
        if (tmpl) chat_stop_ids = tmpl->end_of_turn_tokens(v);
        bos_text = v.bos >= 0 ? v.pieces[size_t(v.bos)] : std::string();
        eos_text = v.eos >= 0 ? v.pieces[size_t(v.eos)] : std::string();
        std::error_code ec;
        const auto written = std::filesystem::last_write_time(m.path(), ec);
        model_created = ec ? std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::system_clock::now().time_since_epoch()).count()  // gone: the server's start
                           : std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::file_clock::to_sys(written).time_since_epoch()).count();
        if (!p.cache_dir.empty()) {
            disk = std::make_unique<prompt_cache_dir>(p.cache_dir, p.cache_dir_limit_bytes);
            gen.set_prompt_cache(disk.get());
        }
        cb.on_token = [this](size_t id, int32_t token) { on_token(id, token); };
        cb.on_done = [this](size_t id, const generation_result & r) { on_done(id, r); };
        routes();
        update_engine_metrics();
    }

    // --- engine thread ---------------------------------------------------------------------------

    // Posts the text of j that can no longer change: up to a stop string (which ends the request), and,
    // unless final, short of what could be the start of a stop string or an incomplete UTF-8 character.
    void post(job & j, bool final) {
        size_t end = j.raw.size();
        if (!j.stop_hit) {
            for (const std::string & s : j.stop) {
                const size_t from = j.posted >= s.size() ? j.posted - s.size() + 1 : 0;
                const size_t pos = j.raw.find(s, from);
                if (pos != std::string::npos && pos < end) {
                    end = pos;
                    j.stop_hit = true;
                }
            }
            if (j.stop_hit) {
                j.raw.resize(end);
                gen.cancel(j.gen_id, "stop", cb);
            } else if (!final) {
                for (const std::string & s : j.stop) {
                    for (size_t k = std::min(s.size() - 1, j.raw.size()); k > 0; --k) {
                        if (j.raw.compare(j.raw.size() - k, k, s, 0, k) == 0) {
                            end = std::min(end, j.raw.size() - k);
                            break;
                        }
                    }
                }
                end = utf8_complete_prefix(std::string_view(j.raw).substr(0, end));
            }
        }
        if (end <= j.posted) return;
        std::lock_guard lk(j.mu);
        j.text.append(j.raw, j.posted, end - j.posted);
        j.posted = end;
        j.cv.notify_all();
    }

    void on_token(size_t id, int32_t token) {
        job & j = *active.at(id);
        std::string piece = m.tokenizer().token_to_piece(token);
        if (j.raw.empty() && j.trim_first_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
        j.raw += piece;
        post(j, false);
    }

    json x_hillinfer(const generation_result & r) const {
        // This request's decode steps only; null when it had none (one token or none generated).
        const json share = r.n_context > 0 ? json(double(r.n_attended) / double(r.n_context)) : json(nullptr);
        return {{"policy", std::string(ctx.policy().name())},
                {"alpha", ctx.policy().uses_scores() ? json(ctx.params().policy.alpha) : json(nullptr)},
                {"attended_share", share},
                {"reused_tokens", r.reused_tokens},
                {"cache_dir_tokens", r.disk_tokens},
                {"prefill_s", r.prefill_s},
                {"decode_s", r.decode_s},
                {"max_batch", r.max_batch}};
    }

    void on_done(size_t id, const generation_result & r) {
        const auto it = active.find(id);
        HILL_ASSERT(it != active.end());
        const std::shared_ptr<job> jp = it->second;
        active.erase(it);
        job & j = *jp;
        if (r.stop != "error" && r.stop != "shutdown") post(j, true);
        {
            std::lock_guard lk(metrics_mu);
            prompt_tokens += uint64_t(r.prompt_tokens);
            completion_tokens += r.ids.size();
            ++finished;
            if (r.stop == "cancelled") ++cancelled;
        }
        {
            std::lock_guard lk(mu);
            --in_flight;
        }
        std::lock_guard lk(j.mu);
        j.completion_tokens = int64_t(r.ids.size());
        j.reused_tokens = r.reused_tokens;
        j.x_hillinfer = x_hillinfer(r);
        if (r.stop == "error") {
            j.error = api_error{500, fmt::format("the generation failed: {}", r.error), "server_error", "",
                                "generation_failed"};
        } else if (r.stop == "shutdown") {
            j.error =
                api_error{503, "the server shut down before the request finished", "server_error", "", "shutting_down"};
        } else {
            j.finish = r.stop == "length" || r.stop == "context" ? "length" : "stop";
        }
        j.done = true;
        j.cv.notify_all();
    }

    void update_engine_metrics() {
        int64_t seq_tokens = 0, hot = 0;
        for (int s = 0; s < ctx.n_seq(); ++s) seq_tokens += ctx.n_past(s);
        for (int il = 0; il < ctx.model().hp().n_layer; ++il) hot += ctx.cells().n_hot(il);
        const uint64_t tl_bytes = ctx.layout().token_layer_bytes();
        uint64_t att = 0, att_hot = 0;
        for (const step_layer_stats & L : ctx.decode_stats().layers) {
            att += L.n_attended;
            att_hot += L.n_attended_hot;
        }
        const csd::device_counters dc = ctx.storage().counters();
        const batch_generator::totals & t = gen.last_totals();
        size_t n_inbox = 0;
        {
            std::lock_guard lk(mu);
            n_inbox = inbox.size();
        }
        std::string out;
        const auto gauge = [&](const char * name, const char * help, const char * type, const std::string & value,
                               const char * labels = "") {
            out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{} {}\n", name, help, name, type, name, labels, value);
        };
        gauge("hillinfer_queue_length", "requests waiting for a sequence", "gauge",
              std::to_string(gen.n_waiting() + n_inbox));
        gauge("hillinfer_requests_running", "requests prefilling or decoding", "gauge",
              std::to_string(gen.n_running()));
        gauge("hillinfer_decode_steps_total", "batch decode steps", "counter", std::to_string(t.steps));
        gauge("hillinfer_decode_tokens_total", "tokens decoded by them", "counter", std::to_string(t.tokens));
        gauge("hillinfer_decode_seconds_total", "wall time of the decode steps", "counter",
              fmt::format("{:.6f}", t.decode_s));
        gauge("hillinfer_prefill_seconds_total", "wall time of the prefill chunks", "counter",
              fmt::format("{:.6f}", t.prefill_s));
        gauge("hillinfer_step_seconds_last", "the last engine step (prefill chunk + decode step)", "gauge",
              fmt::format("{:.6f}", t.last_step_s));
        gauge("hillinfer_step_seconds_max", "the longest engine step", "gauge", fmt::format("{:.6f}", t.max_step_s));
        const int64_t kept = gen.n_kept_tokens();
        gauge("hillinfer_kv_tokens", "tokens in the KV of every sequence", "gauge", std::to_string(seq_tokens));
        gauge("hillinfer_kv_tokens_running", "tokens in the KV of running requests", "gauge",
              std::to_string(seq_tokens - kept));
        gauge("hillinfer_kv_tokens_kept", "tokens in the KV of finished requests, kept for prefix reuse", "gauge",
              std::to_string(kept));
        out +=
            "# HELP hillinfer_kv_bytes KV bytes (K and V, all layers) by tier: hot pool copies, and tokens only in "
            "the cold pool\n# TYPE hillinfer_kv_bytes gauge\n";
        out += fmt::format("hillinfer_kv_bytes{{tier=\"hot\"}} {}\n", uint64_t(hot) * tl_bytes);
        out += fmt::format("hillinfer_kv_bytes{{tier=\"cold\"}} {}\n", uint64_t(ctx.n_cold_cells()) * tl_bytes);
        gauge("hillinfer_hot_share", "share of the attended tokens read from the hot pool", "gauge",
              fmt::format("{:.6f}", att > 0 ? double(att_hot) / double(att) : 0.0));
        gauge("hillinfer_storage_link_bytes_total", "bytes over the storage device's link (scoring and KV)", "counter",
              std::to_string(dc.link_score_bytes + dc.link_kv_bytes));
        gauge("hillinfer_storage_internal_read_bytes_total", "bytes read inside the storage device", "counter",
              std::to_string(dc.internal_read_bytes));
        if (disk) {
            const prompt_cache_dir::counters & c = disk->stats();
            gauge("hillinfer_prompt_cache_hits_total", "requests that loaded a prefix from --cache-dir", "counter",
                  std::to_string(c.hits));
            gauge("hillinfer_prompt_cache_hit_tokens_total", "prompt tokens loaded from --cache-dir", "counter",
                  std::to_string(c.hit_tokens));
            gauge("hillinfer_prompt_cache_saves_total", "entries written to --cache-dir", "counter",
                  std::to_string(c.saves));
            gauge("hillinfer_prompt_cache_evictions_total",
                  "entries removed from --cache-dir: least recently used, or superseded by a longer one", "counter",
                  std::to_string(c.evictions));
            gauge("hillinfer_prompt_cache_errors_total",
                  "failed saves, and entries removed because they failed verification", "counter",
                  std::to_string(c.errors));
            gauge("hillinfer_prompt_cache_entries", "entries in --cache-dir", "gauge",
                  std::to_string(disk->n_entries()));
            gauge("hillinfer_prompt_cache_bytes", "bytes of the entries in --cache-dir", "gauge",
                  std::to_string(disk->size_bytes()));
        }
        std::lock_guard lk(metrics_mu);
        engine_metrics = std::move(out);
    }

    void engine_loop(const std::function<bool()> & stop_requested) {
        bool stopping = false;
        auto deadline = std::chrono::steady_clock::now();
        for (;;) {
            std::vector<std::shared_ptr<job>> incoming, cancel;
            {
                std::lock_guard lk(mu);
                incoming.swap(inbox);
                cancel.swap(cancels);
            }
            for (auto & j : incoming) {
                j->gen_id = gen.submit(j->gen);
                active[j->gen_id] = j;
            }
            for (auto & j : cancel) {
                const auto it = active.find(j->gen_id);
                if (it != active.end() && it->second == j) gen.cancel(j->gen_id, "cancelled", cb);
            }
            if (!stopping && stop_requested()) {
                stopping = true;
                deadline =
                    std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(p.shutdown_wait_s * 1000));
                std::lock_guard lk(mu);
                accepting = false;
                log_info("serve: stopping; {} request{} to finish (at most {:.0f} s)", in_flight, in_flight == 1 ? "" : "s",
                         p.shutdown_wait_s);
            }
            if (stopping) {
                bool inbox_empty = false;
                {
                    std::lock_guard lk(mu);
                    inbox_empty = inbox.empty();
                }
                if (inbox_empty && (gen.idle() || std::chrono::steady_clock::now() >= deadline)) {
                    gen.stop_all("shutdown", cb);
                    gen.save_kept();  // a conversation that comes back after a restart
                    break;
                }
            }
            if (gen.idle()) {
                if (!incoming.empty() || !cancel.empty()) update_engine_metrics();
                std::unique_lock lk(mu);
                cv.wait_for(lk, std::chrono::milliseconds(50), [&] { return !inbox.empty() || !cancels.empty(); });
                continue;
            }
            try {
                gen.step(cb);
            } catch (const error & e) {
                // Only an interrupt reaches here (a storage device with a stop hook): end what runs.
                log_warn("serve: {}", e.what());
                gen.stop_all("error", cb);
            }
            update_engine_metrics();
        }
        update_engine_metrics();
    }

    // Stops the listener thread and joins it (nothing when it was not started). cpp-httplib 0.11.4's
    // Server::stop() closes the listening socket only once listen_after_bind() has set is_running(), its
    // first step on the listener thread; before that it does nothing, and the listener then accepts
    // connections forever (the join never returns). A stop requested during start-up comes that early (the
    // engine loop returns at once), so wait, in 1 ms sleeps, until the listener runs or has returned (the
    // time the thread takes to start), then stop it once. Once, not in a loop: a second stop() while the
    // listener winds down (is_running() still true, the socket already closed) would fail the assertion in
    // stop() of a cpp-httplib built with assertions on.
    void stop_listener() {
        if (!listener.joinable()) return;
        while (!http.is_running() && !listener_returned) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        http.stop();  // when the listener has returned already: nothing (is_running() is false)
        listener.join();
    }

    // --- handler threads -------------------------------------------------------------------------

    void cancel(const std::shared_ptr<job> & j) {
        std::lock_guard lk(mu);
        cancels.push_back(j);
        cv.notify_all();
    }

    bool authorized(const httplib::Request & req) const {
        return p.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + p.api_key;
    }

    // What read_body() drops of a body over the limit before it stops reading: the limit, and at least
    // 16 MiB (a few milliseconds of reading).
    size_t drain_bytes() const { return std::max(p.body_limit_bytes, size_t(16) << 20); }

    api_error body_too_large() const {
        return {413,
                fmt::format("the request body is larger than the limit of {} bytes (--body-limit)", p.body_limit_bytes),
                "invalid_request_error", "", "body_too_large"};
    }

    // Reads the body of a completion request into `body`, whatever its Content-Type: the completions read
    // their bodies through a content reader because cpp-httplib 0.11.4 reads every other body itself and
    // answers 413 to one sent as application/x-www-form-urlencoded (curl -d's default) of more than
    // 8192 bytes (CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH, compiled into Debian's libcpp-httplib:
    // defining it here would change nothing). The limit is p.body_limit_bytes, with or without a
    // Content-Length (cpp-httplib checks only that header; a chunked body it reads whole) and after
    // Content-Encoding's decompression; beyond it the rest is read and dropped, as cpp-httplib does with a
    // Content-Length over the limit, so that the connection stays in step — up to drain_bytes() more:
    // then reading stops and the connection is closed after the answer, so that a body that never ends
    // does not hold the handler thread (a Content-Length beyond that is refused unread: routes()). The
    // error to answer, if any.
    std::optional<api_error> read_body(const httplib::Request & req, httplib::Response & res,
                                       const httplib::ContentReader & read, std::string & body) const {
        if (req.is_multipart_form_data()) {
            read([](const httplib::MultipartFormData &) { return true; }, [](const char *, size_t) { return true; });
            if (res.status == 413) return body_too_large();
            return api_error{415,
                             "the request body is multipart/form-data; send the request as JSON (Content-Type: "
                             "application/json)",
                             "invalid_request_error", "", "unsupported_media_type"};
        }
        bool over = false;
        size_t dropped = 0;
        const bool ok = read([&](const char * data, size_t n) {
            over = over || n > p.body_limit_bytes - body.size();
            if (!over) {
                body.append(data, n);
                return true;
            }
            dropped += n;
            return dropped <= drain_bytes();
        });
        if (over && !ok) res.set_header("Connection", "close");
        if (over || res.status == 413) return body_too_large();  // 413: a Content-Length over the limit
        if (!ok) {
            return api_error{400,
                             "the request body could not be read (a malformed chunked encoding or compressed body, "
                             "or the connection closed before its end)",
                             "invalid_request_error", "", "invalid_body"};
        }
        return std::nullopt;
    }

    // The job of a valid request (its body), or the error to answer.
    std::variant<std::shared_ptr<job>, api_error> make_job(const std::string & body, api_kind kind) {
        auto parsed = parse_api_request(body, kind);
        if (auto * e = std::get_if<api_error>(&parsed)) return *e;
        auto j = std::make_shared<job>();
        j->api = std::move(std::get<api_request>(parsed));
        const api_request & a = j->api;
        if (!a.model.empty() && a.model != p.model_id) {
            return api_error{404,
                             fmt::format("the model '{}' does not exist; this server serves '{}'", a.model, p.model_id),
                             "invalid_request_error", "model", "model_not_found"};
        }
        const tokenizer & tok = m.tokenizer();
        const vocab & v = tok.vocab();
        std::vector<int32_t> ids;
        const char * prompt_param = kind == api_kind::chat ? "messages" : "prompt";
        if (kind == api_kind::chat) {
            if (!tmpl) {
                return api_error{400, "the model has no chat template; start the server with --chat-template NAME",
                                 "invalid_request_error", "messages", "no_chat_template"};
            }
            try {
                ids = tok.encode_with_special(tmpl->format(a.messages, true, bos_text, eos_text), v.add_bos);
            } catch (const error & e) {
                return api_error{400, e.what(), "invalid_request_error", "messages", "invalid_value"};
            }
            j->gen.stop_tokens = chat_stop_ids;
        } else {
            ids = tok.encode(a.prompt, v.add_bos);
        }
        if (ids.empty()) {
            return api_error{400, "the prompt is empty and the model has no BOS token to start from",
                             "invalid_request_error", prompt_param, "invalid_value"};
        }
        const int64_t n_ctx = ctx.n_ctx();
        if (int64_t(ids.size()) > n_ctx) {
            return api_error{
                400, fmt::format("the prompt is {} tokens, longer than the context of {} tokens", ids.size(), n_ctx),
                "invalid_request_error", prompt_param, "context_length_exceeded"};
        }
        // At most n_ctx - n_prompt + 1 tokens: the last one is sampled when the context is full.
        const int64_t room = n_ctx - int64_t(ids.size()) + 1;
        if (a.max_tokens && *a.max_tokens > room) {
            return api_error{
                400,
                fmt::format("max_tokens is {}, but the prompt of {} tokens leaves room for {} tokens in the "
                            "context of {} tokens",
                            *a.max_tokens, ids.size(), room, n_ctx),
                "invalid_request_error", "max_tokens", "context_length_exceeded"};
        }
        j->gen.n_predict = int32_t(a.max_tokens             ? *a.max_tokens
                                   : kind == api_kind::chat ? room
                                                            : std::min<int64_t>(room, p.default_max_tokens));
        sampler_params & sp = j->gen.sampling;
        sp.temperature = a.temperature;
        sp.top_p = a.top_p;
        sp.top_k = 0;
        sp.min_p = 0.0f;
        sp.repeat_penalty = 1.0f;
        sp.seed = a.seed ? *a.seed : std::random_device{}();
        j->trim_first_space = ids.size() == 1 && ids[0] == v.bos;
        j->gen.prompt = std::move(ids);
        j->stop = a.stop;
        const uint64_t n = next_id.fetch_add(1);
        j->id = fmt::format("{}-{}", kind == api_kind::chat ? "chatcmpl" : "cmpl", n);
        j->created = int64_t(
            std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                .count());
        return j;
    }

    json usage(const job & j) const {
        const auto n_prompt = int64_t(j.gen.prompt.size());
        return {{"prompt_tokens", n_prompt},
                {"completion_tokens", j.completion_tokens},
                {"total_tokens", n_prompt + j.completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", j.reused_tokens}}}};
    }

    // role: the chat stream's first chunk, which names the role (with empty content).
    json chunk(const job & j, const std::string & delta, const json & finish, bool role) const {
        json choice = {{"index", 0}, {"finish_reason", finish}};
        if (j.api.kind == api_kind::chat) {
            json d = json::object();
            if (role) d["role"] = "assistant";
            if (!delta.empty() || role) d["content"] = delta;
            choice["delta"] = d;
        } else {
            choice["text"] = delta;
            choice["logprobs"] = nullptr;
        }
        return {{"id", j.id},
                {"object", j.api.kind == api_kind::chat ? "chat.completion.chunk" : "text_completion"},
                {"created", j.created},
                {"model", p.model_id},
                {"choices", json::array({choice})}};
    }

    void handle(const httplib::Request & req, httplib::Response & res, const httplib::ContentReader & read,
                api_kind kind) {
        std::string body;
        if (auto e = read_body(req, res, read, body)) return send_error(res, *e);
        auto made = make_job(body, kind);
        if (auto * e = std::get_if<api_error>(&made)) return send_error(res, *e);
        std::shared_ptr<job> j = std::get<std::shared_ptr<job>>(made);
        {
            std::lock_guard lk(mu);
            if (!accepting) {
                res.set_header("Retry-After", "5");
                return send_error(res, {503, "the server is shutting down", "server_error", "", "shutting_down"});
            }
            if (in_flight >= int64_t(p.parallel) + p.queue) {
                res.set_header("Retry-After", "1");
                return send_error(res,
                                  {503,
                                   fmt::format("the server is busy: {} requests running and waiting (--parallel {}, "
                                               "--queue {}); retry later",
                                               in_flight, p.parallel, p.queue),
                                   "server_error", "", "queue_full"});
            }
            ++in_flight;
            inbox.push_back(j);
            cv.notify_all();
        }
        if (j->api.stream) return stream(j, res);
        // A client that goes away cancels the request: its connection is watched while it waits.
        const int fd = connection_socket(req);
        std::unique_lock lk(j->mu);
        bool cancelled = false;
        while (!j->cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return j->done; })) {
            if (fd >= 0 && !cancelled && connection_closed(fd)) {
                lk.unlock();
                cancel(j);
                cancelled = true;
                lk.lock();
            }
        }
        if (j->error) return send_error(res, *j->error);
        json choice = {{"index", 0}, {"finish_reason", j->finish}};
        if (kind == api_kind::chat) {
            choice["message"] = {{"role", "assistant"}, {"content", j->text}};
        } else {
            choice["text"] = j->text;
            choice["logprobs"] = nullptr;
        }
        const json out = {{"id", j->id},
                          {"object", kind == api_kind::chat ? "chat.completion" : "text_completion"},
                          {"created", j->created},
                          {"model", p.model_id},
                          {"choices", json::array({choice})},
                          {"usage", usage(*j)},
                          {"x_hillinfer", j->x_hillinfer}};
        res.set_content(dump(out), "application/json");
    }

    void stream(const std::shared_ptr<job> & j, httplib::Response & res) {
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider("text/event-stream", [this, j](size_t, httplib::DataSink & sink) {
            const auto event = [&](const json & e) {
                const std::string s = "data: " + dump(e) + "\n\n";
                return sink.write(s.data(), s.size());
            };
            // A chat stream starts with the role alone (empty content), as OpenAI's does, before any text.
            if (j->api.kind == api_kind::chat && !event(chunk(*j, "", nullptr, true))) {
                cancel(j);
                return false;
            }
            for (;;) {
                std::string delta;
                bool done = false;
                {
                    std::unique_lock lk(j->mu);
                    j->cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return !j->text.empty() || j->done; });
                    delta.swap(j->text);
                    done = j->done;
                }
                if (done && j->error) {
                    json e = json::parse(error_body(*j->error));
                    const std::string end = "data: [DONE]\n\n";
                    if (event(e)) sink.write(end.data(), end.size());
                    sink.done();
                    return true;
                }
                if (!delta.empty()) {
                    if (!event(chunk(*j, delta, nullptr, false))) {
                        cancel(j);
                        return false;
                    }
                } else if (!done && !sink.is_writable()) {
                    cancel(j);
                    return false;
                }
                if (done) {
                    json last = chunk(*j, "", j->finish, false);
                    last["x_hillinfer"] = j->x_hillinfer;
                    bool ok = event(last);
                    if (ok && j->api.include_usage) {
                        json u = chunk(*j, "", nullptr, false);
                        u["choices"] = json::array();
                        u["usage"] = usage(*j);
                        ok = event(u);
                    }
                    const std::string end = "data: [DONE]\n\n";
                    if (ok) sink.write(end.data(), end.size());
                    sink.done();
                    return true;
                }
            }
        });
    }

    void routes() {
        http.set_payload_max_length(p.body_limit_bytes);
        const auto read_timeout_us = int64_t(p.read_timeout_s * 1e6);
        http.set_read_timeout(read_timeout_us / 1000000, read_timeout_us % 1000000);
        http.set_keep_alive_timeout(read_timeout_us / 1000000);
        // SO_REUSEADDR only: cpp-httplib's default also sets SO_REUSEPORT, which would let a second server
        // bind the same port and take half of the connections instead of failing to start.
        http.set_socket_options([](int sock) {
            int yes = 1;
            ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
        });
        // Every stream holds a handler thread: room for all the running and waiting requests, and a few more.
        const size_t n_threads = size_t(p.parallel + p.queue + 4);
        http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
        http.set_pre_routing_handler([this](const httplib::Request & req, httplib::Response & res) {
            if (req.path.rfind("/v1/", 0) == 0 && !authorized(req)) {
                send_error(res, {401, "missing or wrong API key: send the header 'Authorization: Bearer KEY'",
                                 "invalid_request_error", "", "invalid_api_key"});
                return httplib::Server::HandlerResponse::Handled;
            }
            // The body's framing, checked before any of it is read (RFC 9112 §6): a Content-Length that is
            // not one decimal number (cpp-httplib would read "-5" or "99…9" as a huge length and drop that
            // many bytes), conflicting ones, or one beside Transfer-Encoding is a 400; a declared body larger
            // than the limit and what read_body() drains past it, a 413. Either way the connection is closed
            // after the answer (its bytes are not a next request). A POST with neither header has no body
            // (cpp-httplib would wait for the connection to close): the empty body's 400, at once.
            const auto refuse = [&res](const api_error & e) {
                send_error(res, e);
                res.set_header("Connection", "close");
                return httplib::Server::HandlerResponse::Handled;
            };
            const std::string length = req.get_header_value("Content-Length");
            const size_t n_lengths = req.get_header_value_count("Content-Length");
            if (n_lengths > 0) {
                uint64_t n = 0;
                const auto [end, ec] = std::from_chars(length.data(), length.data() + length.size(), n);
                bool same = true;
                for (size_t i = 1; i < n_lengths; ++i)
                    same = same && req.get_header_value("Content-Length", i) == length;
                if (length.empty() || ec != std::errc() || end != length.data() + length.size() || !same ||
                    req.has_header("Transfer-Encoding")) {
                    return refuse({400,
                                   !same ? "the request has Content-Length headers that differ"
                                   : req.has_header("Transfer-Encoding")
                                       ? "the request has both Content-Length and Transfer-Encoding: send one of them"
                                       : fmt::format("the Content-Length header '{}' is not a number of bytes", length),
                                   "invalid_request_error", "", "invalid_body"});
                }
                if (n > uint64_t(p.body_limit_bytes) + uint64_t(drain_bytes())) return refuse(body_too_large());
            } else if (req.method == "POST" && !req.has_header("Transfer-Encoding")) {
                return refuse(
                    {400,
                     "the request has no body (neither Content-Length nor Transfer-Encoding); expected a JSON object",
                     "invalid_request_error", "", "invalid_body"});
            }
            return httplib::Server::HandlerResponse::Unhandled;
        });
        http.set_error_handler([this](const httplib::Request & req, httplib::Response & res) {
            if (!res.body.empty()) return;
            if (res.status == 413 && !req.body.empty() &&
                req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0) {
                // A path without a content reader (not a completion), whose body cpp-httplib read whole and
                // then refused: a form-urlencoded one over its own 8192-byte cap (read_body()).
                send_error(res, {413,
                                 "a request body sent as application/x-www-form-urlencoded is limited to 8192 bytes "
                                 "by the HTTP layer; send it with Content-Type: application/json",
                                 "invalid_request_error", "", "body_too_large"});
            } else if (res.status == 413) {
                send_error(res, body_too_large());
            } else if (res.status == 404) {
                send_error(res, {404, fmt::format("no endpoint {} {}", req.method, req.path), "invalid_request_error",
                                 "", "not_found"});
            } else {
                send_error(res, {res.status, fmt::format("HTTP {}", res.status), "invalid_request_error", "", ""});
            }
        });
        http.set_logger([this](const httplib::Request &, const httplib::Response & res) {
            std::lock_guard lk(metrics_mu);
            ++responses[res.status];
        });
        // 503 while the server drains after SIGINT/SIGTERM (as the completions then answer): a load balancer
        // or an orchestrator's readiness probe takes it out of rotation instead of sending it requests that
        // would be refused.
        http.Get("/health", [this](const httplib::Request &, httplib::Response & res) {
            bool up = false;
            {
                std::lock_guard lk(mu);
                up = accepting;
            }
            if (!up) res.status = 503;
            res.set_content(up ? R"({"status":"ok"})" : R"({"status":"shutting_down"})", "application/json");
        });
        http.Get("/v1/models", [this](const httplib::Request &, httplib::Response & res) {
            const json j = {
                {"object", "list"},
                {"data",
                 json::array({{{"id", p.model_id}, {"object", "model"}, {"created", model_created},
                               {"owned_by", "hillinfer"}}})}};
            res.set_content(dump(j), "application/json");
        });
        http.Get("/metrics", [this](const httplib::Request &, httplib::Response & res) {
            std::string out;
            std::lock_guard lk(metrics_mu);
            out +=
                "# HELP hillinfer_http_responses_total HTTP responses by status\n# TYPE hillinfer_http_responses_total "
                "counter\n";
            for (const auto & [status, n] : responses)
                out += fmt::format("hillinfer_http_responses_total{{code=\"{}\"}} {}\n", status, n);
            out += fmt::format(
                "# HELP hillinfer_requests_finished_total generation requests ended\n# TYPE "
                "hillinfer_requests_finished_total counter\nhillinfer_requests_finished_total {}\n",
                finished);
            out += fmt::format(
                "# HELP hillinfer_requests_cancelled_total requests whose client went away\n# TYPE "
                "hillinfer_requests_cancelled_total counter\nhillinfer_requests_cancelled_total {}\n",
                cancelled);
            out += fmt::format(
                "# HELP hillinfer_prompt_tokens_total prompt tokens prefilled\n# TYPE "
                "hillinfer_prompt_tokens_total counter\nhillinfer_prompt_tokens_total {}\n",
                prompt_tokens);
            out += fmt::format(
                "# HELP hillinfer_completion_tokens_total tokens generated\n# TYPE "
                "hillinfer_completion_tokens_total counter\nhillinfer_completion_tokens_total {}\n",
                completion_tokens);
            out += engine_metrics;
            res.set_content(out, "text/plain; version=0.0.4");
        });
        http.Post("/v1/completions",
                  [this](const httplib::Request & req, httplib::Response & res, const httplib::ContentReader & read) {
                      handle(req, res, read, api_kind::completion);
                  });
        http.Post("/v1/chat/completions",
                  [this](const httplib::Request & req, httplib::Response & res, const httplib::ContentReader & read) {
                      handle(req, res, read, api_kind::chat);
                  });
    }
};

server::server(const model & m, context & ctx, std::optional<chat_template> tmpl, const server_params & p)
    : impl_(std::make_unique<impl>(m, ctx, std::move(tmpl), p)) {}

server::~server() {
    impl_->stop_listener();
}

int server::bind() {
    impl & s = *impl_;
    const int port =
        s.p.port == 0 ? s.http.bind_to_any_port(s.p.host) : (s.http.bind_to_port(s.p.host, s.p.port) ? s.p.port : -1);
    if (port < 0)
        fail_usage("cannot listen on {}:{} (address in use, or not an address of this machine)", s.p.host, s.p.port);
    return port;
}

void server::run(const std::function<bool()> & stop_requested) {
    impl & s = *impl_;
    s.listener = std::thread([&s] {
        s.http.listen_after_bind();
        s.listener_returned = true;
    });
    s.engine_loop(stop_requested);
    s.stop_listener();
}

}  // namespace hill::server
