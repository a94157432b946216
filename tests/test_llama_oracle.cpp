// llama.cpp as the oracle (issue 15 item 6): HillInfer's token ids and logits against llama.cpp's
// on the same files, through tests/oracle/llama_oracle.cpp, which scripts/llamacpp.sh builds from
// the npm registry's llama.cpp (headers from node-llama-cpp's source bundle, the prebuilt libllama
// of @node-llama-cpp/linux-x64). The oracle lives in $HILL_LLAMACPP_DIR (default
// ${XDG_CACHE_HOME:-~/.cache}/hillinfer/llamacpp, as the script has it); without it every test
// here skips, naming the reason the script recorded (registry unreachable, no npm, ...) or asking
// to run the script.
//
// 1. Tokenizers: every vocabulary in ../shared/data/tokenizers — GGUF vocab files as they are,
//    llama2.c tokenizer.bin files written as vocab-only GGUFs from the vocabulary HillInfer reads,
//    Hugging Face folders converted by `hillinfer convert` (convert_hf_to_gguf on a tiny checkpoint
//    that carries the folder's tokenizer) — give llama.cpp's ids on the text fixtures (llama.cpp's
//    `.inp` test strings, book and story snippets, special-token strings): plain (encode(text,
//    false) = llama_tokenize without BOS and special parsing) and with BOS and special tokens
//    parsed (encode_with_special(text, true)). The vocabularies of llama.cpp's own tokenizer tests
//    (models/ggml-vocab-*.gguf in the source bundle) are compared wherever HillInfer loads them;
//    the ones it refuses are listed.
// 2. Logits: for every architecture `make-model random` writes and every weight type (the table
//    k_weight_cases: types HillInfer writes, and llama.cpp's quantization mixes made by the oracle),
//    a tiny generated model decodes 64 greedy steps in llama.cpp; HillInfer, fed the same tokens,
//    picks the same id at every step, its logits stay within the row's bound of llama.cpp's (max
//    |diff| / max |logit| per step, measured, then bounded with a margin) and the perplexity of a
//    story differs by less than 0.5%.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/session.h"
#include "format/gguf_file.h"
#include "format/gguf_writer.h"
#include "hf_test_util.h"
#include "model/hf_convert.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "test_util.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace hill {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// --- the oracle ---------------------------------------------------------------------------------

// Where scripts/llamacpp.sh puts llama.cpp (keep the two defaults equal).
std::string llamacpp_dir() {
    if (const char * d = std::getenv("HILL_LLAMACPP_DIR"); d != nullptr && *d != '\0') return d;
    if (const char * x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
        return std::string(x) + "/hillinfer/llamacpp";
    }
    const char * home = std::getenv("HOME");
    return std::string(home != nullptr ? home : "") + "/.cache/hillinfer/llamacpp";
}

// The oracle's path, or "" with `why` saying why there is none.
std::string oracle_path(std::string & why) {
    const std::string dir = llamacpp_dir();
    const std::string exe = dir + "/llama_oracle";
    if (::access(exe.c_str(), X_OK) == 0) return exe;
    std::ifstream f(dir + "/unavailable.txt");
    const std::string reason(std::istreambuf_iterator<char>(f), {});
    why = reason.empty() ? "llama.cpp oracle not found at " + exe +
                               ": run scripts/llamacpp.sh (it fetches llama.cpp from the npm registry)"
                         : "llama.cpp oracle unavailable (scripts/llamacpp.sh): " + reason;
    return "";
}

