#include "model/model.h"

#include "core/error.h"

#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace hill {

uint64_t hparams::kv_bytes_per_token(ggml_type kv_type) const {
    return 2ull * uint64_t(n_layer) * uint64_t(n_embd_kv()) * ggml_block_bytes(kv_type);
}

std::unique_ptr<model> model::load(const std::string & path, const std::string & tokenizer_path) {
    require_regular_file(path, "model file");
    char magic[4] = {0, 0, 0, 0};
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_usage("cannot open model file '{}'", path);
    const ssize_t n = ::read(fd, magic, 4);
    ::close(fd);
    if (n < 4) {
        fail_input("model file '{}' is {} bytes: too short for a GGUF file or a llama2.c checkpoint", path, n < 0 ? 0 : n);
    }
    if (std::memcmp(magic, "GGUF", 4) == 0) {
        if (!tokenizer_path.empty()) fail_usage("--tokenizer is for llama2.c checkpoints; '{}' is GGUF and has its own", path);
        return load_gguf_llama(path);
    }
    if (tokenizer_path.empty()) {
        fail_usage("'{}' is not GGUF, so it is read as a llama2.c checkpoint, which needs --tokenizer FILE "
                   "(a llama2.c tokenizer.bin)", path);
    }
    return load_llama2c(path, tokenizer_path);
}

namespace {
uint64_t n_elems(const weight_view & w) { return uint64_t(w.n_rows) * uint64_t(w.n_cols); }
}  // namespace

uint64_t model::n_params() const {
    uint64_t n = n_elems(token_embd_) + output_norm_.size();
    if (!output_tied_) n += n_elems(output_);
    for (const auto & l : layers_) {
        n += l.attn_norm.size() + l.ffn_norm.size();
        for (const weight_view * w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) n += n_elems(*w);
    }
    return n;
}

uint64_t model::weight_bytes_per_token() const {
    uint64_t n = uint64_t(output_.n_rows) * output_.row_bytes();
    for (const auto & l : layers_) {
        for (const weight_view * w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) {
            n += uint64_t(w->n_rows) * w->row_bytes();
        }
    }
    return n;
}

std::map<ggml_type, uint64_t> model::params_by_type() const {
    std::map<ggml_type, uint64_t> m = vector_params_;
    m[token_embd_.type] += n_elems(token_embd_);
    if (!output_tied_) m[output_.type] += n_elems(output_);
    for (const auto & l : layers_) {
        for (const weight_view * w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) {
            m[w->type] += n_elems(*w);
        }
    }
    return m;
}

}  // namespace hill
