// The server's on-disk prompt cache (`hillinfer serve --cache-dir DIR --cache-dir-limit BYTES`;
// DESIGN.md §8): a directory of prompt cache files (engine/prompt_cache.h, the one format), each the KV
// of one finished conversation's tokens, so that a conversation whose sequence was taken by another
// one (or that comes back after a restart) reuses its prefix instead of prefilling it again.
//
// Content address: an entry's file is `<XXH3-128 of its token ids, 32 hex digits>.hpc`; the same
// tokens are stored once.
// Index: the token ids of every entry, in memory (4 bytes per token, against the KV's
// 2 · n_layer · n_embd_kv · 2 bytes per token in the file), read from the files' headers when the
// directory is opened. A lookup compares the prompt with every entry's ids (the longest common prefix
// wins; ties: the most recently used): linear in the number of entries, which the size limit bounds,
// and in the shared prefixes, a few µs against the milliseconds of a prefill. A prefix of any length
// matches (a conversation's turn N matches turn N-1's entry up to where they differ), which block hashes
// would round down. An entry whose ids are a prefix of a new entry's ids is removed when that one is
// saved (every prompt it matches, the new one matches at least as long); saving ids that are a prefix
// of an existing entry only marks that one used.
// Verified on hit: load_prompt_cache compares the file's stored ids with the prompt (it loads only the
// common prefix) and checks the header, ids and every layer's KV checksums before importing anything.
// A file that fails (corrupt, truncated, another model's) is removed with a warning and the prompt is
// prefilled instead.
// Eviction: least recently used first (a hit or a save is a use; at opening, the files' modification
// times order them), whenever the files' bytes exceed the limit; an entry larger than the limit alone is
// not saved.
// Failures of the directory (cannot be created, unwritable, disk full) are warnings: the request that
// caused the save goes on, and the cache holds what it could write.
//
// Thread use: one owner thread (the context's).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/context.h"

namespace hill {

class prompt_cache_dir {
public:
    // Opens dir (created when missing) and indexes its *.hpc files; files that cannot be read as a prompt
    // cache are removed with a warning, and the oldest are evicted down to limit_bytes (0: no limit). A
    // directory that cannot be created or listed is a warning (the cache starts empty; saves will warn).
    prompt_cache_dir(std::string dir, uint64_t limit_bytes);

    // The length of the longest prefix of prompt an entry holds, at most all but the prompt's last token
    // (its logits are needed): what load() would load, n_ctx aside. use: that entry counts as used (LRU),
    // so that a save before the load does not evict it.
    int64_t longest_prefix(std::span<const int32_t> prompt, bool use = false);
    // Loads into the empty sequence seq the KV of that longest prefix (at most ctx.n_ctx() tokens). Returns
    // the tokens loaded; 0 when no entry shares a token with the prompt, or the entry failed verification
    // (it is removed, with a warning). Other errors of the import (a cold-pool write) are warnings too
    // (returns 0); the sequence is empty then.
    int64_t load(context & ctx, int seq, std::span<const int32_t> prompt);
    // Saves the KV of sequence seq, tokens [0, n_past) with their ids (tokens.size() == ctx.n_past(seq)),
    // then evicts to the limit. Failures are warnings (returns false): the directory, the disk, a cold read.
    bool save(context & ctx, int seq, std::span<const int32_t> tokens);

    const std::string & dir() const { return dir_; }
    uint64_t limit_bytes() const { return limit_bytes_; }
    uint64_t size_bytes() const { return size_bytes_; }
    size_t n_entries() const { return entries_.size(); }

    struct counters {
        uint64_t hits = 0;        // loads that imported a prefix
        uint64_t hit_tokens = 0;  // tokens they imported
        uint64_t saves = 0;       // entries written
        uint64_t evictions = 0;   // entries removed to stay under the limit (or made redundant by a longer one)
        uint64_t errors = 0;      // failed saves, and entries removed because they failed verification
    };
    const counters & stats() const { return stats_; }

    // The file name of an entry holding these ids: "<XXH3-128 hex>.hpc".
    static std::string file_name(std::span<const int32_t> ids);

private:
    struct entry {
        std::string path;
        std::vector<int32_t> ids;
        uint64_t size_bytes = 0;
        uint64_t used = 0;  // LRU clock
    };
    void remove(size_t i, const char * why);
    void evict_to(uint64_t target);  // removes LRU entries until their bytes are <= target

    std::string dir_;
    uint64_t limit_bytes_;
    std::vector<entry> entries_;
    uint64_t size_bytes_ = 0;
    uint64_t clock_ = 0;
    counters stats_;
};

}  // namespace hill
