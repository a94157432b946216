#include "model/hf_convert.h"
#include "model/weight_scheme.h"

#include "compute/matmul.h"
#include "core/error.h"
#include "format/gguf_writer.h"
#include "format/hf_checkpoint.h"
#include "format/json_file.h"
#include "model/hf_names.h"
#include "model/model_loader.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

namespace fs = std::filesystem;

namespace hill {

namespace {

using json = nlohmann::json;

// --- hyperparameters ---------------------------------------------------------------------------

void write_hparams(gguf_writer & w, const hparams & hp, const std::string & arch) {
    const std::string a = arch + ".";
    w.set_u32(a + "vocab_size", uint32_t(hp.n_vocab));
    w.set_u32(a + "context_length", uint32_t(hp.n_ctx_train));
    w.set_u32(a + "embedding_length", uint32_t(hp.n_embd));
    w.set_u32(a + "block_count", uint32_t(hp.n_layer));
    // Qwen-1: llama.cpp writes intermediate_size, twice the w1/w2 width (the loader halves it).
    w.set_u32(a + "feed_forward_length", uint32_t(arch == "qwen" ? 2 * hp.n_ff : hp.n_ff));
    w.set_u32(a + "attention.head_count", uint32_t(hp.n_head));
    w.set_u32(a + "attention.head_count_kv", uint32_t(hp.n_head_kv));
    if (int64_t(hp.head_dim) * hp.n_head != hp.n_embd) {
        w.set_u32(a + "attention.key_length", uint32_t(hp.head_dim));
        w.set_u32(a + "attention.value_length", uint32_t(hp.head_dim));
    }
    if (hp.norm == norm_kind::rms) {
        w.set_f32(a + "attention.layer_norm_rms_epsilon", hp.rms_eps);
    } else {
        w.set_f32(a + "attention.layer_norm_epsilon", hp.rms_eps);
    }
    if (hp.position == position_kind::rope) {
        w.set_u32(a + "rope.dimension_count", uint32_t(hp.head_dim));
        w.set_f32(a + "rope.freq_base", hp.rope_freq_base);
        if (hp.rope_freq_scale != 1.0f) {
            w.set_string(a + "rope.scaling.type", "linear");
            w.set_f32(a + "rope.scaling.factor", 1.0f / hp.rope_freq_scale);
        }
    }
    if (hp.n_swa > 0) w.set_u32(a + "attention.sliding_window", uint32_t(hp.n_swa));  // every layer (checked)
    if (arch == "opt") {
        w.set_u32(a + "word_embedding_length", uint32_t(hp.n_embd_word));
        w.set_bool(a + "layer_norm_before", hp.norm_before);
    }
}

// --- tensors -----------------------------------------------------------------------------------

// The tensor as f32 (an aligned copy; safetensors data need not be aligned), rows permuted when
// asked.
std::vector<float> to_f32(const safetensors_tensor & t, hf_permutation perm, const hparams & hp) {
    const int64_t n = t.n_elements();
    std::vector<uint8_t> raw(t.size_bytes);
    if (perm == hf_permutation::none) {
        if (t.size_bytes > 0) std::memcpy(raw.data(), t.data, t.size_bytes);
    } else {
        const int64_t n_rows = t.shape.empty() ? 1 : t.shape[0];
        const size_t row_bytes = n_rows > 0 ? size_t(t.size_bytes / uint64_t(n_rows)) : 0;
        const int64_t n_head = perm == hf_permutation::q ? hp.n_head : hp.n_head_kv;
        if (n_rows != int64_t(n_head) * hp.head_dim) {
            fail_input("tensor '{}' has {} rows, expected {} heads × head_dim {} = {}", t.name, n_rows, n_head,
                       hp.head_dim, int64_t(n_head) * hp.head_dim);
        }
        permute_rotate_half_to_pairs(t.data, raw.data(), n_rows, row_bytes, n_head);
    }
    std::vector<float> out(static_cast<size_t>(n));
    if (n > 0) dequantize_row(t.type, raw.data(), out.data(), n);
    return out;
}

// --- tokenizer ---------------------------------------------------------------------------------

// A special token in tokenizer_config.json: a string or {"content": string}.
std::string token_text(const json_value & v) {
    return v.json().is_object() ? v.required<std::string>("/content") : v.get<std::string>();
}

// Merges of a tokenizer.json (/model/merges: "a b" strings or [a, b] pairs) as "a b" strings.
std::vector<std::string> json_merges(const json_value & root) {
    std::vector<std::string> out;
    const std::optional<json_value> merges = root.find("/model/merges");
    if (!merges) return out;
    out.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
        const json_value m = merges->item(i);
        if (m.json().is_string()) {
            out.push_back(m.get<std::string>());
        } else if (m.json().is_array() && m.json().size() == 2) {
            out.push_back(m.item(0).get<std::string>() + " " + m.item(1).get<std::string>());
        } else {
            m.fail_expected("\"a b\" or [\"a\", \"b\"]");
        }
    }
    return out;
}

// merges.txt / vocab.bpe: an optional "#version" line, then "a b" per line.
std::vector<std::string> text_merges(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail_input("cannot open '{}'", path);
    std::vector<std::string> out;
    std::string line;
    bool first = true;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (first && line.starts_with("#version")) {
            first = false;
            continue;
        }
        first = false;
        if (!line.empty()) out.push_back(line);
    }
    return out;
}

