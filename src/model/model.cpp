#include "model/model.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "format/hf_checkpoint.h"
#include "model/model_loader.h"

namespace hill {

uint64_t hparams::kv_bytes_per_token(ggml_type kv_type) const {
    return 2ull * uint64_t(n_layer) * uint64_t(n_embd_kv()) * ggml_block_bytes(kv_type);
}

std::vector<double> hparams::rope_inv_freq(int il, int64_t n_ctx) const {
    HILL_ASSERT(head_dim > 0 && head_dim % 2 == 0);
    HILL_ASSERT(il >= 0 && (il < n_layer || n_layer == 0));
    const bool local = window(il) > 0 && rope_freq_base_swa > 0.0f;
    const bool long_factors = !rope_freq_factors_long.empty() && n_ctx > n_ctx_orig;
    const std::vector<float> & factors = long_factors ? rope_freq_factors_long : rope_freq_factors;
    HILL_ASSERT(factors.empty() || int64_t(factors.size()) == head_dim / 2);
    std::vector<double> f(size_t(head_dim / 2));
    // gemma3's local layers: their own base, unscaled (llama.cpp's rope_freq_scale_train_swa = 1).
    hill::rope_inv_freq(head_dim, local ? rope_freq_base_swa : rope_freq_base, local ? 1.0f : rope_freq_scale,
                        factors.empty() ? nullptr : factors.data(), f.data());
    return f;
}

void hparams::set_swa(int32_t n, int pattern) {
    HILL_ASSERT(n >= 0 && pattern >= 1 && n_layer > 0);
    n_swa = n;
    swa_layers.assign(n > 0 ? size_t(n_layer) : 0, 0);
    for (int il = 0; il < int(swa_layers.size()); ++il) swa_layers[size_t(il)] = il % pattern < pattern - 1 || pattern == 1;
}

const tokenizer & model::tokenizer() const {
    if (!tokenizer_) {
        if (format_ == "gguf") {
            fail_input("'{}' has no tokenizer (no tokenizer.ggml.* metadata): it can only be run on token ids; convert "
                       "the checkpoint again with its tokenizer files in the folder", path_);
        }
        fail_input("'{}' has no tokenizer (no tokenizer.json, vocab.json + merges.txt or encoder.json + vocab.bpe in "
                   "the folder): it can only be run on token ids; copy the tokenizer files of the model into it",
                   path_);
    }
    return *tokenizer_;
}

std::unique_ptr<model> model::load(const std::string & path, const std::string & tokenizer_path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        if (!tokenizer_path.empty()) {
            fail_usage("--tokenizer is for llama2.c checkpoints; '{}' is a checkpoint folder and brings its own", path);
        }
        return model_loader::load_hf(path);  // a folder that is not a checkpoint: a usage error naming what is missing
    }
    require_regular_file(path, "model file");
    char magic[4] = {0, 0, 0, 0};
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_usage("cannot open model file '{}': {}", path, std::strerror(errno));
    const ssize_t n = ::read(fd, magic, 4);
    ::close(fd);
    if (n < 4) {
        fail_input("model file '{}' is {} bytes: too short for a GGUF file or a llama2.c checkpoint", path, n < 0 ? 0 : n);
    }
    if (std::memcmp(magic, "GGUF", 4) == 0) {
        if (!tokenizer_path.empty()) fail_usage("--tokenizer is for llama2.c checkpoints; '{}' is GGUF and has its own", path);
        return model_loader::load_gguf(path);
    }
    if (tokenizer_path.empty()) {
        fail_usage("'{}' is not GGUF, so it is read as a llama2.c checkpoint, which needs --tokenizer FILE "
                   "(a llama2.c tokenizer.bin)", path);
    }
    return load_llama2c(path, tokenizer_path);
}