#define HILL_REQUIRE_ORACLE(var)                    \
    std::string var##_why;                          \
    const std::string var = oracle_path(var##_why); \
    if (var.empty()) GTEST_SKIP() << var##_why

std::string quoted(const std::string & s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// Runs the oracle; its stdout, or nullopt and a failure naming the command and its stderr.
std::optional<std::string> run_oracle(const std::string & exe, const std::string & args) {
    const test::temp_dir io;
    const std::string cmd = quoted(exe) + " " + args + " > " + quoted(io.file("out")) + " 2> " + quoted(io.file("err"));
    const int st = std::system(cmd.c_str());
    if (st == 0) return test::read_all(io.file("out"));
    ADD_FAILURE() << exe << " " << args << ": exit status " << st << "\n" << test::read_all(io.file("err"));
    return std::nullopt;
}

std::string ids_arg(const std::vector<int32_t> & ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
    return s;
}

// --- 1. tokenizers ------------------------------------------------------------------------------

// A text fixture: a name for messages and the text.
struct fixture {
    std::string name;
    std::string text;
};

// Whole characters of `text` from byte a, about `len` bytes.
std::string utf8_slice(const std::string & text, size_t a, size_t len) {
    while (a < text.size() && (uint8_t(text[a]) & 0xC0) == 0x80) ++a;
    size_t b = std::min(text.size(), a + len);
    while (b < text.size() && (uint8_t(text[b]) & 0xC0) == 0x80) ++b;
    return text.substr(a, b - a);
}

// The project's text fixtures: llama.cpp's `.inp` test strings (shared data and, when fetched, the
// source bundle's), snippets of a book, of the TinyStories stories and of an essay, and strings
// that spell special tokens.
std::vector<fixture> text_fixtures() {
    std::vector<fixture> out;
    std::vector<std::string> inp_files;
    for (const std::string & dir : {test::data_dir() + "/tokenizers/llamacpp-vocab", llamacpp_dir() + "/src/models"}) {
        std::error_code ec;
        for (const auto & e : fs::directory_iterator(dir, ec)) {
            if (e.path().extension() == ".inp") inp_files.push_back(e.path().string());
        }
    }
    std::sort(inp_files.begin(), inp_files.end());
    std::map<std::string, bool> seen;
    const std::string sep = "\n__ggml_vocab_test__\n";
    for (const std::string & f : inp_files) {
        // Some of the bundle's files end with a last string and no separator line.
        std::string text = test::read_all(f);
        if (!text.empty() &&
            (text.size() < sep.size() || text.compare(text.size() - sep.size(), sep.size(), sep) != 0)) {
            text += sep;
        }
        const std::vector<std::string> cases = test::split_inp(text);
        for (size_t i = 0; i < cases.size(); ++i) {
            if (seen.emplace(cases[i], true).second) {
                out.push_back({fs::path(f).filename().string() + " #" + std::to_string(i), cases[i]});
            }
        }
    }
    for (const char * rel :
         {"text/gutenberg/pg11_alice_in_wonderland.txt", "text/tinystories/tinystories_validation_first1000.txt",
          "text/niah_paul_graham_essays/avg.txt"}) {
        const std::string p = test::data_path(rel);
        if (p.empty()) continue;
        const std::string t = test::read_all(p);
        for (size_t k = 0; k < 6; ++k) {
            out.push_back({std::string(rel) + " @" + std::to_string(k), utf8_slice(t, t.size() * k / 6, 600)});
        }
    }
    // Not "</s>" in a vocabulary where it is a normal token (Qwen's): llama.cpp then overrides its type
    // to control, a heuristic for end-of-generation markers that Hugging Face's tokenizers, and
    // HillInfer, do not apply.
    for (const char * s : {"<s>Hello world", "<|endoftext|>Hi<|endoftext|>", "<|begin_of_text|>Hello",
                           "<|im_start|>user\nHi<|im_end|>\n", "a<unk>b", "  <s> x"}) {
        out.push_back({"special", s});
    }
    return out;
}

// Writes the fixtures in llama.cpp's `.inp` framing for the oracle's tokenize command.
std::string write_inp(const test::temp_dir & dir, const std::vector<fixture> & fx) {
    const std::string path = dir.file("texts.inp");
    std::ofstream f(path, std::ios::binary);
    for (const fixture & x : fx) f << x.text << "\n__ggml_vocab_test__\n";
    EXPECT_TRUE(f.good()) << path;
    return path;
}

// HillInfer's ids of every fixture against llama.cpp's on `gguf`, plain and with BOS and special
// tokens parsed; `t` is HillInfer's tokenizer of the same vocabulary. Every difference fails, except
// in the second mode for a SentencePiece vocabulary: HillInfer's SPM tokenizer does not parse control
// tokens spelled in the text (tokenizer.h, encode_with_special), llama.cpp's does; those are counted
// and printed. `known`: a difference listed in k_known_differences, counted and printed, not
// failed. Returns the number of differences.
size_t compare_tokenizer(const std::string & oracle, const tokenizer & t, const std::string & gguf,
                         const std::string & inp, const std::vector<fixture> & fx, const std::string & what,
                         bool known = false) {
    const bool spm = dynamic_cast<const spm_tokenizer *>(&t) != nullptr;
    size_t n_bad = 0, n_spm_special = 0;
    const std::optional<std::string> out = run_oracle(oracle, "tokenize " + quoted(gguf) + " " + quoted(inp));
    if (!out) return fx.size();
    const json ref_all = json::parse(*out);
    for (const bool special : {false, true}) {
        const json & ref = ref_all.at(special ? "special" : "plain");
        EXPECT_EQ(ref.size(), fx.size()) << what;
        for (size_t i = 0; i < fx.size() && i < ref.size(); ++i) {
            const std::vector<int32_t> want = ref[i].get<std::vector<int32_t>>();
            const std::vector<int32_t> got =
                special ? t.encode_with_special(fx[i].text, true) : t.encode(fx[i].text, false);
            if (got == want) continue;
            if (special && spm) {
                ++n_spm_special;
                continue;
            }
            ++n_bad;
            const std::string msg = what + (special ? " (BOS, special tokens parsed)" : " (plain)") + ": fixture " +
                                    fx[i].name + " '" + fx[i].text.substr(0, 80) + "': HillInfer [" + ids_arg(got) +
                                    "], llama.cpp [" + ids_arg(want) + "]";
            if (known) {
                std::printf("  %s\n", msg.c_str());
            } else {
                ADD_FAILURE() << msg;
            }
        }
    }
    std::printf("%-32s %zu fixtures x 2 modes: %zu differ from llama.cpp", what.c_str(), fx.size(), n_bad);
    if (n_spm_special > 0) std::printf(" (+%zu with special tokens parsed: not in HillInfer's SPM)", n_spm_special);
    std::printf("\n");
    return n_bad;
}

// The `llama.*` hyperparameter keys a llama.cpp loader reads even for a vocabulary-only model.
void write_llama_header(gguf_writer & w, const std::string & name, int64_t n_vocab) {
    w.set_string("general.architecture", "llama");
    w.set_string("general.name", name);
    w.set_u32("llama.vocab_size", uint32_t(n_vocab));
    w.set_u32("llama.context_length", 4096);
    w.set_u32("llama.embedding_length", 64);
    w.set_u32("llama.feed_forward_length", 256);
    w.set_u32("llama.block_count", 1);
    w.set_u32("llama.attention.head_count", 1);
    w.set_u32("llama.attention.head_count_kv", 1);
    w.set_u32("llama.rope.dimension_count", 64);
    w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
}

// A vocab-only GGUF (tokenizer.ggml.model "llama") of a SentencePiece vocabulary HillInfer read.
void write_spm_vocab_gguf(const vocab & v, const std::string & path, const std::string & name) {
    gguf_writer w;
    write_llama_header(w, name, v.n_vocab());
    std::vector<int32_t> types;
    for (token_kind k : v.kinds) types.push_back(int32_t(k));
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", v.pieces);
    w.set_f32_array("tokenizer.ggml.scores", v.scores);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    if (v.bos >= 0) w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(v.bos));
    if (v.eos >= 0) w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(v.eos));
    if (v.unk >= 0) w.set_u32("tokenizer.ggml.unknown_token_id", uint32_t(v.unk));
    w.set_bool("tokenizer.ggml.add_bos_token", v.add_bos);
    w.set_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
    w.write(path);
}

