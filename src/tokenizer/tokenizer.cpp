#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/mapped_file.h"
#include "format/gguf_file.h"
#include "format/json_file.h"
#include "tokenizer/bpe_pre_tokenizer.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/pieces.h"
#include "tokenizer/spm_tokenizer.h"

namespace hill {

namespace {

bool is_byte_piece(std::string_view p) {
    const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
    return p.size() == 6 && p.substr(0, 3) == "<0x" && hex(p[3]) && hex(p[4]) && p[5] == '>';
}

// A token id from GGUF metadata `key`, `def` when absent; must lie in [0, n_vocab).
int32_t gguf_token_id(const gguf_file & gguf, const std::string & key, int32_t def, size_t n_vocab) {
    const std::optional<int64_t> v = gguf.get_int(key);
    if (!v) return def;
    if (*v < 0 || uint64_t(*v) >= n_vocab) {
        fail_input("'{}': {} = {} is out of range, expected a token id in [0, {})", gguf.name(), key, *v, n_vocab);
    }
    return int32_t(*v);
}

// `model` is "gpt2" or "gemma4"; the latter always has the gemma4 pre-tokenizer (as in llama.cpp).
std::unique_ptr<tokenizer> load_gguf_bpe(const gguf_file & gguf, vocab v, const std::string & model) {
    const std::string & file = gguf.name();
    bpe_config c;
    c.source = file;
    c.merges_field = "tokenizer.ggml.merges";
    const std::string pre =
        model == "gemma4" ? model : gguf.get_string("tokenizer.ggml.pre").value_or("default");
    const bpe_pre_tokenizer * p = find_bpe_pre_tokenizer(pre);
    if (p == nullptr) {
        std::string names;
        for (const bpe_pre_tokenizer & q : bpe_pre_tokenizers()) {
            if (q.unsupported == nullptr) names += fmt::format("{}'{}'", names.empty() ? "" : ", ", q.name);
        }
        fail_input("'{}': tokenizer.ggml.pre = '{}' is not a pre-tokenizer llama.cpp knows (supported: {})", file, pre,
                   names);
    }
    if (p->unsupported != nullptr) fail_input("'{}': tokenizer.ggml.pre = '{}': {}", file, pre, p->unsupported);
    c.patterns.assign(p->patterns.begin(), p->patterns.end());
    c.ignore_merges = p->ignore_merges;
    c.byte_level = p->byte_level;
    c.whole_newline_runs = p->whole_newline_runs;

    std::optional<std::vector<std::string>> merges = gguf.get_string_array("tokenizer.ggml.merges");
    if (!merges)
        fail_input("'{}': metadata key tokenizer.ggml.merges is missing (needed by tokenizer.ggml.model 'gpt2')", file);
    c.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
        const std::string & m = (*merges)[i];
        const size_t sp = m.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 == m.size() || m.find(' ', sp + 1) != std::string::npos) {
            fail_input("'{}': tokenizer.ggml.merges[{}] = '{}', expected two pieces separated by one space", file, i,
                       m);
        }
        c.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }

    const size_t n_vocab = v.pieces.size();
    if (!gguf.find("tokenizer.ggml.token_type")) {
        for (size_t i = 0; i < n_vocab; ++i) {
            if (v.pieces[i] == "<|endoftext|>") v.kinds[i] = token_kind::control;
        }
    }
    const std::optional<int32_t> eot = [&]() -> std::optional<int32_t> {
        for (size_t i = 0; i < n_vocab; ++i) {
            if (v.pieces[i] == "<|endoftext|>") return int32_t(i);
        }
        return std::nullopt;
    }();
    v.bos = gguf_token_id(gguf, "tokenizer.ggml.bos_token_id", p->bos_none ? -1 : eot.value_or(-1), n_vocab);
    v.eos = gguf_token_id(gguf, "tokenizer.ggml.eos_token_id", eot.value_or(-1), n_vocab);
    v.unk = gguf_token_id(gguf, "tokenizer.ggml.unknown_token_id", -1, n_vocab);
    v.add_bos = p->force_bos || gguf.get_bool("tokenizer.ggml.add_bos_token").value_or(p->add_bos);
    // SentencePiece-style BPE never prepends a space (llama.cpp's BPE path ignores the key); its
    // GGUF may carry the key from the SentencePiece convention.
    v.add_space_prefix = p->byte_level && gguf.get_bool("tokenizer.ggml.add_space_prefix").value_or(false);
    v.scores.assign(n_vocab, 0.0f);  // BPE ranks live in the merges
    c.vocab = std::move(v);
    return std::make_unique<bpe_tokenizer>(std::move(c));
}

}  // namespace

