#include "tokenizer/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "tokenizer/pieces.h"

namespace hill {

namespace {

// The id of a symbol that is a character no piece holds (SentencePiece style): it merges with
// nothing and falls back to its bytes' tokens.
constexpr int32_t k_no_piece = -2;

// GPT-2's byte-to-unicode table: the 188 printable bytes '!'..'~', U+00A1..U+00AC, U+00AE..U+00FF
// stand for themselves; the other 68 bytes, in increasing order, for U+0100, U+0101, ... so that
// every byte is a visible, non-space character.
struct byte_table {
    uint32_t code_point[256];
    int16_t byte_of[256 + 68];  // code point -> byte, -1 if none
    std::string piece[256];     // UTF-8 of code_point[b]

    byte_table() {
        std::fill(std::begin(byte_of), std::end(byte_of), int16_t(-1));
        uint32_t n_extra = 0;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            code_point[b] = printable ? b : 256 + n_extra++;
            byte_of[code_point[b]] = int16_t(b);
            const uint32_t cp = code_point[b];
            if (cp < 0x80) {
                piece[b] = std::string(1, char(cp));
            } else {  // < 0x800: two bytes
                piece[b] = {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
            }
        }
    }
};

const byte_table & bytes() {
    static const byte_table t;
    return t;
}

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when s[i] does not start one:
// a continuation byte, an overlong form, a surrogate, a code point above U+10FFFF, or a sequence
// cut short. The same rules as PCRE2's UTF check, so a stretch accepted here is valid for PCRE2.
size_t utf8_len(std::string_view s, size_t i) {
    const uint8_t c = uint8_t(s[i]);
    if (c < 0x80) return 1;
    size_t n;
    uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;  // overlong
        if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;  // overlong
        if (c == 0xF4) hi = 0x8F;  // > U+10FFFF
    } else {
        return 0;
    }
    if (s.size() - i < n) return 0;
    const uint8_t c1 = uint8_t(s[i + 1]);
    if (c1 < lo || c1 > hi) return 0;
    for (size_t k = 2; k < n; ++k) {
        if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return 0;
    }
    return n;
}

// Smallest power of two >= 2 * n (load factor <= 1/2), at least 16.
size_t table_size(size_t n) {
    size_t size = 16;
    while (size < 2 * n) size *= 2;
    return size;
}

// `text` with every ' ' replaced by U+2581 (SentencePiece's escaped space), in `buf`.
std::string_view escape_spaces(std::string_view text, std::string & buf) {
    buf.clear();
    for (const char c : text) {
        if (c == ' ') {
            buf += pieces::space_marker;
        } else {
            buf.push_back(c);
        }
    }
    return buf;
}

bool is_ascii_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// A byte that may belong to a word, for single_word: ASCII letters, digits, '_', and any non-ASCII
// byte (most non-ASCII characters beside a token are letters).
bool is_word_byte(char c) {
    const uint8_t b = uint8_t(c);
    return b >= 0x80 || (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || b == '_';
}

// A SentencePiece-style piece's text with U+2581 turned back into ' '.
std::string unescape_spaces(std::string_view piece) {
    std::string out;
    out.reserve(piece.size());
    for (size_t i = 0; i < piece.size();) {
        if (piece.substr(i).starts_with(pieces::space_marker)) {
            out.push_back(' ');
            i += pieces::space_marker.size();
        } else {
            out.push_back(piece[i++]);
        }
    }
    return out;
}

// A normal piece back to bytes: each character of the byte table gives its byte; any other
// character (not produced by byte-level loaders) is copied as it is.
std::string piece_to_bytes(std::string_view piece) {
    const byte_table & t = bytes();
    std::string out;
    out.reserve(piece.size());
    for (size_t i = 0; i < piece.size();) {
        const size_t n = utf8_len(piece, i);
        if (n == 0) {
            out.push_back(piece[i++]);
            continue;
        }
        uint32_t cp = uint8_t(piece[i]);
        if (n == 2) cp = ((cp & 0x1F) << 6) | (uint8_t(piece[i + 1]) & 0x3F);
        if (n <= 2 && cp < 256 + 68 && t.byte_of[cp] >= 0) {
            out.push_back(char(t.byte_of[cp]));
        } else {
            out.append(piece.substr(i, n));
        }
        i += n;
    }
    return out;
}

}  // namespace

std::string bpe_byte_to_piece(uint8_t b) {
    return bytes().piece[b];
}

std::string bpe_bytes_to_pieces(std::string_view text) {
    const byte_table & t = bytes();
    std::string out;
    out.reserve(text.size() * 2);
    for (const char c : text) out += t.piece[uint8_t(c)];
    return out;
}

struct bpe_tokenizer::regex {
    pcre2_code * code = nullptr;
    ~regex() { pcre2_code_free(code); }
};

// Per-call working memory: PCRE2 match data (one per regex) and the merge loop's buffers.
struct bpe_tokenizer::scratch {
    struct symbol {
        int32_t id;    // -1: merged into its left neighbour; k_no_piece: a character no piece holds
        int32_t prev;  // -1: none
        int32_t next;  // -1: none
        int32_t p0;    // its first byte in the word (for k_no_piece: its bytes' tokens are emitted)
    };
    struct candidate {
        uint32_t rank;
        int32_t left, right;        // symbol positions
        int32_t left_id, right_id;  // their ids when pushed: a changed id makes the entry stale
        int32_t merged;
    };
    std::vector<pcre2_match_data *> match;  // [n_regex]
    std::vector<std::string_view> words;    // pre-tokens of the current stretch
    std::vector<symbol> sym;
    std::vector<candidate> heap;
    std::string pieces;