// Vocabularies (llama.cpp's test files by name, "pre NAME" for a pre-tokenizer name) that HillInfer
// loads but tokenizes differently from llama.cpp today, with the reason: printed rather than failed;
// one that matches fails its test until it is removed from here.
const std::string k_digits_from_right =
    "digits: HillInfer groups a run of digits in threes from the left (1314151 -> 131 415 1), llama.cpp from "
    "the right (1 314 151) (issue 15 item 3)";
const std::string k_gutenberg_digits =
    "the Alice snippet @0 (the Project Gutenberg header: dates, numbers) splits differently; not analyzed further "
    "(issue 15 item 3)";
const std::map<std::string, std::string> k_known_differences = {
    {"ggml-vocab-aquila.gguf",
     "<|endoftext|> is its BOS and EOS but typed normal: llama.cpp parses it as a control token when special "
     "tokens are parsed, HillInfer keeps it as text"},
    {"pre cohere2moe", k_digits_from_right},
    {"pre tiny_aya", k_digits_from_right},
    {"pre kimi-k2", k_gutenberg_digits},
    {"pre youtu", k_gutenberg_digits},
};

// compare_tokenizer with the known differences applied: one listed is printed, and fails once it
// matches.
void compare_known(const std::string & oracle, const tokenizer & t, const std::string & gguf, const std::string & inp,
                   const std::vector<fixture> & fx, const std::string & what, const std::string & key) {
    const auto known = k_known_differences.find(key);
    const size_t n_bad = compare_tokenizer(oracle, t, gguf, inp, fx, what, known != k_known_differences.end());
    if (known != k_known_differences.end()) {
        if (n_bad == 0) ADD_FAILURE() << key << " now matches llama.cpp: remove it from k_known_differences";
        std::printf("  known difference: %s\n", known->second.c_str());
    }
}

