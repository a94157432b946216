// SentencePiece BPE as llama.cpp (llm_tokenizer_spm) and llama2.c (encode) apply it.
//
// encode(): if add_space_prefix and the text is non-empty, prepend ' '; replace ' ' with U+2581;
// split into UTF-8 characters; repeatedly merge the adjacent pair whose concatenation is a vocab
// piece with the highest score (ties: leftmost); then map each symbol to its piece id, or, when
// it is not in the vocab, to its bytes' "<0xXX>" tokens (byte fallback), or UNK without them.
// Control tokens are never produced from text. Invalid UTF-8: each byte that does not start a
// valid sequence is a one-byte symbol, so it reaches byte fallback and round-trips exactly.
//
// The merge loop keeps the symbols in a doubly linked list and the candidate pairs in a binary
// max-heap (score, then leftmost), discarding stale pairs when popped, as llama.cpp does: O(n log n)
// in the text length, so a whole book encodes in one call. The text is first cut between any two
// characters that no merge target holds side by side (e.g. "a" then U+2581 in most vocabularies):
// no merge can cross such a cut, and merges on either side are independent, so each chunk is merged
// on its own with a small, cache-resident heap, giving the same tokens as one global heap.
//
// Implementation choices, all invisible on ordinary text:
// - Merge targets are normal, user-defined and unused pieces (SentencePiece's `pieces_`); control,
//   unknown and byte pieces are only emitted by their own rules. A symbol that merged into an
//   unused piece is split back into the two halves it came from (SentencePiece's resegmentation).
// - Pieces are matched with U+2581 turned back into ' ' (instead of escaping the text), so a
//   literal U+2581 in the text matches no piece and goes to byte fallback: decode() then gives
//   back U+2581, not ' ' (SentencePiece is lossy there; this keeps decode(encode(x)) == x).
//   Likewise a space that no piece covers falls back to <0x20>.
// - Without byte pieces an unknown character becomes one UNK (SentencePiece); if the vocab has
//   no UNK either, encode() throws hill::error(exit_code::bad_input).
// - decode(): byte pieces give their byte, normal pieces their text with U+2581 -> ' ',
//   user-defined pieces their text as is, control and unused tokens "", UNK " \u2047 " (the
//   SentencePiece unknown surface).
// - encode_with_special(): the text is cut at control tokens spelled in it (leftmost, then longest:
//   "<s>", "</s>", a chat model's "<|im_start|>"), each becoming its token, and every stretch between
//   them is encoded as encode() does, with its own space prefix when add_space_prefix: llama.cpp's
//   rule for SentencePiece vocabularies with special tokens parsed (a stretch after a control token
//   gets the prefix), so a chat template's text tokenizes as llama.cpp tokenizes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace hill {

class spm_tokenizer final : public tokenizer {
public:
    // Errors (hill::error, exit_code::bad_input): empty vocab, vocab sizes disagree, bos/eos/unk
    // out of range, a byte-kind piece that is not "<0xXX>".
    explicit spm_tokenizer(hill::vocab v);

    std::vector<int32_t> encode(std::string_view text, bool add_bos) const override;
    std::vector<int32_t> encode_with_special(std::string_view text, bool add_bos) const override;
    std::string token_to_piece(int32_t id) const override;
    std::string decode(const std::vector<int32_t> & ids) const override;
    const hill::vocab & vocab() const override { return vocab_; }

private:
    // Id of the merge target whose text (U+2581 as ' ') is `s`, -1 if none.
    int32_t find_piece(std::string_view s) const;
    bool has_char_pair(uint64_t key) const;

    hill::vocab vocab_;
    // Merge targets (normal, user-defined and unused pieces) in an open-addressing hash table with
    // linear probing, keyed by their text with U+2581 turned into ' '. Flat arrays rather than a
    // node-based map because these lookups are most of the encode time.
    struct piece_slot {
        uint32_t tag;  // high half of the key's hash
        int32_t id;    // -1: empty
    };
    std::vector<piece_slot> piece_slots_;  // [power of two >= 2 * n_vocab]
    std::vector<std::string> piece_keys_;  // [n_vocab] lookup key of each merge target, "" for others
    size_t max_key_size_ = 0;              // longest key, bytes
    // Every pair of adjacent characters inside a merge target, as (first << 32 | second) + 1 with
    // characters packed as their bytes little-endian; open addressing, 0 = empty.
    std::vector<uint64_t> pair_slots_;  // [power of two >= 2 * number of pairs]
    int32_t byte_token_[256];           // id of "<0xXX>", -1 if absent
    std::vector<std::string> surface_;  // [n_vocab] what token_to_piece returns
    // Control tokens with a non-empty piece by the piece's first byte, longest first
    // (encode_with_special).
    std::vector<std::vector<int32_t>> control_by_byte_;  // [256][...]
};

}  // namespace hill