// True for a SentencePiece-style tokenizer.json (Llama-2, Mistral): BPE with byte_fallback, or the
// U+2581 space marker from a Metaspace pre-tokenizer / decoder or a Replace normalizer.
bool is_spm_style(const json_value & root) {
    if (root.optional<bool>("/model/byte_fallback").value_or(false)) return true;
    const json & r = root.json();
    const std::string dump = r.value("pre_tokenizer", json()).dump() + r.value("normalizer", json()).dump();
    return dump.find("Metaspace") != std::string::npos || dump.find("\xe2\x96\x81") != std::string::npos;
}

// GGUF `tokenizer.ggml.pre` for the pre-tokenizer regexes of a byte-level BPE.
std::string gguf_pre_name(const bpe_tokenizer & t, const std::string & file) {
    const std::vector<std::string> & p = t.patterns();
    if (p.size() == 1 && p[0] == k_bpe_pattern_gpt2) return "gpt-2";
    if (p.size() == 1 && p[0] == k_bpe_pattern_qwen2) return "qwen2";
    if (p.size() == 1 && p[0] == k_bpe_pattern_llama3) return "llama-bpe";
    fail_input("'{}': the pre-tokenizer ({} regex{}) is not one GGUF names; supported: the GPT-2, Qwen2 and "
               "Llama-3 patterns (tokenizer.ggml.pre gpt-2, qwen2, llama-bpe)",
               file, p.size(), p.size() == 1 ? "" : "es");
}

// GGUF readers take the vocabulary size from the token list, which must match the embedding rows:
// pad with unused "[PAD{id}]" tokens up to the model's vocab_size (as llama.cpp's converter does).
void pad_vocab(std::vector<std::string> & pieces, std::vector<int32_t> & types, std::vector<float> * scores,
               int64_t n_vocab, const std::string & source) {
    if (int64_t(pieces.size()) > n_vocab) {
        fail_input("'{}': the tokenizer has {} tokens, more than the model's vocab_size {} in config.json", source,
                   pieces.size(), n_vocab);
    }
    for (int64_t id = int64_t(pieces.size()); id < n_vocab; ++id) {
        pieces.push_back(fmt::format("[PAD{}]", id));
        types.push_back(int32_t(token_kind::unused));
        if (scores != nullptr) scores->push_back(0.0f);
    }
}

void write_bpe_tokenizer(gguf_writer & w, const std::string & dir, int64_t n_vocab, convert_result & r) {
    const fs::path d(dir);
    const std::unique_ptr<tokenizer> tok = load_tokenizer_folder(dir);
    const auto * bpe = dynamic_cast<const bpe_tokenizer *>(tok.get());
    HILL_ASSERT(bpe != nullptr);
    std::vector<std::string> merges;
    std::string source;
    if (fs::is_regular_file(d / "tokenizer.json")) {
        source = (d / "tokenizer.json").string();
        merges = json_merges(json_file::load(source, "the tokenizer").root());
    } else if (fs::is_regular_file(d / "merges.txt")) {
        source = (d / "merges.txt").string();
        merges = text_merges(source);
    } else {
        source = (d / "vocab.bpe").string();
        merges = text_merges(source);
    }
    if (int64_t(merges.size()) != bpe->n_merges()) {
        fail_input("'{}': read {} merges, the tokenizer loaded {}", source, merges.size(), bpe->n_merges());
    }
    const vocab & v = tok->vocab();
    std::vector<std::string> pieces = v.pieces;
    std::vector<int32_t> types(v.kinds.size());
    for (size_t i = 0; i < types.size(); ++i) types[i] = int32_t(v.kinds[i]);
    pad_vocab(pieces, types, nullptr, n_vocab, source);
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", gguf_pre_name(*bpe, source));
    w.set_string_array("tokenizer.ggml.tokens", pieces);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    w.set_string_array("tokenizer.ggml.merges", merges);
    if (v.bos >= 0) w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(v.bos));
    if (v.eos >= 0) w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(v.eos));
    if (v.unk >= 0) w.set_u32("tokenizer.ggml.unknown_token_id", uint32_t(v.unk));
    w.set_bool("tokenizer.ggml.add_bos_token", v.add_bos);
    w.set_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
    r.tokenizer_model = "gpt2";
}