TEST(llama_oracle, tokenizers_of_the_shared_data_match_llama_cpp) {
    HILL_REQUIRE_ORACLE(oracle);
    const std::string root = test::data_path("tokenizers");
    if (root.empty()) GTEST_SKIP() << "shared data folder 'tokenizers' not found under " << test::data_dir();
    test::temp_dir tmp;
    const std::vector<fixture> fx = text_fixtures();
    const std::string inp = write_inp(tmp, fx);
    size_t n_vocabs = 0;

    // GGUF vocabulary files, as they are.
    for (const auto & e : fs::directory_iterator(root + "/llamacpp-vocab")) {
        if (e.path().extension() != ".gguf") continue;
        const auto t = load_tokenizer(*gguf_file::open(e.path().string()));
        compare_tokenizer(oracle, *t, e.path().string(), inp, fx, e.path().filename().string());
        ++n_vocabs;
    }
    // llama2.c tokenizer.bin files (SentencePiece), as vocab-only GGUFs of what HillInfer reads.
    const std::pair<const char *, int32_t> bins[] = {{"tok512/tok512.bin", 512},
                                                     {"aidreams512/tok512.bin", 512},
                                                     {"tok105/tok105.bin", 105},
                                                     {"llama2/tokenizer.bin", 32000}};
    for (const auto & [rel, n_vocab] : bins) {
        const std::string path = root + "/" + rel;
        if (!fs::exists(path)) continue;
        const auto t = load_llama2c_tokenizer(path, n_vocab);
        if (std::find(t->vocab().kinds.begin(), t->vocab().kinds.end(), token_kind::byte) == t->vocab().kinds.end()) {
            // llama.cpp looks up the newline's byte piece when it loads a SentencePiece vocabulary
            // and aborts without one (tok105 is character-level, without byte fallback).
            std::printf("%-32s skipped: llama.cpp cannot load a SentencePiece vocabulary without byte pieces\n", rel);
            continue;
        }
        const std::string gguf = tmp.file("vocab" + std::to_string(n_vocabs) + ".gguf");
        write_spm_vocab_gguf(t->vocab(), gguf, rel);
        compare_tokenizer(oracle, *t, gguf, inp, fx, rel);
        ++n_vocabs;
    }
    // Hugging Face folders: the GGUF `convert` writes, and the folder itself.
    for (const char * name : {"gpt2", "llama3", "qwen3"}) {
        const fs::path dir = fs::path(root) / name;
        if (!fs::is_directory(dir)) continue;
        const auto folder_tok = load_tokenizer_folder(dir.string());
        const fs::path ckpt = tmp.path / (std::string("ckpt-") + name);
        fs::create_directory(ckpt);
        test::write_tiny_llama_checkpoint(ckpt, folder_tok->vocab().n_vocab());
        for (const char * f : {"tokenizer.json", "tokenizer_config.json", "encoder.json", "vocab.bpe"}) {
            if (fs::exists(dir / f)) fs::create_symlink(dir / f, ckpt / f);
        }
        const std::string gguf = tmp.file(std::string(name) + ".gguf");
        convert_hf_to_gguf(ckpt.string(), gguf, convert_params{ggml_type::f32});
        const auto gguf_tok = load_tokenizer(*gguf_file::open(gguf));
        compare_tokenizer(oracle, *folder_tok, gguf, inp, fx, std::string(name) + " (folder)");
        compare_tokenizer(oracle, *gguf_tok, gguf, inp, fx, std::string(name) + " (converted GGUF)");
        ++n_vocabs;
    }
    EXPECT_GE(n_vocabs, 8u) << "vocabularies found under " << root;
}

