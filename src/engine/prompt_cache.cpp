#include "engine/prompt_cache.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/mapped_file.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace hill {

namespace {

constexpr char k_magic[8] = {'H', 'I', 'L', 'L', 'P', 'C', '0', '1'};
constexpr uint32_t k_version = 1;

struct header {
    char magic[8];
    uint32_t version;
    uint32_t kv_type;
    uint64_t fingerprint;
    uint32_t n_layer;
    uint32_t n_embd_kv;
    uint64_t n_tokens;
    uint64_t checksum;  // of the fields above and the token ids
};
static_assert(sizeof(header) == 48);

uint64_t fingerprint(const model & m) {
    const hparams & hp = m.hp();
    XXH3_state_t * st = XXH3_createState();
    HILL_ASSERT(st != nullptr);
    XXH3_64bits_reset(st);
    const int64_t dims[] = {hp.n_vocab, hp.n_ctx_train, hp.n_embd, hp.n_ff, hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim};
    XXH3_64bits_update(st, dims, sizeof(dims));
    const float f[] = {hp.rms_eps, hp.rope_freq_base, hp.rope_freq_scale};
    XXH3_64bits_update(st, f, sizeof(f));
    const uint64_t source = m.source_hash();
    XXH3_64bits_update(st, &source, sizeof(source));
    const uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

uint64_t header_checksum(const header & h, const int32_t * ids) {
    XXH3_state_t * st = XXH3_createState();
    HILL_ASSERT(st != nullptr);
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, &h, offsetof(header, checksum));
    XXH3_64bits_update(st, ids, size_t(h.n_tokens) * 4);
    const uint64_t sum = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return sum;
}

}  // namespace

void save_prompt_cache(const std::string & path, session & s, std::span<const int32_t> tokens) {
    save_prompt_cache(path, s.ctx(), 0, tokens);
}

int64_t load_prompt_cache(const std::string & path, session & s, std::span<const int32_t> prompt) {
    return load_prompt_cache(path, s.ctx(), 0, prompt);
}

void save_prompt_cache(const std::string & path, context & ctx, int seq, std::span<const int32_t> tokens) {
    HILL_ASSERT(int64_t(tokens.size()) == ctx.n_past(seq));
    const kv_layout & layout = ctx.layout();
    header h{};
    std::memcpy(h.magic, k_magic, 8);
    h.version = k_version;
    h.kv_type = uint32_t(layout.type);
    h.fingerprint = fingerprint(ctx.model());
    h.n_layer = uint32_t(layout.n_layer);
    h.n_embd_kv = uint32_t(layout.n_embd_kv);
    h.n_tokens = tokens.size();
    h.checksum = header_checksum(h, tokens.data());

    atomic_file::remove_stale_temps(path);  // left by writers killed before they finished
    atomic_file out(path);
    out.write(&h, sizeof(h));
    out.write(tokens.data(), tokens.size() * 4);
    const size_t bytes = tokens.size() * layout.row_bytes();
    std::vector<uint8_t> k(bytes), v(bytes);  // one layer at a time
    for (int il = 0; il < layout.n_layer; ++il) {
        ctx.export_layer(seq, il, k.data(), v.data());
        const uint64_t sums[2] = {XXH3_64bits(k.data(), bytes), XXH3_64bits(v.data(), bytes)};
        out.write(k.data(), bytes);
        out.write(v.data(), bytes);
        out.write(sums, sizeof(sums));
    }
    out.commit();
}

namespace {

// The header of a mapped prompt cache, its magic and version checked.
header read_header(const mapped_file & file, const std::string & path) {
    header h{};
    if (file.size() < sizeof(h)) {
        fail_input("prompt cache '{}' is {} bytes, shorter than its {}-byte header", path, file.size(), sizeof(h));
    }
    std::memcpy(&h, file.data(), sizeof(h));
    if (std::memcmp(h.magic, k_magic, 8) != 0) fail_input("prompt cache '{}' is not a HillInfer prompt cache (bad magic)", path);
    if (h.version != k_version) {
        fail_input("prompt cache '{}' has format version {}, this build reads version {}", path, h.version, k_version);
    }
    return h;
}

// Checks the file's size against what its header implies (row_bytes: bytes of one token's K or V row).
void check_size(const mapped_file & file, const std::string & path, const header & h, size_t rb) {
    const uint64_t max_tokens = (file.size() - sizeof(h)) / 4;
    if (h.n_tokens > max_tokens) {
        fail_input("prompt cache '{}' is {} bytes, too short for the {} tokens its header names: truncated or corrupt",
                   path, file.size(), h.n_tokens);
    }
    const uint64_t expected = sizeof(h) + h.n_tokens * 4 + uint64_t(h.n_layer) * (2 * h.n_tokens * rb + 16);
    if (expected != file.size()) {
        fail_input("prompt cache '{}' is {} bytes, its header ({} tokens) implies {}: truncated or corrupt", path,
                   file.size(), h.n_tokens, expected);
    }
}

}  // namespace