    void init(const std::vector<std::unique_ptr<regex>> & regexes) {
        match.reserve(regexes.size());
        for (const auto & re : regexes) {
            match.push_back(pcre2_match_data_create_from_pattern(re->code, nullptr));
            HILL_ASSERT(match.back() != nullptr);
        }
    }
    ~scratch() {
        for (pcre2_match_data * m : match) pcre2_match_data_free(m);
    }
};

bpe_tokenizer::~bpe_tokenizer() = default;

bpe_tokenizer::bpe_tokenizer(bpe_config c)
    : vocab_(std::move(c.vocab)),
      source_(std::move(c.source)),
      byte_level_(c.byte_level),
      ignore_merges_(c.ignore_merges),
      whole_newline_runs_(c.whole_newline_runs) {
    hill::vocab & v = vocab_;
    const size_t n_vocab = v.pieces.size();
    if (n_vocab == 0) fail_input("'{}': the vocabulary is empty", source_);
    if (n_vocab > size_t(INT32_MAX)) fail_input("'{}': {} tokens, at most {} supported", source_, n_vocab, INT32_MAX);
    if (v.scores.empty()) v.scores.assign(n_vocab, 0.0f);
    if (v.kinds.empty()) v.kinds.assign(n_vocab, token_kind::normal);
    if (v.scores.size() != n_vocab || v.kinds.size() != n_vocab) {
        fail_input("'{}': {} pieces but {} scores and {} kinds", source_, n_vocab, v.scores.size(), v.kinds.size());
    }
    for (const auto & [name, id] : {std::pair{"bos", v.bos}, {"eos", v.eos}, {"unk", v.unk}}) {
        if (id < -1 || id >= int32_t(n_vocab)) {
            fail_input("'{}': {} token id {} is out of range, expected -1 (none) or [0, {})", source_, name, id,
                       n_vocab);
        }
    }

    // Normal pieces by text; the first id wins when a piece appears twice.
    piece_slots_.assign(table_size(n_vocab), -1);
    const size_t piece_mask = piece_slots_.size() - 1;
    for (size_t id = 0; id < n_vocab; ++id) {
        if (v.kinds[id] != token_kind::normal || v.pieces[id].empty()) continue;
        if (find_piece(v.pieces[id]) >= 0) continue;
        size_t h = pieces::hash(v.pieces[id]) & piece_mask;
        while (piece_slots_[h] >= 0) h = (h + 1) & piece_mask;
        piece_slots_[h] = int32_t(id);
    }
    if (byte_level_) {
        for (int b = 0; b < 256; ++b) byte_token_[b] = find_piece(bytes().piece[b]);
    } else {  // SentencePiece-style: the "<0xXX>" byte tokens
        std::fill(std::begin(byte_token_), std::end(byte_token_), -1);
        for (size_t id = 0; id < n_vocab; ++id) {
            unsigned x = 0;
            if (v.kinds[id] == token_kind::byte && v.pieces[id].size() == 6 &&
                std::sscanf(v.pieces[id].c_str(), "<0x%2X>", &x) == 1 && byte_token_[x] < 0) {
                byte_token_[x] = int32_t(id);
            }
        }
    }

    // Merges: the lowest rank of a pair wins.
    const size_t n_merges = c.merges.size();
    if (n_merges > size_t(INT32_MAX)) fail_input("'{}': {} merges, at most {} supported", source_, n_merges, INT32_MAX);
    n_merges_ = int32_t(n_merges);
    merge_keys_.assign(table_size(n_merges), 0);
    merge_vals_.assign(merge_keys_.size(), 0);
    const size_t merge_mask = merge_keys_.size() - 1;
    std::string joined;
    for (size_t r = 0; r < n_merges; ++r) {
        const auto & [a, b] = c.merges[r];
        const auto where = [&]() {
            return c.merges_line0 >= 0 ? fmt::format("line {}", c.merges_line0 + int64_t(r))
                                       : fmt::format("{}[{}]", c.merges_field, r);
        };
        const int32_t ia = find_piece(a);
        const int32_t ib = find_piece(b);
        joined.assign(a).append(b);
        const int32_t im = find_piece(joined);
        if (ia < 0 || ib < 0 || im < 0) {
            const std::string & missing = ia < 0 ? a : ib < 0 ? b : joined;
            fail_input("'{}': merge {} '{} {}' (rank {}): '{}' is not a normal token of the vocabulary", source_,
                       where(), a, b, r, missing);
        }
        const uint64_t key = ((uint64_t(uint32_t(ia)) << 32) | uint32_t(ib)) + 1;
        size_t h = XXH3_64bits(&key, sizeof key) & merge_mask;
        while (merge_keys_[h] != 0 && merge_keys_[h] != key) h = (h + 1) & merge_mask;
        if (merge_keys_[h] == key) continue;  // a repeated merge keeps its first (lowest) rank
        merge_keys_[h] = key;
        merge_vals_[h] = (uint64_t(r) << 32) | uint32_t(im);
    }

    // Added tokens: control and user-defined pieces, matched in the text before pre-tokenization.
    std::vector<bpe_config::added_flags> flags(n_vocab);
    for (const auto & f : c.added) {
        if (f.id < 0 || f.id >= int32_t(n_vocab) ||
            (v.kinds[f.id] != token_kind::control && v.kinds[f.id] != token_kind::user_defined)) {
            fail_input("'{}': added-token flags for id {}, which is not a control or user-defined token", source_,
                       f.id);
        }
        flags[f.id] = f;
    }
    for (size_t id = 0; id < n_vocab; ++id) {
        const token_kind k = v.kinds[id];
        if ((k != token_kind::control && k != token_kind::user_defined) || v.pieces[id].empty()) continue;
        const auto & f = flags[id];
        added_.push_back({v.pieces[id], int32_t(id), k == token_kind::control, f.lstrip, f.rstrip, f.single_word});
    }
    std::stable_sort(added_.begin(), added_.end(),
                     [](const added_token & x, const added_token & y) { return x.text.size() > y.text.size(); });
    for (size_t i = 0; i < added_.size(); ++i) added_first_[uint8_t(added_[i].text[0])].push_back(uint32_t(i));

    surface_.resize(n_vocab);
    for (size_t id = 0; id < n_vocab; ++id) {
        switch (v.kinds[id]) {
            case token_kind::normal:
                surface_[id] = byte_level_ ? piece_to_bytes(v.pieces[id]) : unescape_spaces(v.pieces[id]);
                break;
            case token_kind::user_defined:
            case token_kind::unknown:
                surface_[id] = v.pieces[id];
                break;
            case token_kind::byte: {  // "<0xXX>", validated by the GGUF loader; else as text
                const std::string & p = v.pieces[id];
                unsigned x = 0;
                if (p.size() == 6 && std::sscanf(p.c_str(), "<0x%2X>", &x) == 1) {
                    surface_[id] = std::string(1, char(x));
                } else {
                    surface_[id] = p;
                }
                break;
            }
            case token_kind::control:
            case token_kind::unused:
                break;
        }
    }

    for (const std::string & p : c.patterns) {
        int err = 0;
        PCRE2_SIZE offset = 0;
        auto re = std::make_unique<regex>();
        re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &offset, nullptr);
        if (re->code == nullptr) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            fail_input("'{}': pre-tokenizer regex '{}' does not compile (PCRE2: {} at offset {})", source_, p,
                       reinterpret_cast<const char *>(msg), offset);
        }
        // JIT is several times faster; without it (unsupported CPU) the interpreter gives the same matches.
        (void)pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);
        regexes_.push_back(std::move(re));
    }
    patterns_ = std::move(c.patterns);
}