TEST(llama_oracle, llama_cpp_test_vocabularies_match_where_hillinfer_loads_them) {
    HILL_REQUIRE_ORACLE(oracle);
    const std::string dir = llamacpp_dir() + "/src/models";
    if (!fs::is_directory(dir)) GTEST_SKIP() << "no llama.cpp vocabularies in " << dir << " (scripts/llamacpp.sh)";
    test::temp_dir tmp;
    const std::vector<fixture> fx = text_fixtures();
    const std::string inp = write_inp(tmp, fx);
    std::vector<std::string> files;
    for (const auto & e : fs::directory_iterator(dir)) {
        if (e.path().extension() == ".gguf") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    size_t n_compared = 0;
    std::string refused;
    for (const std::string & f : files) {
        std::unique_ptr<tokenizer> t;
        try {
            t = load_tokenizer(*gguf_file::open(f));
        } catch (const error & e) {
            refused += "\n  " + fs::path(f).filename().string() + ": " + e.what();
            continue;
        }
        const std::string name = fs::path(f).filename().string();
        compare_known(oracle, *t, f, inp, fx, name, name);
        ++n_compared;
    }
    std::printf("%zu of llama.cpp's %zu test vocabularies compared; HillInfer refuses the others:%s\n", n_compared,
                files.size(), refused.c_str());
    EXPECT_GE(n_compared, 4u);
}

// Every `tokenizer.ggml.pre` value llama.cpp 3.22.1 (the bundle's src/llama-vocab.cpp) recognizes
// for a byte-level BPE vocabulary.
const char * const k_llama_cpp_pre_names[] = {
    "a.x-4.0",
    "afmoe",
    "bailingmoe",
    "bailingmoe2",
    "bloom",
    "chameleon",
    "chatglm-bpe",
    "codeshell",
    "cohere2moe",
    "command-r",
    "dbrx",
    "deepseek-coder",
    "deepseek-llm",
    "deepseek-r1-qwen",
    "deepseek-v3",
    "default",
    "exaone",
    "exaone-moe",
    "exaone4",
    "f2llmv2",
    "falcon",
    "falcon-h1",
    "falcon3",
    "gigachat",
    "glm4",
    "gpt-2",
    "gpt-4o",
    "gpt3-finnish",
    "granite-docling",
    "granite-embed-multi-311m",
    "granite-embed-multi-97m",
    "grok-2",
    "hunyuan",
    "hunyuan-dense",
    "hy_v4",
    "jais",
    "jais-2",
    "jina-de",
    "jina-es",
    "jina-v1-en",
    "jina-v2-code",
    "jina-v2-de",
    "jina-v2-es",
    "jina-v5-nano",
    "joyai-llm",
    "kanana2",
    "kimi-k2",
    "kormo",
    "laguna",
    "lfm2",
    "llada-moe",
    "llama-bpe",
    "llama-v3",
    "llama3",
    "llama4",
    "megrez",
    "mellum",
    "mellum2",
    "midm-2.0",
    "minerva-7b",
    "minicpm5",
    "minimax-m2",
    "modern-bert",
    "mpt",
    "olmo",
    "phi-2",
    "pixtral",
    "poro-chat",
    "qwen2",
    "qwen35",
    "refact",
    "roberta-bpe",
    "sarvam-moe",
    "seed-coder",
    "smaug-bpe",
    "smollm",
    "solar-open",
    "spark2_5",
    "stablelm2",
    "starcoder",
    "superbpe",
    "talkie",
    "tekken",
    "tiny_aya",
    "trillion",
    "ufakzeka",
    "viking",
    "youtu",
};

// Pre-tokenizers without a vocabulary fixture: the GPT-2 vocabulary (tokens, merges) written again
// under each pre-tokenizer name llama.cpp knows. The regexes (and ignore_merges) the name selects
// decide the split, so any byte-level vocabulary checks them. Names HillInfer refuses are listed.
TEST(llama_oracle, every_pre_tokenizer_name_hillinfer_accepts_splits_as_llama_cpp) {
    HILL_REQUIRE_ORACLE(oracle);
    HILL_REQUIRE_DATA(gpt2, "tokenizers/llamacpp-vocab/ggml-vocab-gpt-2.gguf");
    test::temp_dir tmp;
    const std::vector<fixture> fx = text_fixtures();
    const std::string inp = write_inp(tmp, fx);
    const auto src = gguf_file::open(gpt2);
    size_t n_compared = 0;
    std::string refused, not_byte_level;
    for (const char * pre : k_llama_cpp_pre_names) {
        gguf_writer w;
        for (const auto & [key, value] : src->metadata()) {
            if (key != "tokenizer.ggml.pre") w.set_value(key, value);
        }
        w.set_string("tokenizer.ggml.pre", pre);
        const std::string gguf = tmp.file(std::string("pre-") + pre + ".gguf");
        w.write(gguf);
        std::unique_ptr<tokenizer> t;
        try {
            t = load_tokenizer(*gguf_file::open(gguf));
        } catch (const error &) {
            refused += std::string(refused.empty() ? "" : ", ") + pre;
            continue;
        }
        if (const auto * bpe = dynamic_cast<const bpe_tokenizer *>(t.get()); bpe != nullptr && !bpe->byte_level()) {
            // A SentencePiece-style BPE (byte pieces <0xXX>, U+2581 for space): the GPT-2 vocabulary
            // does not fit it; a vocabulary fixture of that family checks it instead.
            not_byte_level += std::string(not_byte_level.empty() ? "" : ", ") + pre;
            continue;
        }
        compare_known(oracle, *t, gguf, inp, fx, std::string("gpt-2 vocab, pre ") + pre, std::string("pre ") + pre);
        ++n_compared;
    }
    std::printf(
        "%zu of llama.cpp's %zu pre-tokenizer names compared; not byte-level (skipped): %s; HillInfer "
        "refuses: %s\n",
        n_compared, std::size(k_llama_cpp_pre_names), not_byte_level.c_str(), refused.c_str());
    EXPECT_GE(n_compared, 1u);
}

// --- 2. logits ----------------------------------------------------------------------------------

// One row of the logits table: a weight type, how the model file is made, and the bound on the
// max relative logit error (max over steps of max |HillInfer - llama.cpp| / max |llama.cpp|),
// measured on this test's models and set with a margin (docs/models.md "Comparing with llama.cpp").
struct weight_case {
    const char * name;
    // make-model random --type (HillInfer writes the file), or nullptr.
    const char * hill_type;
    // The oracle's `quantize` type applied to the f16 model (llama.cpp writes the file), or nullptr.
    const char * llama_quant;
    // The HillInfer type names the file holds: the row runs once HillInfer reads them all
    // (ggml_type_from_name), and skips naming the missing one before.
    std::vector<const char *> needs;
    double max_rel_err;
};

// llama.cpp computes a quantized matrix product on activations it quantizes itself (Q8_0 for
// Q8_0/Q4_0, Q8_K — one scale per 256 — for the k-quants and IQ4_XS; f16 for F16 weights),
// HillInfer on f32 activations: that rounding is most of the difference. Measured (docs/models.md):
// F16 6.0e-4, Q8_0 1.34e-2, Q4_0 1.23e-2, Q4_K 1.67e-2, Q5_K 1.73e-2, Q6_K 1.84e-2, Q4_K_M 1.88e-2,
// Q5_K_M 1.82e-2, Q6_K (llama.cpp) 1.88e-2, IQ4_XS 2.09e-2; the bounds leave about 2x.
const std::vector<weight_case> k_weight_cases = {
    {"f16", "f16", nullptr, {"f16"}, 2e-3},
    {"q8_0", "q8_0", nullptr, {"q8_0"}, 3e-2},
    {"q4_0", "q4_0", nullptr, {"q4_0"}, 3e-2},
    {"q4_k", "q4_k", nullptr, {"q4_k"}, 4e-2},
    {"q5_k", "q5_k", nullptr, {"q5_k"}, 4e-2},
    {"q6_k", "q6_k", nullptr, {"q6_k"}, 4e-2},
    {"q4_k_m", nullptr, "q4_k_m", {"q4_k", "q6_k"}, 4e-2},
    {"q5_k_m", nullptr, "q5_k_m", {"q5_k", "q6_k"}, 4e-2},
    {"q6_k-llamacpp", nullptr, "q6_k", {"q6_k"}, 4e-2},
    {"iq4_xs", nullptr, "iq4_xs", {"iq4_xs", "q5_k", "q6_k"}, 4e-2},
};

// The architectures `make-model random` writes (write_random_model), with the sliding window each
// row's model declares (0: none). The windows are shorter than the 64 steps after the prompt, so the
// rows check the masks as llama.cpp reads them from the same key ({arch}.attention.sliding_window):
// gemma2 every other layer, gemma3 five of six (6 layers: one global, with its own RoPE base). The
// phi3, llama and qwen2 rows have no window: llama.cpp's graphs for them attend to every token
// whatever the key says, where transformers' Phi3, Mistral and Qwen2 mask the window, so the engines
// part once the context passes it (a window of 24: max relative logit error 0.73, 0.76, 1.43;
// docs/models.md "Comparing with llama.cpp").
//
// max_ties: the ties (below) a row may count. The Qwen models' random logits lie closer together than
// llama's (llama.cpp's own top two within 0.001 at some steps, against 0.02 to 0.04 for llama), so at
// the quantized types' 2% logit difference more steps are ties; the relative error is llama's.
// err_scale multiplies the weight types' bounds: gemma3's 6 layers (3 times the others') carry the
// quantized types' difference further (measured up to 4.1e-2 for Q5_K_M).
struct arch_case {
    const char * arch;
    int32_t n_swa;
    int32_t n_layer;
    int max_ties;
    double err_scale;
};
const arch_case k_architectures[] = {
    {"llama", 0, 2, 2, 1.0},  {"qwen2", 0, 2, 8, 1.0},  {"qwen3", 0, 2, 8, 1.0},
    {"gemma2", 24, 2, 8, 1.0}, {"gemma3", 24, 6, 8, 2.0}, {"phi3", 0, 2, 8, 1.0},
};

constexpr int k_steps = 64;

// Small enough for CI, large enough for every type: rows of 256 (one k-quant super-block), n_ff a
// multiple of 256 so that llama.cpp's mixes need no fallback type.
random_model_params tiny_model(ggml_type type, const arch_case & a) {
    random_model_params p;
    p.n_vocab = 512;
    p.n_embd = 256;
    p.n_ff = 768;
    p.n_layer = a.n_layer;
    p.n_head = 8;
    p.n_head_kv = 2;
    p.n_ctx = 1024;
    p.type = type;
    p.seed = 15;
    p.arch = a.arch;
    p.n_swa = a.n_swa;
    return p;
}

// Greedy agreement, step by step. HillInfer's argmax j differs from llama.cpp's id b only if
// l_b − l_j ≤ 2·d, d the step's max |h − l| (h_j ≥ h_b and |h − l| ≤ d elementwise): a "tie" at the
// engines' precision, where llama.cpp's own two best logits are closer than the two engines are. A
// tie is counted apart; any other difference is a mismatch.
struct logits_result {
    int n_equal = 0;    // steps where HillInfer's argmax is llama.cpp's greedy id
    int n_ties = 0;     // steps where it is not, within 2·d of llama.cpp's best logit
    std::string diffs;  // "step s: HillInfer j, llama.cpp b, gap g, d" for every step that differs
    double max_rel_err = 0.0;
    double min_gap = 1e30;  // smallest top-2 logit gap of llama.cpp over the steps
};

int32_t argmax(const float * l, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; ++i) best = l[i] > l[best] ? i : best;
    return best;
}

