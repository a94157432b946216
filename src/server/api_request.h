// The OpenAI API requests `hillinfer serve` takes (server/server.h): the JSON bodies of
// POST /v1/completions and POST /v1/chat/completions parsed and validated into plain values, and the
// OpenAI-style error object. No engine state: this is what the request fuzzer drives
// (tests/fuzz/fuzz_api_request.cpp).
//
// Fields (OpenAI API reference, "Completions" and "Chat"; others are ignored, as OpenAI-compatible
// servers do, so that clients sending logprobs, user, ... still work):
//   model        string, optional (the server checks it names its model: 404 otherwise)
//   prompt       completions: a string, or an array of exactly one string
//   messages     chat: a non-empty array of {role, content}; role system | developer (= system, first
//                message only), user, assistant; content a string or an array of {type: "text", text}
//   max_tokens   integer >= 0 (chat also max_completion_tokens); the server checks it against the context
//   temperature  number in [0, 2] (default 1; 0: greedy)
//   top_p        number in (0, 1] (default 1)
//   seed         integer >= 0
//   stop         a string or an array of at most 4 non-empty strings
//   n            1 only
//   stream       boolean; stream_options {include_usage: boolean}
// Errors: 400 invalid_request_error naming the field (`param`) and what was expected.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tokenizer/chat_template.h"

namespace hill::server {

// An OpenAI-style error: HTTP status and the body {"error": {"message", "type", "param", "code"}}.
struct api_error {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // the request field at fault; "" for none (null in the body)
    std::string code;   // a short machine-readable code; "" for none (null)
};
// The JSON body of e.
std::string error_body(const api_error & e);

enum class api_kind { completion, chat };

struct api_request {
    api_kind kind = api_kind::completion;
    std::string model;                   // "" when absent
    std::string prompt;                  // completion
    std::vector<chat_message> messages;  // chat (roles "system", "user", "assistant")
    std::optional<int64_t> max_tokens;   // absent: the server's default
    float temperature = 1.0f;
    float top_p = 1.0f;
    std::optional<uint64_t> seed;  // absent: a random one
    std::vector<std::string> stop;
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage: a last chunk with usage
};

// Parses and validates a request body of `kind`. Returns the request or the 400 error (never throws
// on any input).
std::variant<api_request, api_error> parse_api_request(std::string_view body, api_kind kind);

// The length of the longest proper prefix of `text` that is whole UTF-8 sequences: text minus an
// incomplete sequence at its end (a token may end inside a character; the next one completes it).
size_t utf8_complete_prefix(std::string_view text);

}  // namespace hill::server
