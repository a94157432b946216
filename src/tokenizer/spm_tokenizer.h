// SentencePiece BPE as llama.cpp (llm_tokenizer_spm) and llama2.c (encode) apply it.
//
// encode(): if add_space_prefix and the text is non-empty, prepend ' '; replace ' ' with U+2581;
// split into UTF-8 characters; repeatedly merge the adjacent pair whose concatenation is a vocab
// piece with the highest score (ties: leftmost); then map each symbol to its piece id, or, when
// it is not in the vocab, to its bytes' "<0xXX>" tokens (byte fallback), or UNK without them.
// Control tokens are never produced from text. Invalid UTF-8: each byte that does not start a
// valid sequence is a one-byte symbol, so it reaches byte fallback and round-trips exactly.
#pragma once

#include "tokenizer/tokenizer.h"

#include <string>
#include <unordered_map>

namespace hill {

class spm_tokenizer final : public tokenizer {
public:
    // Errors: vocab sizes disagree, bos/eos/unk out of range.
    explicit spm_tokenizer(hill::vocab v);

    std::vector<int32_t> encode(std::string_view text, bool add_bos) const override;
    std::string token_to_piece(int32_t id) const override;
    std::string decode(const std::vector<int32_t> & ids) const override;
    const hill::vocab & vocab() const override { return vocab_; }

private:
    hill::vocab vocab_;
    std::unordered_map<std::string, int32_t> piece_to_id_;  // normal/user-defined/byte pieces only
    int32_t byte_token_[256];                                // id of "<0xXX>", -1 if absent
};

}  // namespace hill