// Sum of -log softmax(logits_t)[ids[t + 1]] over t in [0, n - 1), for logits f32 [n, n_vocab].
double nll_of(const float * logits, const std::vector<int32_t> & ids, int32_t n_vocab) {
    double nll = 0.0;
    for (size_t t = 0; t + 1 < ids.size(); ++t) {
        const float * l = logits + t * size_t(n_vocab);
        double mx = l[0];
        for (int32_t i = 1; i < n_vocab; ++i) mx = std::max(mx, double(l[i]));
        double sum = 0.0;
        for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(double(l[i]) - mx);
        nll += mx + std::log(sum) - double(l[ids[t + 1]]);
    }
    return nll;
}

// llama.cpp's greedy decode of `gguf` from `prompt`; HillInfer fed the same tokens (prefill of the
// prompt, then one decode step per llama.cpp id) compared step by step.
logits_result compare_logits(const std::string & oracle, const std::string & gguf, const std::vector<int32_t> & prompt,
                             const test::temp_dir & tmp) {
    logits_result r;
    const std::string logits_file = tmp.file("logits.f32");
    const std::optional<std::string> out = run_oracle(oracle, "greedy " + quoted(gguf) + " " + ids_arg(prompt) + " " +
                                                                  std::to_string(k_steps) + " " + quoted(logits_file));
    if (!out) return r;
    const json j = json::parse(*out);
    const int32_t n_vocab = j.at("n_vocab").get<int32_t>();
    const std::vector<int32_t> ids = j.at("ids").get<std::vector<int32_t>>();
    const std::string raw = test::read_all(logits_file);
    EXPECT_EQ(raw.size(), size_t(k_steps) * size_t(n_vocab) * sizeof(float));
    EXPECT_EQ(ids.size(), size_t(k_steps));
    if (raw.size() != size_t(k_steps) * size_t(n_vocab) * sizeof(float) || ids.size() != size_t(k_steps)) return r;
    std::vector<float> ref(raw.size() / sizeof(float));
    std::memcpy(ref.data(), raw.data(), raw.size());

    const auto m = model::load(gguf);
    EXPECT_EQ(m->hp().n_vocab, n_vocab);
    thread_pool pool(2);
    context_params cp;
    cp.n_ctx = int32_t(prompt.size()) + k_steps;
    cp.kv_type = ggml_type::f16;  // as llama.cpp's default cache
    session s(*m, cp, pool);
    s.eval(prompt);
    for (int step = 0; step < k_steps; ++step) {
        if (step > 0) s.eval(std::vector<int32_t>{ids[size_t(step) - 1]});
        const float * h = s.logits();
        const float * l = ref.data() + size_t(step) * size_t(n_vocab);
        double d = 0.0, mx = 0.0;
        for (int32_t i = 0; i < n_vocab; ++i) {
            d = std::max(d, double(std::fabs(h[i] - l[i])));
            mx = std::max(mx, double(std::fabs(l[i])));
        }
        r.max_rel_err = std::max(r.max_rel_err, mx > 0.0 ? d / mx : d);
        const int32_t best = ids[size_t(step)];
        float second = -INFINITY;
        for (int32_t i = 0; i < n_vocab; ++i) second = i != best ? std::max(second, l[i]) : second;
        r.min_gap = std::min(r.min_gap, double(l[best] - second));
        const int32_t mine = argmax(h, n_vocab);
        if (mine == best) {
            ++r.n_equal;
            continue;
        }
        const double gap = double(l[best]) - double(l[mine]);
        r.n_ties += gap <= 2.0 * d;
        r.diffs += "\n  step " + std::to_string(step) + ": HillInfer " + std::to_string(mine) + ", llama.cpp " +
                   std::to_string(best) + ", llama.cpp's gap between them " + std::to_string(gap) +
                   ", max |logit difference| " + std::to_string(d) + (gap <= 2.0 * d ? " (a tie)" : "");
    }
    return r;
}

