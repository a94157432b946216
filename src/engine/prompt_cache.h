// --prompt-cache: a sequence's KV after prefill, saved to a file and loaded by a later run whose
// prompt starts with the same tokens, so that only the rest is prefilled.
//
// File format (little-endian), version 1:
//   header  char magic[8] "HILLPC01", u32 version, u32 kv_type (ggml_type), u64 model_fingerprint,
//           u32 n_layer, u32 n_embd_kv, u64 n_tokens, u64 checksum of the header fields before it
//           and of the token ids (XXH3-64)
//   ids     i32 [n_tokens]
//   layers  per layer il: K rows kv_type [n_tokens, n_embd_kv], V rows likewise, u64 XXH3-64 of K,
//           u64 XXH3-64 of V
// The file is written whole under a temporary name, fsync'ed and renamed (core/atomic_file.h).
// The model fingerprint hashes the hyperparameters and every byte the model was loaded from
// (model::source_hash: the file, or a checkpoint folder's config.json, index and safetensors
// files): a cache from another model — another quantization, or a fine-tune of the same shape that
// differs in one tensor — is refused. A copied or moved model keeps its caches. The first save or
// load of a process reads the model's files once for it (about 0.1 s per GB from the page cache).
#pragma once

#include "engine/session.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hill {

// Saves tokens [0, ctx.n_past(seq)) of sequence seq's KV with their ids (tokens.size() == n_past).
// First removes the temporary files of saves of `path` whose process was killed before it finished
// (atomic_file::remove_stale_temps: `<path>.tmp.<pid>` of a pid that no longer runs).
// Errors: hill::error(bad_input) naming the file (unwritable, disk full); an existing cache stays.
void save_prompt_cache(const std::string & path, context & ctx, int seq, std::span<const int32_t> tokens);
// The same for the session's one sequence.
void save_prompt_cache(const std::string & path, session & s, std::span<const int32_t> tokens);

// Loads into the empty sequence seq of ctx the KV of the longest common prefix of the saved tokens and
// `prompt`, keeping at least the prompt's last token to be evaluated (its logits are not saved),
// and at most ctx.n_ctx() tokens (a cache saved with a larger context loads the prefix that fits).
// Returns the number of tokens loaded (0: nothing in common). All or nothing: on any error the
// sequence is empty again (n_past == 0, no token in its KV store). Errors: hill::error(bad_input)
// with the reason — another model, another KV type or shape, a truncated or corrupt file (size or
// checksum), naming the file and the expected and actual values; KV store errors (a cold-pool write).
int64_t load_prompt_cache(const std::string & path, context & ctx, int seq, std::span<const int32_t> prompt);
// The same for the session's one sequence.
int64_t load_prompt_cache(const std::string & path, session & s, std::span<const int32_t> prompt);

// The bytes of the file save_prompt_cache writes for n_tokens tokens of a context of this layout.
uint64_t prompt_cache_file_bytes(const kv_layout & layout, uint64_t n_tokens);

// The token ids a prompt cache file holds, with its size in bytes, reading only its header and ids
// (engine/prompt_cache_dir.h indexes a directory of them). Errors: hill::error(bad_input) naming the
// file: unreadable, too short, bad magic or version, a size its header does not imply, an ids checksum
// mismatch. The KV itself is verified by load_prompt_cache.
std::vector<int32_t> read_prompt_cache_ids(const std::string & path, uint64_t * size_bytes = nullptr);

}  // namespace hill
