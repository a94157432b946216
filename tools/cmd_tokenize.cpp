// hillinfer tokenize -m MODEL (-p TEXT | -f FILE) [--ids] [--no-bos]
//
// Loads only the tokenizer where the model format allows: a GGUF file's `tokenizer.ggml.*`
// metadata (so a vocab-only GGUF such as llama.cpp's ggml-vocab-*.gguf works), a folder's tokenizer
// files (a checkpoint folder, or a folder holding only tokenizer.json / vocab.json + merges.txt /
// encoder.json + vocab.bpe). A llama2.c checkpoint names its vocabulary size in its header, so it is
// loaded whole with --tokenizer.
#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "format/gguf_file.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

namespace hill::cli {

namespace {

// The tokenizer of the model at o.path, and the model when the tokenizer lives in it (llama2.c).
struct loaded_tokenizer {
    std::unique_ptr<model> m;
    std::unique_ptr<tokenizer> own;
    const tokenizer & get() const { return own ? *own : m->tokenizer(); }
};

bool has_gguf_magic(const std::string & path) {
    char magic[4] = {0, 0, 0, 0};
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_usage("cannot open model file '{}'", path);
    const ssize_t n = ::read(fd, magic, 4);
    ::close(fd);
    return n == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

loaded_tokenizer load_tokenizer_of(const model_opts & o) {
    std::error_code ec;
    if (std::filesystem::is_directory(o.path, ec)) {
        if (!o.tokenizer.empty()) {
            fail_usage("--tokenizer is for llama2.c checkpoints; '{}' is a folder and brings its own", o.path);
        }
        return {nullptr, load_tokenizer_folder(o.path)};
    }
    require_regular_file(o.path, "model file");
    if (has_gguf_magic(o.path)) {
        if (!o.tokenizer.empty()) {
            fail_usage("--tokenizer is for llama2.c checkpoints; '{}' is GGUF and has its own", o.path);
        }
        return {nullptr, load_tokenizer(*gguf_file::open(o.path))};
    }
    return {o.load(), nullptr};  // llama2.c: model::load asks for --tokenizer
}

// A token's bytes for a terminal: printable ASCII as is, and valid UTF-8 sequences (a piece may end
// inside a character: those bytes are not valid on their own); '\\', '\'', '\n', '\r', '\t' as C
// escapes; every other byte as \xNN. So "\n" is a newline byte and "\\n" the two characters.
std::string escape_piece(const std::string & s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        const uint8_t c = uint8_t(s[i]);
        if (c == '\\' || c == '\'') {
            out += '\\';
            out += char(c);
            ++i;
            continue;
        }
        if (c == '\n' || c == '\r' || c == '\t') {
            out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
            ++i;
            continue;
        }
        if (c >= 0x20 && c < 0x7f) {
            out += char(c);
            ++i;
            continue;
        }
        // A UTF-8 sequence of len bytes whose first byte is c (RFC 3629: no overlongs, no
        // surrogates, at most U+10FFFF).
        size_t len = 0;
        uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        }
        bool valid = len > 0 && i + len <= s.size();
        for (size_t k = 1; valid && k < len; ++k) {
            const uint8_t b = uint8_t(s[i + k]);
            valid = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
        }
        if (valid) {
            out.append(s, i, len);
            i += len;
        } else {
            out += fmt::format("\\x{:02x}", c);
            ++i;
        }
    }
    return out;
}

}  // namespace

command_fn add_tokenize(CLI::App & app) {
    struct opts_t {
        model_opts model;
        prompt_opts prompt;
        bool ids_only = false;
        bool no_bos = false;
    };
    auto o = std::make_shared<opts_t>();
    auto * sub = app.add_subcommand("tokenize", "print the token ids (and pieces) of a text");
    o->model.add(*sub);
    o->prompt.add(*sub);
    sub->add_flag("--ids", o->ids_only, "print only the ids, space-separated on one line");
    sub->add_flag("--no-bos", o->no_bos, "do not prepend BOS");
    return [o]() {
        const std::string text = o->prompt.read();
        const loaded_tokenizer lt = load_tokenizer_of(o->model);
        const tokenizer & tok = lt.get();
        const std::vector<int32_t> ids = tok.encode(text, !o->no_bos);
        if (o->ids_only) {
            std::string line;
            for (size_t i = 0; i < ids.size(); ++i) line += fmt::format("{}{}", i ? " " : "", ids[i]);
            fmt::print("{}\n", line);
        } else {
            const vocab & v = tok.vocab();
            for (int32_t id : ids) {
                if (v.kinds[size_t(id)] == token_kind::control) {
                    // BOS, EOS, ...: no text; shown by name.
                    fmt::print("{:>7} {} (control)\n", id, v.pieces[size_t(id)]);
                } else {
                    fmt::print("{:>7} '{}'\n", id, escape_piece(tok.token_to_piece(id)));
                }
            }
            fmt::print(stderr, "{} tokens\n", ids.size());
        }
        return 0;
    };
}

}  // namespace hill::cli