uint64_t prompt_cache_file_bytes(const kv_layout & layout, uint64_t n_tokens) {
    return sizeof(header) + 4 * n_tokens + uint64_t(layout.n_layer) * (2 * n_tokens * layout.row_bytes() + 16);
}

std::vector<int32_t> read_prompt_cache_ids(const std::string & path, uint64_t * size_bytes) {
    const mapped_file file(path);
    const header h = read_header(file, path);
    const auto type = ggml_type_from_u32(h.kv_type);
    const auto rb = type ? ggml_row_bytes(*type, h.n_embd_kv) : std::nullopt;
    if (!rb) fail_input("prompt cache '{}' names KV type {} of rows of {}: not a KV type", path, h.kv_type, h.n_embd_kv);
    check_size(file, path, h, *rb);
    const auto * ids = reinterpret_cast<const int32_t *>(file.data() + sizeof(h));
    if (header_checksum(h, ids) != h.checksum) fail_input("prompt cache '{}': header or token ids corrupt (checksum)", path);
    if (size_bytes) *size_bytes = file.size();
    return std::vector<int32_t>(ids, ids + h.n_tokens);
}

int64_t load_prompt_cache(const std::string & path, context & ctx, int seq, std::span<const int32_t> prompt) {
    HILL_ASSERT(ctx.n_past(seq) == 0);
    const mapped_file file(path);
    const kv_layout & layout = ctx.layout();
    const header h = read_header(file, path);
    if (h.fingerprint != fingerprint(ctx.model())) {
        fail_input("prompt cache '{}' was made with another model (fingerprint {:016x}, this model {:016x})", path,
                   h.fingerprint, fingerprint(ctx.model()));
    }
    if (h.kv_type != uint32_t(layout.type)) {
        const auto t = ggml_type_from_u32(h.kv_type);
        fail_input("prompt cache '{}' holds a {} KV cache, this run uses {} (--cache-type)", path,
                   t ? std::string(ggml_type_name(*t)) : std::to_string(h.kv_type), ggml_type_name(layout.type));
    }
    if (h.n_layer != uint32_t(layout.n_layer) || h.n_embd_kv != uint32_t(layout.n_embd_kv)) {
        fail_input("prompt cache '{}' has {} layers of {} KV values per token, the model {} of {}", path, h.n_layer,
                   h.n_embd_kv, layout.n_layer, layout.n_embd_kv);
    }
    const size_t rb = layout.row_bytes();
    check_size(file, path, h, rb);
    const auto * ids = reinterpret_cast<const int32_t *>(file.data() + sizeof(h));
    if (header_checksum(h, ids) != h.checksum) fail_input("prompt cache '{}': header or token ids corrupt (checksum)", path);

    // The longest common prefix, less the prompt's last token, and no longer than the context (a
    // cache saved with a larger -c still gives the prefix that fits).
    int64_t n = 0;
    while (n < int64_t(h.n_tokens) && n < int64_t(prompt.size()) && ids[n] == prompt[size_t(n)]) ++n;
    n = std::min<int64_t>({n, int64_t(prompt.size()) - 1, int64_t(ctx.n_ctx())});
    if (n <= 0) return 0;

    // Verify every layer before anything is loaded, then append the first n rows of each.
    const uint8_t * data = file.data() + sizeof(h) + h.n_tokens * 4;
    const size_t bytes = h.n_tokens * rb, stride = 2 * bytes + 16;
    for (uint32_t il = 0; il < h.n_layer; ++il) {
        const uint8_t * p = data + il * stride;
        uint64_t sums[2];
        std::memcpy(sums, p + 2 * bytes, 16);
        if (XXH3_64bits(p, bytes) != sums[0] || XXH3_64bits(p + bytes, bytes) != sums[1]) {
            fail_input("prompt cache '{}': the KV of layer {} is corrupt (checksum)", path, il);
        }
    }
    std::vector<const void *> k(h.n_layer), v(h.n_layer);
    for (uint32_t il = 0; il < h.n_layer; ++il) {
        k[il] = data + il * stride;
        v[il] = data + il * stride + bytes;
    }
    ctx.import_kv(seq, n, k, v);  // all or nothing
    return n;
}

}  // namespace hill