std::unique_ptr<tokenizer> load_tokenizer(const gguf_file & gguf) {
    const std::string & file = gguf.name();
    const std::optional<std::string> model = gguf.get_string("tokenizer.ggml.model");
    if (!model) fail_input("'{}' has no tokenizer: metadata key tokenizer.ggml.model is missing", file);
    if (*model != "llama" && *model != "gpt2" && *model != "gemma4") {
        fail_input("'{}': tokenizer.ggml.model = '{}' is not supported (supported: 'llama', 'gpt2', 'gemma4')", file,
                   *model);
    }
    const bool spm = *model == "llama";
    vocab v;
    std::optional<std::vector<std::string>> tokens = gguf.get_string_array("tokenizer.ggml.tokens");
    if (!tokens) fail_input("'{}': metadata key tokenizer.ggml.tokens is missing", file);
    if (tokens->empty()) fail_input("'{}': tokenizer.ggml.tokens is empty", file);
    if (tokens->size() > size_t(INT32_MAX)) {
        fail_input("'{}': tokenizer.ggml.tokens has {} entries, at most {} supported", file, tokens->size(), INT32_MAX);
    }
    v.pieces = std::move(*tokens);
    const size_t n_vocab = v.pieces.size();

    if (std::optional<std::vector<float>> scores = gguf.get_float_array("tokenizer.ggml.scores")) {
        if (scores->size() != n_vocab) {
            fail_input("'{}': tokenizer.ggml.scores has {} entries, expected {} (as tokenizer.ggml.tokens)", file,
                       scores->size(), n_vocab);
        }
        v.scores = std::move(*scores);
    } else {
        v.scores.assign(n_vocab, 0.0f);
    }

    v.kinds.resize(n_vocab);
    if (std::optional<std::vector<int64_t>> types = gguf.get_int_array("tokenizer.ggml.token_type")) {
        if (types->size() != n_vocab) {
            fail_input("'{}': tokenizer.ggml.token_type has {} entries, expected {} (as tokenizer.ggml.tokens)", file,
                       types->size(), n_vocab);
        }
        for (size_t i = 0; i < n_vocab; ++i) {
            const int64_t t = (*types)[i];
            if (t == 0) {
                v.kinds[i] = token_kind::normal;  // llama.cpp's "undefined"
            } else if (t >= 1 && t <= 6) {
                v.kinds[i] = token_kind(t);
            } else {
                fail_input("'{}': tokenizer.ggml.token_type[{}] = {} (token '{}'), expected 0..6", file, i, t,
                           v.pieces[i]);
            }
            if (v.kinds[i] == token_kind::byte && !is_byte_piece(v.pieces[i])) {
                fail_input("'{}': token {} has type byte (6) but piece '{}', expected <0xXX>", file, i, v.pieces[i]);
            }
        }
    } else {
        for (size_t i = 0; i < n_vocab; ++i) {
            v.kinds[i] = is_byte_piece(v.pieces[i]) ? token_kind::byte : token_kind::normal;
        }
    }

    if (!spm) return load_gguf_bpe(gguf, std::move(v), *model);

    v.bos = gguf_token_id(gguf, "tokenizer.ggml.bos_token_id", 1, n_vocab);
    v.eos = gguf_token_id(gguf, "tokenizer.ggml.eos_token_id", 2, n_vocab);
    v.unk = gguf_token_id(gguf, "tokenizer.ggml.unknown_token_id", 0, n_vocab);
    v.add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
    v.add_space_prefix = gguf.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    return std::make_unique<spm_tokenizer>(std::move(v));
}