int32_t bpe_tokenizer::find_piece(std::string_view piece) const {
    const size_t mask = piece_slots_.size() - 1;
    for (size_t h = pieces::hash(piece) & mask;; h = (h + 1) & mask) {
        const int32_t id = piece_slots_[h];
        if (id < 0) return -1;
        if (vocab_.pieces[size_t(id)] == piece) return id;
    }
}

int64_t bpe_tokenizer::find_merge(int32_t left, int32_t right) const {
    const uint64_t key = ((uint64_t(uint32_t(left)) << 32) | uint32_t(right)) + 1;
    const size_t mask = merge_keys_.size() - 1;
    for (size_t h = XXH3_64bits(&key, sizeof key) & mask;; h = (h + 1) & mask) {
        if (merge_keys_[h] == key) return int64_t(merge_vals_[h]);
        if (merge_keys_[h] == 0) return -1;
    }
}

std::vector<int32_t> bpe_tokenizer::encode(std::string_view text, bool add_bos) const {
    return encode_impl(text, add_bos, false);
}

std::vector<int32_t> bpe_tokenizer::encode_with_special(std::string_view text, bool add_bos) const {
    return encode_impl(text, add_bos, true);
}

std::vector<int32_t> bpe_tokenizer::encode_impl(std::string_view text, bool add_bos, bool parse_special) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 2);
    if (add_bos && vocab_.add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
    scratch s;
    s.init(regexes_);

    // The stretch [p0, p1) of plain text before an added token (or the end).
    std::string escaped;
    const auto plain = [&](size_t p0, size_t p1) {
        if (p0 == 0 && vocab_.add_space_prefix && p1 > 0 && text[0] != ' ') {
            std::string t = " ";
            t.append(text.substr(0, p1));
            encode_stretch(byte_level_ ? t : escape_spaces(t, escaped), s, out);
        } else if (p1 > p0) {
            const std::string_view t = text.substr(p0, p1 - p0);
            encode_stretch(byte_level_ ? t : escape_spaces(t, escaped), s, out);
        }
    };

    size_t seg = 0;  // start of the current plain stretch
    for (size_t i = 0; i < text.size();) {
        const std::vector<uint32_t> & cands = added_first_[uint8_t(text[i])];
        const added_token * hit = nullptr;
        size_t m0 = i, m1 = i;
        for (const uint32_t k : cands) {
            const added_token & a = added_[k];
            if (a.special && !parse_special) continue;
            if (text.compare(i, a.text.size(), a.text) != 0) continue;
            m0 = i;
            m1 = i + a.text.size();
            if (a.single_word &&
                ((m0 > 0 && is_word_byte(text[m0 - 1])) || (m1 < text.size() && is_word_byte(text[m1])))) {
                continue;
            }
            if (a.lstrip) {
                while (m0 > seg && is_ascii_space(text[m0 - 1])) --m0;
            }
            if (a.rstrip) {
                while (m1 < text.size() && is_ascii_space(text[m1])) ++m1;
            }
            hit = &a;
            break;
        }
        if (hit == nullptr) {
            ++i;
            continue;
        }
        plain(seg, m0);
        out.push_back(hit->id);
        seg = i = m1;
    }
    plain(seg, text.size());
    return out;
}