// SentencePiece-style tokenizer.json -> tokenizer.ggml.model "llama". Scores follow the merge
// ranks (the piece made by merge r scores −r), so that the SPM rule "merge the best-scoring pair
// first" applies the merges in the order the BPE model does.
void write_spm_tokenizer(gguf_writer & w, const json_value & root, const std::string & config_path,
                         int64_t n_vocab_model, convert_result & r) {
    const std::string & file = root.name();
    const json_value model = root.at("/model", "an object");
    std::map<int64_t, std::string> by_id;
    model.at("/vocab", "an object").for_each_member([&](const std::string & piece, const json_value & id) {
        by_id[id.get_int(0, INT32_MAX - 1)] = piece;
    });
    std::map<int64_t, bool> added;  // id -> special
    if (const std::optional<json_value> tokens = root.find("/added_tokens")) {
        for (size_t i = 0; i < tokens->size(); ++i) {
            const json_value a = tokens->item(i);
            const int64_t id = a.required_int("/id", 0, INT32_MAX - 1);
            by_id[id] = a.optional<std::string>("/content").value_or("");
            added[id] = a.optional<bool>("/special").value_or(false);
        }
    }
    if (by_id.empty()) fail_input("'{}': the vocabulary is empty", file);
    const int64_t n_vocab = by_id.rbegin()->first + 1;

    std::vector<std::string> pieces(static_cast<size_t>(n_vocab));
    std::vector<float> scores(size_t(n_vocab), 0.0f);
    std::vector<int32_t> types(size_t(n_vocab), int32_t(token_kind::unused));
    std::map<std::string, int64_t> id_of;
    for (int64_t id = 0; id < n_vocab; ++id) {
        const auto it = by_id.find(id);
        pieces[size_t(id)] = it != by_id.end() ? it->second : fmt::format("[PAD{}]", id);
        if (it != by_id.end()) {
            types[size_t(id)] = int32_t(token_kind::normal);
            id_of.emplace(it->second, id);
        }
    }
    const std::string unk = model.optional<std::string>("/unk_token").value_or("");
    const std::vector<std::string> merges = json_merges(root);
    // Pieces no merge makes rank below every merge result; single characters never compete.
    for (int64_t id = 0; id < n_vocab; ++id) scores[size_t(id)] = -float(int64_t(merges.size()) + id);
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const std::string & m = merges[rank];
        const size_t sp = m.find(' ');
        if (sp == std::string::npos) fail_input("'{}': model.merges[{}] = '{}' has no space", file, rank, m);
        const auto it = id_of.find(m.substr(0, sp) + m.substr(sp + 1));
        if (it != id_of.end()) scores[size_t(it->second)] = std::max(scores[size_t(it->second)], -float(rank));
    }
    for (int64_t id = 0; id < n_vocab; ++id) {
        const std::string & p = pieces[size_t(id)];
        if (types[size_t(id)] != int32_t(token_kind::normal)) continue;
        if (p.size() == 6 && p.starts_with("<0x") && p.back() == '>') {
            types[size_t(id)] = int32_t(token_kind::byte);
            scores[size_t(id)] = 0.0f;
        } else if (!unk.empty() && p == unk) {
            types[size_t(id)] = int32_t(token_kind::unknown);
            scores[size_t(id)] = 0.0f;
        }
        if (const auto a = added.find(id); a != added.end()) {
            types[size_t(id)] = int32_t(a->second ? token_kind::control : token_kind::user_defined);
            scores[size_t(id)] = 0.0f;
        }
    }
    // BOS/EOS from tokenizer_config.json, else the SentencePiece defaults when present.
    std::optional<json_file> config_doc;
    if (!config_path.empty()) config_doc.emplace(json_file::load(config_path, "the tokenizer config"));
    const std::optional<json_value> config = config_doc ? std::optional(config_doc->root()) : std::nullopt;
    const auto id_for = [&](const char * pointer, const char * fallback) -> int64_t {
        const std::optional<json_value> v = config ? config->find(pointer) : std::nullopt;
        std::string text = v ? token_text(*v) : "";
        if (text.empty()) text = fallback;
        const auto it = id_of.find(text);
        return it == id_of.end() ? -1 : it->second;
    };
    const int64_t bos = id_for("/bos_token", "<s>"), eos = id_for("/eos_token", "</s>");
    const int64_t unk_id = unk.empty() ? -1 : (id_of.count(unk) ? id_of[unk] : -1);
    const bool add_bos = config ? config->optional<bool>("/add_bos_token").value_or(true) : true;
    // Space prefix: a Prepend("▁") normalizer, or a Metaspace pre-tokenizer that adds one.
    const std::string norm = root.json().value("normalizer", json()).dump();
    bool add_space_prefix = norm.find("Prepend") != std::string::npos;
    if (const std::optional<json_value> pt = root.find("/pre_tokenizer");
        pt && pt->optional<std::string>("/type") == "Metaspace") {
        add_space_prefix = pt->optional<bool>("/add_prefix_space").value_or(true) &&
                           pt->optional<std::string>("/prepend_scheme").value_or("always") != "never";
    }

    pad_vocab(pieces, types, &scores, n_vocab_model, file);
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", pieces);
    w.set_f32_array("tokenizer.ggml.scores", scores);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    if (bos >= 0) w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(bos));
    if (eos >= 0) w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(eos));
    if (unk_id >= 0) w.set_u32("tokenizer.ggml.unknown_token_id", uint32_t(unk_id));
    w.set_bool("tokenizer.ggml.add_bos_token", add_bos);
    w.set_bool("tokenizer.ggml.add_space_prefix", add_space_prefix);
    r.tokenizer_model = "llama";
}