std::unique_ptr<tokenizer> load_llama2c_tokenizer(const std::string & path, int32_t n_vocab) {
    if (n_vocab < 3) fail_input("llama2.c tokenizer '{}': n_vocab = {}, expected at least 3", path, n_vocab);
    const mapped_file map(path);
    const uint8_t * data = map.data();
    const size_t size = map.size();
    size_t pos = 0;
    const auto read_bytes = [&](void * dst, size_t n, const char * what, int32_t i) {
        if (n > size - pos) {
            fail_input(
                "llama2.c tokenizer '{}' is truncated: {} of token {} needs {} bytes at offset {}, file has {} "
                "bytes (expected {} tokens)",
                path, what, i, n, pos, size, n_vocab);
        }
        std::memcpy(dst, data + pos, n);
        pos += n;
    };

    int32_t max_token_length = 0;
    if (size < 4)
        fail_input("llama2.c tokenizer '{}' is truncated: {} bytes, expected at least a 4-byte header", path, size);
    read_bytes(&max_token_length, 4, "header", 0);
    if (max_token_length < 0)
        fail_input("llama2.c tokenizer '{}': max_token_length = {}, expected >= 0", path, max_token_length);

    vocab v;
    v.pieces.resize(size_t(n_vocab));
    v.scores.resize(size_t(n_vocab));
    v.kinds.resize(size_t(n_vocab));
    for (int32_t i = 0; i < n_vocab; ++i) {
        if (pos == size) {
            fail_input("llama2.c tokenizer '{}' holds {} tokens, but the model's vocabulary has {}: is it the "
                       "tokenizer of another model?", path, i, n_vocab);
        }
        int32_t len = 0;
        read_bytes(&v.scores[i], 4, "the score", i);
        read_bytes(&len, 4, "the length", i);
        if (len < 0 || size_t(len) > size - pos) {
            fail_input("llama2.c tokenizer '{}': token {} has length {} at offset {}, past the end of the {}-byte file",
                       path, i, len, pos - 4, size);
        }
        const std::string_view raw(reinterpret_cast<const char *>(data + pos), size_t(len));
        pos += size_t(len);
        // llama2.c exports pieces with U+2581 turned into ' '; store them as SentencePiece does.
        std::string & piece = v.pieces[i];
        piece.reserve(raw.size());
        for (const char c : raw) {
            if (c == ' ') {
                piece.append(pieces::space_marker);
            } else {
                piece.push_back(c);
            }
        }
        v.kinds[i] = is_byte_piece(piece) ? token_kind::byte : token_kind::normal;
    }
    if (pos != size) {
        fail_input("llama2.c tokenizer '{}' has {} bytes after token {}: it holds more tokens than the model's "
                   "vocabulary of {}; is it the tokenizer of another model?", path, size - pos, n_vocab - 1, n_vocab);
    }
    // llama2.c's fixed ids: 0 = <unk>, 1 = <s> (exported as "\n<s>\n"), 2 = </s> ("\n</s>\n").
    if (v.pieces[1] == "\n<s>\n") v.pieces[1] = "<s>";
    if (v.pieces[2] == "\n</s>\n") v.pieces[2] = "</s>";
    v.kinds[0] = token_kind::unknown;
    v.kinds[1] = token_kind::control;
    v.kinds[2] = token_kind::control;
    v.unk = 0;
    v.bos = 1;
    v.eos = 2;
    v.add_bos = true;
    v.add_space_prefix = true;
    return std::make_unique<spm_tokenizer>(std::move(v));
}

// ---------------------------------------------------------------------------------------------
// Hugging Face tokenizer.json / tokenizer_config.json, OpenAI encoder.json + vocab.bpe

namespace {

// Ids are bounded so that a corrupt id cannot make the loader allocate gigabytes for the gap before
// it: real vocabularies have at most a few hundred thousand tokens.
constexpr int64_t k_max_id = int64_t(1) << 24;

int32_t token_id(const json_value & v) {
    return int32_t(v.get_int(0, k_max_id - 1));
}

// A "a b" merge line; nullopt unless exactly two non-empty parts.
std::optional<std::pair<std::string, std::string>> split_merge(std::string_view m) {
    const size_t sp = m.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 == m.size() ||
        m.find(' ', sp + 1) != std::string_view::npos) {
        return std::nullopt;
    }
    return std::pair{std::string(m.substr(0, sp)), std::string(m.substr(sp + 1))};
}