void bpe_tokenizer::encode_stretch(std::string_view text, scratch & s, std::vector<int32_t> & out) const {
    s.words.clear();
    pre_tokenize_stretch(text, s);
    for (const std::string_view w : s.words) encode_word(w, s, out);
}

void bpe_tokenizer::pre_tokenize_stretch(std::string_view text, scratch & s) const {
    size_t run = 0;  // start of the current valid UTF-8 run
    for (size_t i = 0; i < text.size();) {
        const size_t n = utf8_len(text, i);
        if (n > 0) {
            i += n;
            continue;
        }
        if (i > run) split(text.substr(run, i - run), 0, s);
        s.words.push_back(text.substr(i, 1));
        run = ++i;
    }
    if (text.size() > run) split(text.substr(run), 0, s);
}

std::vector<std::string> bpe_tokenizer::pre_tokenize(std::string_view text) const {
    scratch s;
    s.init(regexes_);
    std::string escaped;
    pre_tokenize_stretch(byte_level_ ? text : escape_spaces(text, escaped), s);
    return {s.words.begin(), s.words.end()};
}

void bpe_tokenizer::split(std::string_view text, size_t level, scratch & s) const {
    if (level == regexes_.size()) {
        s.words.push_back(text);
        return;
    }
    pcre2_code * code = regexes_[level]->code;
    pcre2_match_data * md = s.match[level];
    const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t done = 0;    // text before this is emitted
    size_t search = 0;  // where the next match may start
    while (search < text.size()) {
        // The caller checked the UTF-8; `search` is always at a character boundary.
        int rc = pcre2_match(code, subject, text.size(), search, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
            // A JIT stack or match limit: the interpreter keeps its backtracking on the heap. Should
            // that fail too, the rest is one piece (tokens may differ, the round trip holds).
            rc = pcre2_match(code, subject, text.size(), search, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
        }
        if (rc < 0) break;
        const PCRE2_SIZE * ov = pcre2_get_ovector_pointer(md);
        const size_t m0 = ov[0], m1 = ov[1];
        if (m1 <= m0) {  // an empty match cuts the text there, then the search moves on one character
            if (m0 >= text.size()) break;
            if (m0 > done) split(text.substr(done, m0 - done), level + 1, s);
            done = m0;
            search = m0 + std::max<size_t>(1, utf8_len(text, m0));
            continue;
        }
        if (m0 > done) split(text.substr(done, m0 - done), level + 1, s);
        split(text.substr(m0, m1 - m0), level + 1, s);
        done = search = m1;
    }
    if (text.size() > done) split(text.substr(done), level + 1, s);
}

void bpe_tokenizer::encode_word(std::string_view word, scratch & s, std::vector<int32_t> & out) const {
    const auto byte_id = [&](uint8_t b) {
        const int32_t id = byte_token_[b];
        if (id >= 0) return id;
        if (vocab_.unk >= 0) return vocab_.unk;
        fail_input("'{}': the vocabulary has no token for byte 0x{:02X} (piece '{}') and no unknown token", source_,
                   unsigned(b), byte_level_ ? bytes().piece[b] : fmt::format("<0x{:02X}>", unsigned(b)));
    };
    if (byte_level_ && word.size() == 1) {
        out.push_back(byte_id(uint8_t(word[0])));
        return;
    }
    const bool newline_run = whole_newline_runs_ && word.find_first_not_of('\n') == std::string_view::npos;
    if (ignore_merges_ || newline_run) {
        std::string_view piece = word;
        if (byte_level_) {
            s.pieces.clear();
            for (const char c : word) s.pieces += bytes().piece[uint8_t(c)];
            piece = s.pieces;
        }
        const int32_t id = find_piece(piece);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
    }

    // Symbols: the bytes (byte level) or the UTF-8 characters (SentencePiece style, an invalid byte
    // on its own) of the word, as piece ids.
    using symbol = scratch::symbol;
    using candidate = scratch::candidate;
    s.sym.clear();
    for (size_t i = 0; i < word.size();) {
        const size_t n = byte_level_ ? 1 : std::max<size_t>(1, utf8_len(word, i));
        int32_t id = byte_level_ ? byte_id(uint8_t(word[i])) : find_piece(word.substr(i, n));
        if (id < 0) id = k_no_piece;
        const int32_t k = int32_t(s.sym.size());
        s.sym.push_back(symbol{id, k - 1, k + 1, int32_t(i)});
        i += n;
    }
    const int32_t n = int32_t(s.sym.size());
    s.sym[size_t(n - 1)].next = -1;

    // Min-heap on (rank, left position): the lowest-ranked pair, leftmost among equals.
    const auto after = [](const candidate & x, const candidate & y) {
        return x.rank != y.rank ? x.rank > y.rank : x.left > y.left;
    };
    s.heap.clear();
    const auto push = [&](int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        const int32_t a = s.sym[size_t(left)].id, b = s.sym[size_t(right)].id;
        if (a < 0 || b < 0) return;  // a character no piece holds merges with nothing
        const int64_t m = find_merge(a, b);
        if (m < 0) return;
        s.heap.push_back({uint32_t(uint64_t(m) >> 32), left, right, a, b, int32_t(uint32_t(m))});
        std::push_heap(s.heap.begin(), s.heap.end(), after);
    };
    for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
    while (!s.heap.empty()) {
        std::pop_heap(s.heap.begin(), s.heap.end(), after);
        const candidate c = s.heap.back();
        s.heap.pop_back();
        symbol & l = s.sym[size_t(c.left)];
        symbol & r = s.sym[size_t(c.right)];
        // Stale when either side has merged since: a merged symbol changes id (it grew) or dies.
        if (l.id != c.left_id || r.id != c.right_id || l.next != c.right) continue;
        l.id = c.merged;
        l.next = r.next;
        if (r.next >= 0) s.sym[size_t(r.next)].prev = c.left;
        r.id = -1;
        push(l.prev, c.left);
        push(c.left, l.next);
    }
    for (int32_t i = 0; i >= 0; i = s.sym[size_t(i)].next) {
        const symbol & y = s.sym[size_t(i)];
        if (y.id != k_no_piece) {
            out.push_back(y.id);
            continue;
        }
        // Byte fallback for a character no piece holds (SentencePiece style only): its bytes run to
        // the next symbol.
        const size_t p1 = y.next >= 0 ? size_t(s.sym[size_t(y.next)].p0) : word.size();
        for (size_t b = size_t(y.p0); b < p1; ++b) out.push_back(byte_id(uint8_t(word[b])));
    }
}

std::string bpe_tokenizer::token_to_piece(int32_t id) const {
    if (id < 0 || id >= vocab_.n_vocab()) {
        fail_input("'{}': token id {} is out of range [0, {})", source_, id, vocab_.n_vocab());
    }
    return surface_[size_t(id)];
}

std::string bpe_tokenizer::decode(const std::vector<int32_t> & ids) const {
    std::string out;
    for (const int32_t id : ids) {
        if (id < 0 || id >= vocab_.n_vocab()) {
            fail_input("'{}': token id {} is out of range [0, {})", source_, id, vocab_.n_vocab());
        }
        out += surface_[size_t(id)];
    }
    return out;
}

}  // namespace hill
