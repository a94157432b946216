// What the tokenizers share about pieces (private to src/tokenizer).
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <string_view>

namespace hill::pieces {

// SentencePiece's escaped space, U+2581 ("▁"), as it appears in SentencePiece vocabularies.
inline constexpr std::string_view space_marker = "\xE2\x96\x81";

// Hash of a piece's bytes for the open-addressing tables (XXH3-64).
inline uint64_t hash(std::string_view s) { return XXH3_64bits(s.data(), s.size()); }

}  // namespace hill::pieces