// A regex that matches `s` literally (HF Split pattern {"String": s}).
std::string regex_escape(std::string_view s) {
    std::string out;
    for (const char c : s) {
        const uint8_t b = uint8_t(c);
        const bool plain = b >= 0x80 || (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z');
        if (!plain) out.push_back('\\');
        out.push_back(c);
    }
    return out;
}

// Reads a pre_tokenizer (recursively through Sequence) into c.patterns; returns whether it has a
// ByteLevel step.
bool read_pre_tokenizer(const json_value & pt, bpe_config & c) {
    const json_value type = pt.at("/type", "a string");
    const std::string name = type.get<std::string>();
    if (name == "Sequence") {
        const json_value list = pt.at("/pretokenizers", "an array");
        bool byte_level = false;
        for (size_t i = 0; i < list.size(); ++i) byte_level |= read_pre_tokenizer(list.item(i), c);
        return byte_level;
    }
    if (name == "ByteLevel") {
        if (pt.optional<bool>("/use_regex").value_or(true)) c.patterns.push_back(k_bpe_pattern_gpt2);
        c.vocab.add_space_prefix = pt.optional<bool>("/add_prefix_space").value_or(true);
        return true;
    }
    if (name == "Split") {
        const json_value pattern = pt.at("/pattern", "an object");
        if (const auto re = pattern.find("/Regex")) {
            c.patterns.push_back(re->get<std::string>());
        } else if (const auto lit = pattern.find("/String")) {
            c.patterns.push_back(regex_escape(lit->get<std::string>()));
        } else {
            pattern.fail_expected("{\"Regex\": ...} or {\"String\": ...}");
        }
        const json_value behavior = pt.at("/behavior", "a string");
        if (behavior.get<std::string>() != "Isolated") {
            behavior.fail_expected("\"Isolated\" (the only Split behavior supported)");
        }
        if (pt.optional<bool>("/invert").value_or(false)) {
            pt.at("/invert").fail_expected("false (inverted Split is not supported)");
        }
        return false;
    }
    fail_input(
        "{}: '{}' is not supported: only byte-level BPE is (pre-tokenizer steps ByteLevel, Split, Sequence); for a "
        "SentencePiece model such as Llama-2 load its GGUF file",
        type.where(), name);
}

// The name of a special token in tokenizer_config.json: a string, {"content": ...} or null.
std::optional<std::string> config_token(const std::optional<json_value> & cfg, std::string_view pointer) {
    if (!cfg) return std::nullopt;
    const auto r = cfg->find(pointer);
    if (!r) return std::nullopt;
    if (r->json().is_object()) return r->required<std::string>("/content");
    return r->get<std::string>();
}

// Id of the token spelled `name`: a control/user-defined piece first, then a normal piece (whose
// text is byte-level), -1 if none.
int32_t find_token(const vocab & v, const std::string & name) {
    const std::string bl = bpe_bytes_to_pieces(name);
    int32_t normal = -1;
    for (size_t i = 0; i < v.pieces.size(); ++i) {
        const bool added = v.kinds[i] == token_kind::control || v.kinds[i] == token_kind::user_defined;
        if (added && v.pieces[i] == name) return int32_t(i);
        if (normal < 0 && v.kinds[i] == token_kind::normal && (v.pieces[i] == bl || v.pieces[i] == name)) {
            normal = int32_t(i);
        }
    }
    return normal;
}

// Adds an added token (HF added_tokens entry or tokenizer_config added_tokens_decoder value) to
// the vocab: special -> control, else user-defined; grows the vocab for ids past its end.
void add_added_token(bpe_config & c, const json_value & t, int32_t id) {
    vocab & v = c.vocab;
    const json_value content_value = t.at("/content", "a string");
    const std::string content = content_value.get<std::string>();
    if (content.empty()) content_value.fail_expected("a non-empty string");
    if (size_t(id) >= v.pieces.size()) {
        v.pieces.resize(size_t(id) + 1);
        v.kinds.resize(size_t(id) + 1, token_kind::unused);
    }
    v.pieces[size_t(id)] = content;
    v.kinds[size_t(id)] = t.optional<bool>("/special").value_or(false) ? token_kind::control : token_kind::user_defined;
    c.added.push_back({id, t.optional<bool>("/lstrip").value_or(false), t.optional<bool>("/rstrip").value_or(false),
                       t.optional<bool>("/single_word").value_or(false)});
}

// bos/eos/unk and the BOS rule (see tokenizer.h) from tokenizer_config.json (may be absent) and the
// post_processor's leading special token (-1: none).
void apply_config(bpe_config & c, const std::optional<json_value> & cfg, int32_t template_bos) {
    vocab & v = c.vocab;
    const auto lookup = [&](const char * pointer) -> int32_t {
        const std::optional<std::string> name = config_token(cfg, pointer);
        if (!name) return -1;
        const int32_t id = find_token(v, *name);
        if (id < 0) {
            fail_input("{}: {}: '{}' is not a token of the vocabulary in '{}'", cfg->name(), pointer, *name, c.source);
        }
        if (v.kinds[size_t(id)] == token_kind::normal) {
            v.kinds[size_t(id)] = token_kind::control;  // a special token (OPT's "</s>" is in vocab.json)
            v.pieces[size_t(id)] = *name;
        }
        return id;
    };
    const int32_t bos = lookup("/bos_token");
    const int32_t eos = lookup("/eos_token");
    const int32_t unk = lookup("/unk_token");
    const int32_t eot = find_token(v, "<|endoftext|>");  // GPT-2's (and Qwen's) BOS = EOS
    if (eot >= 0 && v.kinds[size_t(eot)] == token_kind::normal) v.kinds[size_t(eot)] = token_kind::control;

    v.bos = bos >= 0 ? bos : template_bos >= 0 ? template_bos : eot;
    v.eos = eos >= 0 ? eos : eot;
    v.unk = unk;
    const std::optional<bool> add_bos = cfg ? cfg->optional<bool>("/add_bos_token") : std::nullopt;
    if (add_bos) {
        v.add_bos = *add_bos;
    } else if (template_bos >= 0) {
        v.add_bos = true;
    } else {
        v.add_bos = bos >= 0 && bos != eos;
    }
}

// The special token a TemplateProcessing post_processor puts before the text ("single"), -1: none.
int32_t template_bos(const std::optional<json_value> & pp, const vocab & v) {
    if (!pp) return -1;
    const std::string type = pp->required<std::string>("/type");
    if (type == "Sequence") {
        const json_value list = pp->at("/processors", "an array");
        for (size_t i = 0; i < list.size(); ++i) {
            const int32_t id = template_bos(list.item(i), v);
            if (id >= 0) return id;
        }
        return -1;
    }
    if (type != "TemplateProcessing") return -1;
    const json_value single = pp->at("/single", "an array");
    if (single.size() == 0) return -1;
    const auto first = single.item(0).find("/SpecialToken");
    if (!first) return -1;
    const json_value first_id = first->at("/id", "a string");
    const std::string name = first_id.get<std::string>();
    std::optional<json_value> entry;  // special_tokens[name]; a token name may hold '/', so no pointer
    if (const auto specials = pp->find("/special_tokens")) {
        specials->for_each_member([&](const std::string & key, const json_value & e) {
            if (key == name) entry = e;
        });
    }
    if (entry) {
        const json_value ids = entry->at("/ids", "an array");
        if (ids.size() > 0) {
            const int32_t id = token_id(ids.item(0));
            if (size_t(id) >= v.pieces.size()) ids.item(0).fail_expected("a token id of the vocabulary");
            return id;
        }
    }
    const int32_t id = find_token(v, name);
    if (id < 0) fail_input("{}: '{}' is not a token of the vocabulary", first_id.where(), name);
    return id;
}

// Pieces from a JSON object piece -> id; ids must be distinct (gaps become unused tokens).
void read_vocab_object(const json_value & obj, vocab & v) {
    obj.require_object();
    const std::string what = obj.pointer().empty() ? "the vocabulary" : obj.pointer();
    if (obj.json().empty()) fail_input("{}: {} is empty", obj.name(), what);
    std::vector<std::pair<const std::string *, int32_t>> entries;  // piece (in the document), id
    entries.reserve(obj.json().size());
    size_t n = 0;
    obj.for_each_member([&](const std::string & piece, const json_value & id) {
        entries.emplace_back(&piece, token_id(id));
        n = std::max(n, size_t(entries.back().second) + 1);
    });
    v.pieces.assign(n, std::string());
    v.kinds.assign(n, token_kind::unused);
    for (const auto & [piece, id] : entries) {
        if (v.kinds[size_t(id)] != token_kind::unused) {
            fail_input("{}: {} gives id {} to both '{}' and '{}'", obj.name(), what, id, v.pieces[size_t(id)], *piece);
        }
        v.pieces[size_t(id)] = *piece;
        v.kinds[size_t(id)] = token_kind::normal;
    }
}

// tokenizer_config.json, which may be absent (path ""); an object when present.
std::optional<json_file> load_tokenizer_config(const std::string & path) {
    if (path.empty()) return std::nullopt;
    json_file f = json_file::load(path, "the tokenizer config");
    f.root().require_object();
    return f;
}

}  // namespace

