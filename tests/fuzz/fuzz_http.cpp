// libFuzzer target: raw bytes of HTTP requests into `hillinfer serve`'s server (server/server.h). Once per
// process a tiny random model (1 layer, context of 48 tokens: a generation is a few milliseconds) is
// served on 127.0.0.1 at a free port, with a chat template and a small body limit (413 is reachable).
// Each input is written as is on a fresh connection (request line, headers, bodies, chunked or not,
// several requests pipelined) and the reply read until the server closes it. The write side stays open:
// cpp-httplib 0.11.4 writes nothing to a client that half-closed (its SocketStream::write peeks and takes
// the end-of-file for a dead peer).
//
// Findings: a crash or sanitizer report in our server code (server.cpp and api_request.cpp are built with
// the fuzz flags; cpp-httplib is Debian's compiled library, libcpp-httplib.so, so its parser runs
// uninstrumented: no coverage feedback from it and ASan sees only its heap use through the interceptors);
// a reply that does not begin with a well-formed status line; a 500 (our server answers 500 only for a
// storage fault, which this setup has none of: cpp-httplib turns an exception escaping a handler into a
// 500); a connection that the server neither answers nor closes within k_reply_timeout_s; a connection
// refused (the server died). Build with the `fuzz` preset (clang); see tests/engine.cmake and
// docs/serve.md "Fuzzing the HTTP side".
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/context.h"
#include "model/synthetic_model.h"
#include "server/server.h"
#include "tokenizer/chat_template.h"

namespace {

// Longer than any reply of this setup takes (at most 48 tokens of a 1-layer model), short enough that a
// hung connection is reported as one, not as libFuzzer's generic timeout.
constexpr int k_reply_timeout_s = 20;

[[noreturn]] void finding(const char * what, const std::string & reply) {
    std::fprintf(stderr, "fuzz_http: %s; reply (%zu bytes): %.512s\n", what, reply.size(), reply.c_str());
    std::abort();
}

// The served model, its context and the server, never destroyed (the server's threads run until exit).
struct served {
    std::unique_ptr<hill::model> m;
    std::unique_ptr<hill::thread_pool> pool;
    std::unique_ptr<hill::context> ctx;
    std::unique_ptr<hill::server::server> srv;
    std::thread engine;
    int port = 0;
};

served * start() {
    using namespace hill;
    log_set_level(log_level::error);  // no line per request on the fuzzer's output
    std::signal(SIGPIPE, SIG_IGN);    // a write to a connection the server closed is an error, not the end
    std::string tmpl = (std::filesystem::temp_directory_path() / "hill-fuzz-http-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) finding("cannot create a temporary directory", "");
    const std::string path = tmpl + "/m.gguf";
    // As `make-model random --chat-template chatml` makes it: the template's control tokens in the vocabulary.
    const chat_template chat = chat_template::named("chatml");
    write_random_model(path, random_model_params{.n_vocab = 300,
                                                 .n_embd = 32,
                                                 .n_ff = 64,
                                                 .n_layer = 1,
                                                 .n_head = 2,
                                                 .n_head_kv = 1,
                                                 .n_ctx = 48,
                                                 .seed = 5,
                                                 .control_tokens = chat.special_tokens(),
                                                 .chat_end_token = std::string(chat.end_of_turn())});
    auto * s = new served;
    s->m = model::load(path);
    std::filesystem::remove_all(tmpl);  // the model is in memory now
    s->pool = std::make_unique<thread_pool>(1);
    // Every sequence's KV in RAM (no budget): the fuzzer exercises the HTTP side, not the tiers.
    s->ctx = std::make_unique<context>(*s->m, context_params{.n_ctx = 48, .n_seq = 2}, *s->pool);
    server::server_params sp;
    sp.port = 0;
    sp.parallel = 2;
    sp.queue = 4;
    sp.body_limit_bytes = 2048;
    sp.default_max_tokens = 4;
    sp.prefill_chunk = 16;
    sp.model_id = "m";
    // The reply's end is the server closing the connection: after the last request, at once (kept alive
    // for 0 s, about 10 ms), or after 50 ms without the rest of an incomplete request.
    sp.read_timeout_s = 0.05;
    s->srv = std::make_unique<server::server>(*s->m, *s->ctx, chat, sp);
    s->port = s->srv->bind();
    s->engine = std::thread([s] { s->srv->run([] { return false; }); });
    return s;
}

// Whether reply begins with "HTTP/1.1 NNN reason\r\n" (cpp-httplib's status line) with a known status.
bool status_line_ok(std::string_view reply, int & status) {
    constexpr std::string_view prefix = "HTTP/1.1 ";
    if (reply.substr(0, prefix.size()) != prefix || reply.size() < prefix.size() + 4) return false;
    const std::string_view code = reply.substr(prefix.size(), 3);
    for (const char c : code) {
        if (c < '0' || c > '9') return false;
    }
    status = (code[0] - '0') * 100 + (code[1] - '0') * 10 + (code[2] - '0');
    if (status < 100 || status > 599 || reply[prefix.size() + 3] != ' ') return false;
    const size_t eol = reply.find("\r\n");
    if (eol == std::string_view::npos) return false;
    for (const char c : reply.substr(prefix.size() + 4, eol - prefix.size() - 4)) {
        if (c < ' ' || c > '~') return false;
    }
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    static served * s = start();
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) finding("cannot create a socket", "");
    const timeval tv{k_reply_timeout_s, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(s->port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<const sockaddr *>(&addr), sizeof(addr)) != 0)
        finding("the server refuses connections", "");
    // A write that fails (the server answered and closed before reading everything, e.g. a 413) ends the
    // writing; the reply is read all the same.
    for (size_t off = 0; off < size;) {
        const ssize_t n = ::send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n <= 0) break;
        off += size_t(n);
    }
    std::string reply;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n > 0) {
            reply.append(buf, size_t(n));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) finding("no end of the reply in time", reply);
        break;  // closed (0) or reset: an RST can discard a reply the server wrote, so the reply is not required
    }
    ::close(fd);
    if (reply.empty()) return 0;
    int status = 0;
    if (!status_line_ok(reply, status)) finding("a malformed status line", reply);
    if (status == 500) finding("a 500: an exception escaped a handler", reply);
    return 0;
}
