// `hillinfer serve`: the OpenAI HTTP API over the engine's batches (DESIGN.md §8; docs/serve.md).
//
// Threads: cpp-httplib's pool runs the HTTP handlers; one engine thread (the caller of run()) owns the
// context and the batch generator (engine/batch_generator.h), which are not thread-safe. A handler
// validates and tokenizes its request, then hands it to the engine thread through a bounded inbox
// (full: 503 with Retry-After) and waits on the request's own channel, where the engine thread posts
// the text as it is generated and the end. Requests join and leave the decode batch at step
// boundaries; a new prompt is prefilled prefill_chunk tokens per step between the running streams'
// decode steps. A finished request's sequence keeps its KV while its slot is free, and a request whose
// prompt starts with its tokens (the next turn of a conversation) prefills only the rest
// (engine/batch_generator.h, prefix reuse). A streaming client that goes away (a failed write of its event stream)
// cancels its request: the engine thread ends it at the next step boundary and frees its KV; a
// non-streaming one is cancelled the same way when its connection is closed while it waits (polled
// every 100 ms). With cache_dir, KV that a sequence would drop is saved to the on-disk prompt cache
// and a prompt with a longer prefix there loads it (engine/batch_generator.h); at shutdown the kept
// sequences are saved too.
//
// Endpoints: POST /v1/completions, POST /v1/chat/completions (stream: server-sent events ending with
// "data: [DONE]"), GET /v1/models, GET /health (503 once stopping), GET /metrics (Prometheus text).
// Errors are OpenAI-style JSON (server/api_request.h): 400 bad request (naming the field), 401 missing or
// wrong API key, 404 unknown model or path, 413 body over the limit (any Content-Type, chunked too), 415 a
// multipart body, 503 queue full or shutting down (Retry-After), 500 a failure of that request's
// generation (a storage fault; the others go on).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/context.h"
#include "tokenizer/chat_template.h"

namespace hill::server {

struct server_params {
    std::string host = "127.0.0.1";
    int port = 8080;      // 0: any free port (bind() returns it)
    int parallel = 4;     // sequences decoding at once (<= the context's n_seq)
    int queue = 64;       // requests waiting for a sequence at most; more: 503
    std::string api_key;  // "": none required; else "Authorization: Bearer KEY" on /v1/*
    size_t body_limit_bytes = 1 << 20;
    int32_t prefill_chunk = 256;       // prompt tokens prefilled per step (0: whole prompts)
    bool prefix_reuse = true;          // finished requests keep their KV for a returning conversation
    int32_t default_max_tokens = 256;  // completions without max_tokens (chat: until the end of the turn)
    double shutdown_wait_s = 30.0;     // stop(): how long running streams may take to finish
    // How long a connection may stay silent: between the bytes of a request, and (in whole seconds,
    // cpp-httplib's unit; 0: about 10 ms) between requests on a kept-alive connection; then it is closed.
    // cpp-httplib's default; the HTTP fuzzer (tests/fuzz/fuzz_http.cpp) sets a few milliseconds.
    double read_timeout_s = 5.0;
    std::string model_id;                // the name /v1/models lists and requests may give
    std::string cache_dir;               // the on-disk prompt cache (engine/prompt_cache_dir.h); "": none
    uint64_t cache_dir_limit_bytes = 0;  // its size limit (0: none), LRU-evicted
};

class server {
public:
    // tmpl: the chat template (nullopt: /v1/chat/completions answers 400). ctx: every sequence empty, its
    // storage device without a stop_requested hook (shutdown lets running streams finish).
    server(const model & m, context & ctx, std::optional<chat_template> tmpl, const server_params & p);
    ~server();
    server(const server &) = delete;
    server & operator=(const server &) = delete;

    // Binds host:port. Returns the port. Errors: the address cannot be bound (exit_code::usage, naming it).
    int bind();
    // Serves until stop_requested() turns true (polled every 50 ms): then refuses new requests (503),
    // lets the running and waiting ones finish for at most shutdown_wait_s, ends the rest, and returns
    // once the listener stopped. Runs the engine on the calling thread (the context's owner).
    void run(const std::function<bool()> & stop_requested);

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace hill::server