void write_tokenizer(gguf_writer & w, const hf_checkpoint & c, int64_t n_vocab, convert_result & r) {
    const fs::path d(c.dir());
    const std::string tj = c.tokenizer_json_path();
    if (!tj.empty()) {
        const json_file doc = json_file::load(tj, "the tokenizer");
        if (is_spm_style(doc.root())) {
            write_spm_tokenizer(w, doc.root(), c.tokenizer_config_path(), n_vocab, r);
        } else {
            write_bpe_tokenizer(w, c.dir(), n_vocab, r);
        }
    } else if ((fs::is_regular_file(d / "vocab.json") && fs::is_regular_file(d / "merges.txt")) ||
               (fs::is_regular_file(d / "encoder.json") && fs::is_regular_file(d / "vocab.bpe"))) {
        write_bpe_tokenizer(w, c.dir(), n_vocab, r);
    } else {
        r.warnings.push_back(fmt::format(
            "'{}' holds no tokenizer (tokenizer.json, vocab.json + merges.txt, encoder.json + vocab.bpe): the GGUF file "
            "has no tokenizer.ggml.* keys and runs on token ids only",
            c.dir()));
    }
    // The chat template of tokenizer_config.json, under the key llama.cpp's converter uses.
    if (const std::string t = read_chat_template(c.dir()); !t.empty()) w.set_string("tokenizer.chat_template", t);
}

}  // namespace