std::unique_ptr<tokenizer> load_tokenizer_json(const std::string & tokenizer_json_path,
                                               const std::string & tokenizer_config_path) {
    const std::string & file = tokenizer_json_path;
    const json_file doc = json_file::load(file, "the tokenizer");
    const json_value root = doc.root();
    root.require_object();
    bpe_config c;
    c.source = file;
    c.merges_field = "model.merges";

    const json_value model = root.at("/model", "an object");
    if (const auto type = model.find("/type")) {
        const std::string name = type->get<std::string>();
        if (name != "BPE") fail_input("{}: '{}' is not supported (supported: 'BPE', byte-level)", type->where(), name);
    }
    for (const char * pointer : {"/continuing_subword_prefix", "/end_of_word_suffix"}) {
        if (const auto r = model.find(pointer); r && !r->get<std::string>().empty()) {
            r->fail_expected("null or \"\" (not supported)");
        }
    }

    // Byte level or not decides before anything else is read, so the message names the real cause.
    const std::optional<json_value> pt = root.find("/pre_tokenizer");
    if (!pt || !read_pre_tokenizer(*pt, c)) {
        fail_input(
            "{}: /pre_tokenizer (type {}) has no ByteLevel step, so this is not a byte-level BPE "
            "(/model/byte_fallback = {}); supported: byte-level BPE as GPT-2, OPT, Qwen2/3 and Llama-3 use "
            "it; for a SentencePiece model such as Llama-2 load its GGUF file",
            file, pt ? pt->at("/type").json().dump() : "null", model.optional<bool>("/byte_fallback").value_or(false));
    }
    if (const auto norm = root.find("/normalizer")) {
        const std::function<void(const json_value &)> check = [&](const json_value & n) {
            const json_value type = n.at("/type", "a string");
            const std::string name = type.get<std::string>();
            if (name == "Sequence") {
                const json_value list = n.at("/normalizers", "an array");
                for (size_t i = 0; i < list.size(); ++i) check(list.item(i));
            } else if (name != "NFC") {
                fail_input("{}: '{}' is not supported (supported: null, NFC)", type.where(), name);
            }
        };
        check(*norm);
    }
    c.ignore_merges = model.optional<bool>("/ignore_merges").value_or(false);

    read_vocab_object(model.at("/vocab", "an object"), c.vocab);
    const json_value merges = model.at("/merges", "an array");
    c.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
        const json_value m = merges.item(i);
        if (m.json().is_string()) {
            auto ab = split_merge(m.get<std::string>());
            if (!ab) m.fail_expected("\"a b\": two pieces separated by one space");
            c.merges.push_back(std::move(*ab));
        } else if (m.json().is_array() && m.json().size() == 2) {
            c.merges.emplace_back(m.item(0).get<std::string>(), m.item(1).get<std::string>());
        } else {
            m.fail_expected("\"a b\" or [\"a\", \"b\"]");
        }
    }

    if (const auto added = root.find("/added_tokens")) {
        for (size_t i = 0; i < added->size(); ++i) {
            const json_value t = added->item(i);
            add_added_token(c, t, token_id(t.at("/id", "a token id")));
        }
    }
    if (const auto unk = model.find("/unk_token")) {
        const int32_t id = find_token(c.vocab, unk->get<std::string>());
        if (id < 0) unk->fail_expected("a token of /model/vocab");
        c.vocab.unk = id;
    }

    const std::optional<json_file> cfg_doc = load_tokenizer_config(tokenizer_config_path);
    const std::optional<json_value> cfg = cfg_doc ? std::optional(cfg_doc->root()) : std::nullopt;
    const int32_t unk = c.vocab.unk;
    apply_config(c, cfg, template_bos(root.find("/post_processor"), c.vocab));
    if (c.vocab.unk < 0) c.vocab.unk = unk;
    c.vocab.scores.assign(c.vocab.pieces.size(), 0.0f);
    return std::make_unique<bpe_tokenizer>(std::move(c));
}