// Perplexity ratio HillInfer / llama.cpp on `ids` (all logits of one prefill in each).
double ppl_ratio(const std::string & oracle, const std::string & gguf, const std::vector<int32_t> & ids) {
    const std::optional<std::string> out = run_oracle(oracle, "nll " + quoted(gguf) + " " + ids_arg(ids));
    if (!out) return NAN;
    const double nll_ref = json::parse(*out).at("nll").get<double>();
    const auto m = model::load(gguf);
    thread_pool pool(2);
    context_params cp;
    cp.n_ctx = int32_t(ids.size());
    session s(*m, cp, pool);
    s.eval(ids, true);
    const double nll = nll_of(s.logits(), ids, m->hp().n_vocab);
    return std::exp((nll - nll_ref) / double(ids.size() - 1));
}

TEST(llama_oracle, greedy_ids_and_logits_match_llama_cpp_for_every_architecture_and_weight_type) {
    HILL_REQUIRE_ORACLE(oracle);
    test::temp_dir tmp;
    const std::string story = test::data_path("text/tinystories/tinystories_validation_first1000.txt");
    // Without the shared data the perplexity runs on a stand-in text (one sentence, then 400 'a's),
    // not a text the bound was set on: there the ratio of the random gemma3 Q8_0 model is 0.986 with
    // its logits within the bounds checked below. It is printed, not checked.
    if (story.empty())
        std::printf("perplexity not checked: %s is absent (set HILLINFER_DATA); printed on a stand-in text\n",
                    test::data_dir().c_str());
    for (const arch_case & a : k_architectures) {
        const char * arch = a.arch;
        const std::string f16 = tmp.file(std::string(arch) + "-f16.gguf");
        write_random_model(f16, tiny_model(ggml_type::f16, a));
        const auto base = model::load(f16);
        ASSERT_EQ(base->hp().arch, arch);
        const std::vector<int32_t> prompt = base->tokenizer().encode("once upon a time there was a tiny model", true);
        std::vector<int32_t> text = base->tokenizer().encode(
            story.empty() ? std::string("the quick brown fox jumps over the lazy dog. ") + std::string(400, 'a')
                          : utf8_slice(test::read_all(story), 0, 1200),
            true);
        text.resize(std::min<size_t>(text.size(), 256));
        for (const weight_case & c : k_weight_cases) {
            SCOPED_TRACE(std::string(arch) + " " + c.name);
            std::string missing;
            for (const char * t : c.needs) {
                if (!ggml_type_from_name(t)) missing += std::string(missing.empty() ? "" : ", ") + t;
            }
            if (!missing.empty()) {
                std::printf("%-6s %-7s skipped: HillInfer does not read %s yet\n", arch, c.name, missing.c_str());
                continue;
            }
            const std::string gguf = tmp.file(std::string(arch) + "-" + c.name + ".gguf");
            if (c.hill_type != nullptr) {
                write_random_model(gguf, tiny_model(*ggml_type_from_name(c.hill_type), a));
            } else {
                ASSERT_TRUE(run_oracle(oracle, "quantize " + quoted(f16) + " " + quoted(gguf) + " " + c.llama_quant));
            }
            const logits_result r = compare_logits(oracle, gguf, prompt, tmp);
            const double ppl = ppl_ratio(oracle, gguf, text);
            std::printf(
                "%-6s %-13s greedy %d/%d steps equal (%d ties), max rel logit error %.2e (bound %.0e), "
                "min top-2 gap %.3f, perplexity HillInfer/llama.cpp %.5f (%zu tokens)%s\n",
                arch, c.name, r.n_equal, k_steps, r.n_ties, r.max_rel_err, c.max_rel_err * a.err_scale, r.min_gap, ppl,
                text.size(),
                r.diffs.c_str());
            EXPECT_EQ(r.n_equal + r.n_ties, k_steps) << "greedy ids differ beyond ties:" << r.diffs;
            EXPECT_LE(r.n_ties, a.max_ties) << r.diffs;
            EXPECT_LE(r.max_rel_err, c.max_rel_err * a.err_scale);
            if (!story.empty()) {
                EXPECT_LT(std::fabs(ppl - 1.0), 0.005);
            }
        }
    }
}

}  // namespace
}  // namespace hill