convert_result convert_hf_to_gguf(const std::string & dir, const std::string & out, const convert_params & p) {
    const std::unique_ptr<hf_checkpoint> ckpt = hf_checkpoint::open(dir);
    const hf_checkpoint & c = *ckpt;
    // Never write over what is being read: the output may not be one of the checkpoint's own files.
    {
        namespace fs = std::filesystem;
        std::error_code ec;
        const fs::path target = fs::weakly_canonical(out, ec);
        std::vector<std::string> inputs = {c.config_path(), c.tokenizer_json_path(), c.tokenizer_config_path()};
        // The index and the files of the tokenizers other than tokenizer.json (write_tokenizer).
        for (const char * f :
             {"model.safetensors.index.json", "vocab.json", "merges.txt", "encoder.json", "vocab.bpe"}) {
            inputs.push_back((fs::path(c.dir()) / f).string());
        }
        for (const auto & shard : c.shards()) inputs.push_back(shard->path());
        for (const std::string & in : inputs) {
            if (!in.empty() && fs::exists(in, ec) && fs::equivalent(in, target, ec)) {
                fail_usage("convert: the output '{}' is the checkpoint's own file '{}'; choose another -o", out, in);
            }
        }
    }
    // The weights as the loader takes them (every tensor present with its shape): a folder the engine
    // cannot run is refused before anything is written.
    model_loader::load_hf(dir, /*with_tokenizer=*/false);
    convert_result r;
    r.arch = hf_architecture(c);
    const architecture_loader * a = model_loader::find(r.arch);
    if (a == nullptr) {
        fail_input("'{}': architecture '{}' has no loader; supported: {}", c.config_path(), r.arch,
                   model_loader::supported(false));
    }
    hparams hp;
    a->hparams_from_hf(c, hp);
    model_loader::check_hparams(hp, c.config_path());
    // What write_hparams cannot express yet: Gemma's norms (+1) and keys, LongRoPE factors, a window
    // on some layers only. Refused rather than written wrong; the folder itself loads.
    if (r.arch == "gemma2" || r.arch == "gemma3" || r.arch == "phi3") {
        fail_input("'{}': convert does not write architecture '{}' yet; run the folder itself (-m {})",
                   c.config_path(), r.arch, dir);
    }
    if (std::count(hp.swa_layers.begin(), hp.swa_layers.end(), 1) != int64_t(hp.swa_layers.size())) {
        fail_input("'{}': sliding_window applies to some layers only; convert writes a window for every layer; "
                   "run the folder itself (-m {})", c.config_path(), dir);
    }

    const std::vector<hf_tensor_mapping> tensors = hf_tensor_map(c, r.arch);
    // Default type: as token_embd is stored.
    r.type = ggml_type::f32;
    bool has_output = false;
    for (const hf_tensor_mapping & t : tensors) {
        if (t.gguf_name == "token_embd.weight") r.type = c.find(t.hf_name)->type;
        if (t.gguf_name == "output.weight") has_output = true;
    }
    if (p.type) r.type = *p.type;
    if (!weight_scheme_from_name(weight_scheme_name(r.type))) {
        fail_usage("convert: type {} is not supported; supported: {}", weight_scheme_name(r.type), weight_scheme_names());
    }

    gguf_writer w;
    w.set_string("general.architecture", r.arch);
    std::string name = fs::path(dir).lexically_normal().filename().string();
    if (name.empty()) name = fs::path(dir).lexically_normal().parent_path().filename().string();
    w.set_string("general.name", name);
    w.set_u32("general.file_type", weight_scheme_file_type(r.type));
    if (ggml_block_size(r.type.type) > 1) w.set_u32("general.quantization_version", 2);
    write_hparams(w, hp, r.arch);
    write_tokenizer(w, c, hp.n_vocab, r);

    std::vector<uint8_t> buf;
    for (const hf_tensor_mapping & m : tensors) {
        const safetensors_tensor & t = *c.find(m.hf_name);
        if (t.shape.empty() || t.shape.size() > 4) {
            fail_input("'{}': tensor '{}' has {} dimensions; GGUF tensors have 1 to 4", dir, m.hf_name, t.shape.size());
        }
        for (int64_t d : t.shape) {
            if (d == 0) fail_input("'{}': tensor '{}' is empty (shape has a 0); GGUF cannot store it", dir, m.hf_name);
        }
        std::vector<int64_t> ne(t.shape.rbegin(), t.shape.rend());  // GGUF: innermost first
        ggml_type type = ggml_type::f32;
        if (t.shape.size() >= 2) {
            const weight_choice wc = weight_scheme_type(r.type, m.gguf_name, ne[0], hp.n_layer, has_output);
            type = wc.type;
            if (wc.fallback) ++r.n_fallback;
        }
        if (m.permutation != hf_permutation::none) ++r.n_permuted;
        const int64_t n = t.n_elements();
        if (type == t.type && m.permutation == hf_permutation::none) {
            w.add_tensor(m.gguf_name, type, ne, t.data);
        } else {
            const std::vector<float> f = to_f32(t, m.permutation, hp);
            const int64_t row = ne[0], n_rows = n / row;
            const size_t row_bytes = *ggml_row_bytes(type, row);
            buf.resize(row_bytes * size_t(n_rows));
            for (int64_t i = 0; i < n_rows; ++i) {
                quantize_row(type, f.data() + i * row, buf.data() + size_t(i) * row_bytes, row);
            }
            w.add_tensor(m.gguf_name, type, ne, buf.data());
        }
        ++r.n_tensors;
    }
    if (!hp.rope_freq_factors.empty()) {
        w.add_tensor("rope_freqs.weight", ggml_type::f32, {int64_t(hp.rope_freq_factors.size())},
                     hp.rope_freq_factors.data());
        ++r.n_tensors;
    }
    w.write(out);
    std::error_code ec;
    r.bytes_written = fs::file_size(out, ec);
    return r;
}

}  // namespace hill