std::unique_ptr<tokenizer> load_vocab_merges_tokenizer(const std::string & vocab_json_path,
                                                       const std::string & merges_path,
                                                       const std::string & tokenizer_config_path) {
    bpe_config c;
    c.source = merges_path;
    c.patterns = {k_bpe_pattern_gpt2};
    read_vocab_object(json_file::load(vocab_json_path, "the vocabulary").root(), c.vocab);

    const mapped_file map(merges_path);
    const std::string_view text(reinterpret_cast<const char *>(map.data()), map.size());
    size_t pos = 0;
    int64_t line_no = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
        auto ab = split_merge(line);
        if (!ab) {
            fail_input("'{}': line {} is '{}', expected a merge: two pieces separated by one space", merges_path,
                       line_no, line);
        }
        if (c.merges.empty()) c.merges_line0 = line_no;
        c.merges.push_back(std::move(*ab));
    }
    // Merge i is on line merges_line0 + i only when no empty line intervenes; blank lines are
    // rare (none in GPT-2's or OPT's files) and then the reported line is approximate.

    const std::optional<json_file> cfg_doc = load_tokenizer_config(tokenizer_config_path);
    const std::optional<json_value> cfg = cfg_doc ? std::optional(cfg_doc->root()) : std::nullopt;
    if (const std::optional<json_value> dec = cfg ? cfg->find("/added_tokens_decoder") : std::nullopt) {
        dec->for_each_member([&](const std::string & key, const json_value & t) {
            char * end = nullptr;
            const long long id = std::strtoll(key.c_str(), &end, 10);
            if (key.empty() || *end != '\0' || id < 0 || id >= k_max_id) {
                fail_input("{}: added_tokens_decoder key '{}' is not a token id", cfg->name(), key);
            }
            add_added_token(c, t, int32_t(id));
        });
    }
    apply_config(c, cfg, -1);
    c.vocab.add_space_prefix = false;
    c.vocab.scores.assign(c.vocab.pieces.size(), 0.0f);
    return std::make_unique<bpe_tokenizer>(std::move(c));
}

std::unique_ptr<tokenizer> load_tokenizer_folder(const std::string & dir) {
    namespace fs = std::filesystem;
    const auto file = [&](const char * name) { return (fs::path(dir) / name).string(); };
    const auto has = [&](const char * name) { return fs::is_regular_file(file(name)); };
    const std::string config = has("tokenizer_config.json") ? file("tokenizer_config.json") : std::string();
    if (has("tokenizer.json")) return load_tokenizer_json(file("tokenizer.json"), config);
    if (has("vocab.json") && has("merges.txt")) {
        return load_vocab_merges_tokenizer(file("vocab.json"), file("merges.txt"), config);
    }
    if (has("encoder.json") && has("vocab.bpe")) {
        return load_vocab_merges_tokenizer(file("encoder.json"), file("vocab.bpe"), config);
    }
    fail_input("'{}' holds no tokenizer: expected tokenizer.json, vocab.json + merges.txt, or encoder.json + vocab.bpe",
               dir);
}

}  // namespace hill
