#include "engine/prompt_cache_dir.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "engine/prompt_cache.h"

namespace hill {

namespace fs = std::filesystem;

namespace {

// The length of the common prefix of a and b.
size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
    const size_t n = std::min(a.size(), b.size());
    return size_t(std::mismatch(a.begin(), a.begin() + ptrdiff_t(n), b.begin()).first - a.begin());
}

}  // namespace

std::string prompt_cache_dir::file_name(std::span<const int32_t> ids) {
    const XXH128_hash_t h = XXH3_128bits(ids.data(), ids.size() * sizeof(int32_t));
    return fmt::format("{:016x}{:016x}.hpc", h.high64, h.low64);
}

prompt_cache_dir::prompt_cache_dir(std::string dir, uint64_t limit_bytes)
    : dir_(std::move(dir)), limit_bytes_(limit_bytes) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) {
        log_warn("prompt cache: cannot create the directory '{}': {}; requests go on without it", dir_, ec.message());
        return;
    }
    struct found {
        std::string path;
        fs::file_time_type t;
    };
    std::vector<found> files;
    for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
        if (it->path().extension() == ".hpc" && it->is_regular_file(ec)) {
            files.push_back({it->path().string(), it->last_write_time(ec)});
        }
    }
    if (ec) log_warn("prompt cache: cannot list the directory '{}': {}", dir_, ec.message());
    std::sort(files.begin(), files.end(), [](const found & a, const found & b) { return a.t < b.t; });
    for (const found & f : files) {
        entry e;
        e.path = f.path;
        try {
            e.ids = read_prompt_cache_ids(f.path, &e.size_bytes);
        } catch (const error & err) {
            log_warn("prompt cache: removing '{}': {}", f.path, err.what());
            fs::remove(f.path, ec);
            ++stats_.errors;
            continue;
        }
        e.used = ++clock_;
        size_bytes_ += e.size_bytes;
        entries_.push_back(std::move(e));
    }
    if (limit_bytes_ > 0) evict_to(limit_bytes_);
}

void prompt_cache_dir::remove(size_t i, const char * why) {
    std::error_code ec;
    fs::remove(entries_[i].path, ec);
    if (ec) log_warn("prompt cache: cannot remove '{}' ({}): {}", entries_[i].path, why, ec.message());
    size_bytes_ -= entries_[i].size_bytes;
    entries_.erase(entries_.begin() + ptrdiff_t(i));
}

void prompt_cache_dir::evict_to(uint64_t target) {
    while (size_bytes_ > target && !entries_.empty()) {
        const auto lru = std::min_element(entries_.begin(), entries_.end(),
                                          [](const entry & a, const entry & b) { return a.used < b.used; });
        remove(size_t(lru - entries_.begin()), "evicted");
        ++stats_.evictions;
    }
}

int64_t prompt_cache_dir::longest_prefix(std::span<const int32_t> prompt, bool use) {
    if (prompt.empty()) return 0;
    size_t best_n = 0;
    entry * best = nullptr;
    for (entry & e : entries_) {
        const size_t n = common_prefix(e.ids, prompt.first(prompt.size() - 1));
        if (n > best_n) {
            best_n = n;
            best = &e;
        }
    }
    if (use && best) best->used = ++clock_;
    return int64_t(best_n);
}

int64_t prompt_cache_dir::load(context & ctx, int seq, std::span<const int32_t> prompt) {
    if (prompt.empty()) return 0;
    size_t best = entries_.size(), best_n = 0;
    for (size_t i = 0; i < entries_.size(); ++i) {
        const size_t n = common_prefix(entries_[i].ids, prompt.first(prompt.size() - 1));
        if (n > best_n || (n == best_n && n > 0 && entries_[i].used > entries_[best].used)) {
            best_n = n;
            best = i;
        }
    }
    if (best_n == 0) return 0;
    entry & e = entries_[best];
    int64_t n = 0;
    try {
        n = load_prompt_cache(e.path, ctx, seq, prompt);
    } catch (const error & err) {
        ++stats_.errors;
        if (ctx.n_past(seq) > 0) ctx.release(seq);
        if (err.code() == exit_code::bad_input) {
            log_warn("prompt cache: removing '{}', it failed verification: {}", e.path, err.what());
            remove(best, "corrupt");
        } else {
            log_warn("prompt cache: loading '{}' failed: {}; prefilling instead", e.path, err.what());
        }
        return 0;
    }
    e.used = ++clock_;
    if (n > 0) {
        ++stats_.hits;
        stats_.hit_tokens += uint64_t(n);
    }
    return n;
}

bool prompt_cache_dir::save(context & ctx, int seq, std::span<const int32_t> tokens) {
    HILL_ASSERT(int64_t(tokens.size()) == ctx.n_past(seq));
    if (tokens.empty()) return false;
    // Already held: an entry whose ids start with these tokens.
    for (entry & e : entries_) {
        if (e.ids.size() >= tokens.size() && common_prefix(e.ids, tokens) == tokens.size()) {
            e.used = ++clock_;
            return true;
        }
    }
    const uint64_t n = tokens.size();
    const uint64_t bytes = prompt_cache_file_bytes(ctx.layout(), n);
    if (limit_bytes_ > 0 && bytes > limit_bytes_) {
        log_debug("prompt cache: {} tokens ({} bytes) exceed --cache-dir-limit {} alone; not saved", n, bytes,
                  limit_bytes_);
        return false;
    }
    entry e;
    e.path = (fs::path(dir_) / file_name(tokens)).string();
    e.ids.assign(tokens.begin(), tokens.end());
    e.size_bytes = bytes;
    // Make room first: the disk may hold little more than the limit.
    if (limit_bytes_ > 0) evict_to(limit_bytes_ - bytes);
    try {
        save_prompt_cache(e.path, ctx, seq, tokens);
    } catch (const error & err) {
        ++stats_.errors;
        log_warn("prompt cache: cannot save {} tokens to '{}': {}", n, e.path, err.what());
        return false;
    }
    ++stats_.saves;
    // Entries the new one makes redundant: their ids are a prefix of its.
    for (size_t i = entries_.size(); i-- > 0;) {
        if (entries_[i].ids.size() < n && common_prefix(entries_[i].ids, tokens) == entries_[i].ids.size()) {
            remove(i, "superseded");
            ++stats_.evictions;
        }
    }
    e.used = ++clock_;
    size_bytes_ += e.size_bytes;
    entries_.push_back(std::move(e));
    return true;
}

}  // namespace hill
