#include "tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "tokenizer/pieces.h"

namespace hill {

namespace {

constexpr std::string_view k_unk_surface = " \xE2\x81\x87 ";  // " U+2047 ", SentencePiece's default

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when s[i] does not start one:
// a stray continuation byte, an overlong form (C0, C1, E0 80..9F, F0 80..8F), a surrogate
// (ED A0..BF), a code point above U+10FFFF (F4 90.., F5..FF), or a sequence cut short.
size_t utf8_valid_len(std::string_view s, size_t i) {
    const auto b = [&](size_t k) { return uint8_t(s[i + k]); };
    const uint8_t c = b(0);
    if (c < 0x80) return 1;
    size_t n = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (i + n > s.size()) return 0;
    if (b(1) < lo || b(1) > hi) return 0;
    for (size_t k = 2; k < n; ++k) {
        if ((b(k) & 0xC0) != 0x80) return 0;
    }
    return n;
}

// A character (1..4 bytes) as a number, bytes little-endian: distinct characters give distinct
// numbers because the bytes after the first of a multi-byte character are never zero.
uint32_t pack_char(std::string_view c) {
    uint32_t v = 0;
    for (size_t k = 0; k < c.size(); ++k) v |= uint32_t(uint8_t(c[k])) << (8 * k);
    return v;
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

// The byte a "<0xXX>" piece stands for, -1 when `piece` has another form.
int parse_byte_piece(std::string_view piece) {
    if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
    const int h = hex_digit(piece[3]), l = hex_digit(piece[4]);
    return (h < 0 || l < 0) ? -1 : h * 16 + l;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (true) {
        const size_t j = s.find(from, i);
        if (j == std::string_view::npos) break;
        out.append(s.substr(i, j - i));
        out.append(to);
        i = j + from.size();
    }
    out.append(s.substr(i));
    return out;
}

// A symbol of the text being encoded: the bytes [off, off + n) of the (space-prefixed) text, in a
// doubly linked list by index within its chunk. n == 0: merged into its left neighbour.
struct symbol {
    uint32_t off;
    uint32_t n;
    int32_t prev;  // -1: first
    int32_t next;  // -1: last
    int32_t id;    // piece id once merged, -1: not looked up yet
};

// A candidate merge of symbols `left` and its right neighbour `right`. `size` is their total length
// when the pair was queued: a mismatch when popped means one side has changed since (stale).
struct bigram {
    float score;
    int32_t left;
    int32_t right;
    uint32_t size;
    int32_t id;
};

// Max-heap order: higher score first, then the leftmost pair.
struct bigram_less {
    bool operator()(const bigram & a, const bigram & b) const {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
};

}  // namespace

spm_tokenizer::spm_tokenizer(hill::vocab v) : vocab_(std::move(v)) {
    const size_t n_vocab = vocab_.pieces.size();
    if (n_vocab == 0) fail_input("tokenizer vocabulary is empty");
    if (n_vocab > size_t(INT32_MAX))
        fail_input("tokenizer vocabulary has {} tokens, at most {} supported", n_vocab, INT32_MAX);
    if (vocab_.scores.size() != n_vocab || vocab_.kinds.size() != n_vocab) {
        fail_input("tokenizer vocabulary sizes disagree: {} pieces, {} scores, {} token kinds", n_vocab,
                   vocab_.scores.size(), vocab_.kinds.size());
    }
    const auto check_id = [&](int32_t id, const char * what) {
        if (id < -1 || id >= int32_t(n_vocab)) {
            fail_input("tokenizer {} token id {} is out of range [0, {}) (or -1 for none)", what, id, n_vocab);
        }
    };
    check_id(vocab_.bos, "BOS");
    check_id(vocab_.eos, "EOS");
    check_id(vocab_.unk, "UNK");

    std::fill(std::begin(byte_token_), std::end(byte_token_), -1);
    control_by_byte_.resize(256);
    surface_.resize(n_vocab);
    piece_keys_.resize(n_vocab);
    std::vector<int32_t> targets;  // merge targets in id order
    for (size_t i = 0; i < n_vocab; ++i) {
        const std::string & piece = vocab_.pieces[i];
        const int32_t id = int32_t(i);
        switch (vocab_.kinds[i]) {
            case token_kind::normal:
                surface_[i] = replace_all(piece, pieces::space_marker, " ");
                piece_keys_[i] = surface_[i];
                targets.push_back(id);
                break;
            case token_kind::user_defined:
                surface_[i] = piece;
                piece_keys_[i] = replace_all(piece, pieces::space_marker, " ");
                targets.push_back(id);
                break;
            case token_kind::unused:
                piece_keys_[i] = replace_all(piece, pieces::space_marker, " ");
                targets.push_back(id);
                break;
            case token_kind::byte: {
                const int b = parse_byte_piece(piece);
                if (b < 0) fail_input("tokenizer token {} has kind 'byte' but piece '{}', expected <0xXX>", id, piece);
                if (byte_token_[b] < 0) byte_token_[b] = id;
                surface_[i] = std::string(1, char(b));
                break;
            }
            case token_kind::unknown:
                surface_[i] = std::string(k_unk_surface);
                break;
            case token_kind::control:
                if (!piece.empty()) control_by_byte_[uint8_t(piece[0])].push_back(id);
                break;
            default:
                fail_input("tokenizer token {} ('{}') has kind {}, expected 1..6", id, piece, int32_t(vocab_.kinds[i]));
        }
    }

    for (std::vector<int32_t> & ids : control_by_byte_) {
        std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
            return vocab_.pieces[size_t(a)].size() > vocab_.pieces[size_t(b)].size();
        });
    }