namespace {
uint64_t n_elems(const weight_view & w) { return uint64_t(w.n_rows) * uint64_t(w.n_cols); }

size_t n_vectors(const layer_weights & l) {
    size_t n = 0;
    for (const std::vector<float> * v : {&l.attn_norm, &l.attn_norm_b, &l.bq, &l.bk, &l.bv, &l.bo, &l.ffn_norm,
                                         &l.ffn_norm_b, &l.ffn_up_b, &l.ffn_down_b, &l.attn_q_norm, &l.attn_k_norm,
                                         &l.attn_post_norm, &l.ffn_post_norm}) {
        n += v->size();
    }
    return n;
}

// The matrices read per decode step: every block's, the projections and the output (not the
// embedding tables, of which one row is read). Empty views (absent weights) count 0.
template <class F>
void for_each_step_matrix(const std::vector<layer_weights> & layers, const weight_view & proj_in,
                          const weight_view & proj_out, F && f) {
    for (const auto & l : layers) {
        for (const weight_view * w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) f(*w);
    }
    f(proj_in);
    f(proj_out);
}

// A file's name (with its NUL: names cannot run into each other), then every byte and the size.
// Read through a buffer, not mapped: a second mapping of the model would count its pages again in
// the process's peak RSS.
void hash_file(XXH3_state_t * st, const std::string & name, const std::string & path) {
    XXH3_64bits_update(st, name.c_str(), name.size() + 1);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_input("cannot read '{}' to fingerprint the model: {}", path, std::strerror(errno));
    std::vector<uint8_t> buf(size_t(1) << 20);
    uint64_t size = 0;
    for (;;) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            ::close(fd);
            fail_input("cannot read '{}' to fingerprint the model: {}", path, std::strerror(err));
        }
        XXH3_64bits_update(st, buf.data(), size_t(n));
        size += uint64_t(n);
    }
    ::close(fd);
    XXH3_64bits_update(st, &size, sizeof(size));
}

// A checkpoint folder: config.json, the shard index if any, and every *.safetensors file in name
// order. Links are followed (the Hugging Face cache's snapshot folders link to blobs); names are
// the links' own.
void hash_folder(XXH3_state_t * st, const std::string & dir) {
    namespace fs = std::filesystem;
    std::vector<std::string> names;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string n = it->path().filename().string();
        const bool wanted = n == "config.json" || n == "model.safetensors.index.json" || n.ends_with(".safetensors");
        if (wanted && fs::is_regular_file(it->path(), ec)) names.push_back(n);
    }
    if (ec) fail_input("cannot list the checkpoint folder '{}': {}", dir, ec.message());
    std::sort(names.begin(), names.end());
    for (const std::string & n : names) hash_file(st, n, (fs::path(dir) / n).string());
}
}  // namespace

uint64_t model::n_params() const {
    uint64_t n = n_elems(token_embd_) + n_elems(pos_embd_) + output_norm_.size() + output_norm_b_.size();
    if (!output_tied_) n += n_elems(output_);
    for (const auto & l : layers_) n += n_vectors(l);
    for_each_step_matrix(layers_, proj_in_, proj_out_, [&](const weight_view & w) { n += n_elems(w); });
    return n;
}

uint64_t model::weight_bytes_per_token() const {
    uint64_t n = uint64_t(output_.n_rows) * output_.row_bytes();
    for_each_step_matrix(layers_, proj_in_, proj_out_,
                         [&](const weight_view & w) { n += uint64_t(w.n_rows) * w.row_bytes(); });
    return n;
}

std::map<ggml_type, uint64_t> model::params_by_type() const {
    std::map<ggml_type, uint64_t> m = vector_params_;
    const auto add = [&](const weight_view & w) {
        if (n_elems(w) != 0) m[w.type] += n_elems(w);
    };
    add(token_embd_);
    add(pos_embd_);
    if (!output_tied_) add(output_);
    for_each_step_matrix(layers_, proj_in_, proj_out_, add);
    return m;
}

uint64_t model::source_hash() const {
    std::call_once(source_hash_once_, [&] {
        XXH3_state_t * st = XXH3_createState();
        HILL_ASSERT(st != nullptr);
        XXH3_64bits_reset(st);
        try {
            std::error_code ec;
            if (std::filesystem::is_directory(path_, ec)) {
                hash_folder(st, path_);
            } else {
                hash_file(st, "", path_);
            }
        } catch (...) {
            XXH3_freeState(st);
            throw;
        }
        source_hash_ = XXH3_64bits_digest(st);
        XXH3_freeState(st);
    });
    return source_hash_;
}

}  // namespace hill