    // The merge-target table; of duplicate keys the first id wins.
    piece_slots_.assign(std::bit_ceil(std::max<size_t>(16, 2 * targets.size())), piece_slot{0, -1});
    const size_t piece_mask = piece_slots_.size() - 1;
    std::vector<uint64_t> pairs;
    for (const int32_t id : targets) {
        const std::string & key = piece_keys_[id];
        if (find_piece(key) >= 0) {
            piece_keys_[id].clear();
            continue;
        }
        const uint64_t h = pieces::hash(key);
        size_t k = size_t(h) & piece_mask;
        while (piece_slots_[k].id >= 0) k = (k + 1) & piece_mask;
        piece_slots_[k] = {uint32_t(h >> 32), id};
        max_key_size_ = std::max(max_key_size_, key.size());
        // Adjacent characters, split as encode() splits text.
        uint32_t prev = 0;
        for (size_t i = 0; i < key.size();) {
            const size_t len = std::max<size_t>(1, utf8_valid_len(key, i));
            const uint32_t cur = pack_char(std::string_view(key).substr(i, len));
            if (i > 0) pairs.push_back(((uint64_t(prev) << 32) | cur) + 1);
            prev = cur;
            i += len;
        }
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    pair_slots_.assign(std::bit_ceil(std::max<size_t>(16, 2 * pairs.size())), 0);
    const size_t pair_mask = pair_slots_.size() - 1;
    for (const uint64_t key : pairs) {
        size_t k = size_t(XXH3_64bits(&key, sizeof key)) & pair_mask;
        while (pair_slots_[k] != 0) k = (k + 1) & pair_mask;
        pair_slots_[k] = key;
    }
}

int32_t spm_tokenizer::find_piece(std::string_view s) const {
    if (s.size() > max_key_size_) return -1;
    const uint64_t h = pieces::hash(s);
    const uint32_t tag = uint32_t(h >> 32);
    const size_t mask = piece_slots_.size() - 1;
    for (size_t k = size_t(h) & mask;; k = (k + 1) & mask) {
        const piece_slot & slot = piece_slots_[k];
        if (slot.id < 0) return -1;
        if (slot.tag == tag && piece_keys_[slot.id] == s) return slot.id;
    }
}

bool spm_tokenizer::has_char_pair(uint64_t key) const {
    key += 1;
    const size_t mask = pair_slots_.size() - 1;
    for (size_t k = size_t(XXH3_64bits(&key, sizeof key)) & mask;; k = (k + 1) & mask) {
        if (pair_slots_[k] == key) return true;
        if (pair_slots_[k] == 0) return false;
    }
}

std::vector<int32_t> spm_tokenizer::encode(std::string_view text, bool add_bos) const {
    std::vector<int32_t> out;
    if (add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
    if (text.empty()) return out;

    std::string s;
    s.reserve(text.size() + 1);
    if (vocab_.add_space_prefix) s.push_back(' ');
    s.append(text);
    if (s.size() > size_t(UINT32_MAX)) {
        fail_input("text of {} bytes is too long to tokenize in one call (at most {})", s.size(), UINT32_MAX);
    }
    const std::string_view sv = s;
    out.reserve(out.size() + s.size() / 3);

    std::vector<symbol> sym;  // the current chunk
    std::vector<bigram> heap;
    // Symbols that merged into an unused piece: (off << 32 | n) -> length of the left half.
    std::unordered_map<uint64_t, uint32_t> rev_merge;

    const auto try_add = [&](int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        const uint32_t size = sym[left].n + sym[right].n;
        const int32_t id = find_piece(sv.substr(sym[left].off, size));
        if (id < 0) return;
        heap.push_back({vocab_.scores[id], left, right, size, id});
        std::push_heap(heap.begin(), heap.end(), bigram_less{});
    };

    // Emits a symbol: its piece, or the halves of an unused piece, or byte fallback, or UNK.
    const auto emit = [&](auto && self, uint32_t off, uint32_t n, int32_t id) -> void {
        const std::string_view piece = sv.substr(off, n);
        if (id < 0) id = find_piece(piece);
        if (id >= 0 && vocab_.kinds[id] != token_kind::unused) {
            out.push_back(id);
            return;
        }
        if (!rev_merge.empty()) {
            const auto it = rev_merge.find((uint64_t(off) << 32) | n);
            if (it != rev_merge.end()) {
                self(self, off, it->second, -1);
                self(self, off + it->second, n - it->second, -1);
                return;
            }
        }
        bool all_bytes = true;
        for (const char c : piece) all_bytes = all_bytes && byte_token_[uint8_t(c)] >= 0;
        if (all_bytes) {
            for (const char c : piece) out.push_back(byte_token_[uint8_t(c)]);
        } else if (vocab_.unk >= 0) {
            out.push_back(vocab_.unk);
        } else {
            fail_input("cannot tokenize '{}': not in the vocabulary, which has neither byte pieces nor UNK", piece);
        }
    };

    // Runs the merges of one chunk to completion and emits its symbols.
    const auto encode_chunk = [&]() {
        if (sym.empty()) return;
        sym.back().next = -1;
        heap.clear();
        for (int32_t k = 1; k < int32_t(sym.size()); ++k) try_add(k - 1, k);
        while (!heap.empty()) {
            std::pop_heap(heap.begin(), heap.end(), bigram_less{});
            const bigram bg = heap.back();
            heap.pop_back();
            symbol & l = sym[bg.left];
            symbol & r = sym[bg.right];
            if (l.n == 0 || r.n == 0 || l.n + r.n != bg.size) continue;  // stale
            if (vocab_.kinds[bg.id] == token_kind::unused) rev_merge[(uint64_t(l.off) << 32) | bg.size] = l.n;
            l.n += r.n;
            l.id = bg.id;
            r.n = 0;
            l.next = r.next;
            if (r.next >= 0) sym[r.next].prev = bg.left;
            try_add(l.prev, bg.left);
            try_add(bg.left, l.next);
        }
        for (int32_t k = 0; k >= 0; k = sym[k].next) emit(emit, sym[k].off, sym[k].n, sym[k].id);
        sym.clear();
    };

    // Split into UTF-8 characters (every byte that does not start a valid sequence is its own
    // symbol), cutting the text into chunks between characters that no piece holds side by side.
    uint32_t prev = 0;
    for (size_t i = 0; i < s.size();) {
        const size_t len = std::max<size_t>(1, utf8_valid_len(sv, i));
        const uint32_t cur = pack_char(sv.substr(i, len));
        if (!sym.empty() && !has_char_pair((uint64_t(prev) << 32) | cur)) encode_chunk();
        const int32_t k = int32_t(sym.size());
        sym.push_back({uint32_t(i), uint32_t(len), k - 1, k + 1, -1});
        prev = cur;
        i += len;
    }
    encode_chunk();
    return out;
}

std::vector<int32_t> spm_tokenizer::encode_with_special(std::string_view text, bool add_bos) const {
    std::vector<int32_t> out;
    if (add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
    size_t seg = 0;  // start of the current plain stretch
    const auto plain = [&](size_t end) {
        if (end == seg) return;
        const std::vector<int32_t> ids = encode(text.substr(seg, end - seg), false);
        out.insert(out.end(), ids.begin(), ids.end());
    };
    for (size_t i = 0; i < text.size();) {
        int32_t hit = -1;
        for (const int32_t id : control_by_byte_[uint8_t(text[i])]) {
            const std::string & piece = vocab_.pieces[size_t(id)];
            if (text.compare(i, piece.size(), piece) == 0) {
                hit = id;
                break;
            }
        }
        if (hit < 0) {
            ++i;
            continue;
        }
        plain(i);
        out.push_back(hit);
        i += vocab_.pieces[size_t(hit)].size();
        seg = i;
    }
    plain(text.size());
    return out;
}

std::string spm_tokenizer::token_to_piece(int32_t id) const {
    if (id < 0 || id >= vocab_.n_vocab()) fail_input("token id {} is out of range [0, {})", id, vocab_.n_vocab());
    return surface_[id];
}

std::string spm_tokenizer::decode(const std::vector<int32_t> & ids) const {
    std::string out;
    for (const int32_t id : ids) {
        if (id < 0 || id >= vocab_.n_vocab()) fail_input("token id {} is out of range [0, {})", id, vocab_.n_vocab());
        out += surface_[id];
    }
    // The space encode() prepended is the first byte of the first non-empty piece.
    if (vocab_.add_space_prefix && !out.empty() && out[0] == ' ') out.erase(0, 1);
    return out;
}

}  // namespace hill
