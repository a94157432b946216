// llama_oracle: llama.cpp as a reference for HillInfer's tests (tests/test_llama_oracle.cpp).
// Our own program over llama.h's public API only, built by scripts/llamacpp.sh against the headers
// of the llama.cpp source bundle that the npm package `node-llama-cpp` ships and the prebuilt
// libllama of `@node-llama-cpp/linux-x64`; not part of the CMake build (no llama.cpp in the tree).
//
//   llama_oracle tokenize MODEL TEXTS
//       TEXTS: texts in llama.cpp's `.inp` framing (each text followed by the line
//       "__ggml_vocab_test__"). Prints {"plain": [ids of each text], "special": [...]}: plain
//       without BOS and without special-token parsing (llama_tokenize add_special = parse_special =
//       false; HillInfer's tokenizer::encode(text, false)), special with the vocabulary's BOS as it
//       asks and text that spells a control token turned into that token (both true;
//       encode_with_special(text, true)). The model is loaded vocabulary-only (a vocab-only GGUF
//       works).
//   llama_oracle greedy MODEL PROMPT_IDS N LOGITS_OUT
//       PROMPT_IDS: comma-separated token ids (no BOS is added). Prefills them, then decodes N - 1
//       greedy tokens (argmax, lowest id on ties). Prints {"n_vocab": V, "ids": [N ids]} and writes
//       LOGITS_OUT: f32 [N, V] little-endian, row s the logits step s chose ids[s] from (row 0:
//       after the prompt's last token).
//   llama_oracle nll MODEL IDS
//       IDS: comma-separated token ids, evaluated in one batch. Prints {"n": n - 1, "nll": S}: S
//       the sum over positions t in [0, n - 1) of -log softmax(logits_t)[ids[t + 1]] (natural log,
//       computed in double); perplexity = exp(S / (n - 1)).
//   llama_oracle bench MODEL N_PROMPT N_GEN THREADS
//       Speed, as bench/bench_decode measures HillInfer's: prefills N_PROMPT tokens (ids
//       1 + (7919 · i) mod (n_vocab − 1)) in one batch, then decodes N_GEN greedy tokens one at a
//       time, with THREADS threads and llama.cpp's default context parameters otherwise (flash
//       attention as it chooses). Prints {"prefill_tps": P, "decode_tps": D} (tokens per second).
//   llama_oracle quantize IN OUT TYPE
//       llama_model_quantize with TYPE one of f16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k_m,
//       q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq4_nl, iq4_xs (llama.cpp's mixes: q4_k_m keeps some
//       tensors in q6_k, ...). No importance matrix.
//
// Every run but bench: 1 thread, context = the tokens given, KV cache f16 (llama.cpp's default), flash
// attention off (the plain softmax(QK^T)V path, as HillInfer's). Exit codes: 0 ok, 1 llama.cpp
// failed (message on stderr), 2 bad arguments.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "llama.h"

#ifndef ORACLE_BACKEND_DIR
#error "ORACLE_BACKEND_DIR: the folder of the prebuilt libggml-cpu-*.so (set by scripts/llamacpp.sh)"
#endif

namespace {

// One thread: the test models are tiny, and ggml's worker threads spin while they wait, which on a
// loaded 2-core machine made 64 decode steps of a 2-layer model take 15 s instead of 0.2 s.
constexpr int n_threads = 1;

[[noreturn]] void die(int code, const std::string & msg) {
    std::fprintf(stderr, "llama_oracle: %s\n", msg.c_str());
    std::exit(code);
}

std::string read_file(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) die(2, "cannot read '" + path + "'");
    return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<llama_token> parse_ids(const std::string & s) {
    std::vector<llama_token> ids;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');) {
        char * end = nullptr;
        const long v = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || v < 0) die(2, "bad token id '" + item + "' in '" + s + "'");
        ids.push_back(llama_token(v));
    }
    if (ids.empty()) die(2, "no token ids in '" + s + "'");
    return ids;
}

void print_ids(const std::vector<llama_token> & ids) {
    std::printf("[");
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? ", " : "", ids[i]);
    std::printf("]");
}

llama_model * load_model(const std::string & path, bool vocab_only) {
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = vocab_only;
    mp.n_gpu_layers = 0;
    llama_model * m = llama_model_load_from_file(path.c_str(), mp);
    if (m == nullptr) die(1, "llama.cpp cannot load '" + path + "'");
    return m;
}

llama_context * make_context(llama_model * m, size_t n_tokens) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = uint32_t(n_tokens < 16 ? 16 : n_tokens);
    cp.n_batch = cp.n_ctx;
    cp.n_ubatch = cp.n_ctx;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    llama_context * ctx = llama_init_from_model(m, cp);
    if (ctx == nullptr) die(1, "llama.cpp cannot create a context");
    return ctx;
}

// One batch of `ids` at positions [p0, p0 + n), logits for every token when `all`, else the last.
void decode(llama_context * ctx, const std::vector<llama_token> & ids, int32_t p0, bool all) {
    llama_batch b = llama_batch_init(int32_t(ids.size()), 0, 1);
    for (size_t i = 0; i < ids.size(); ++i) {
        b.token[i] = ids[i];
        b.pos[i] = p0 + int32_t(i);
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = all || i + 1 == ids.size();
    }
    b.n_tokens = int32_t(ids.size());
    const int32_t rc = llama_decode(ctx, b);
    llama_batch_free(b);
    if (rc != 0) die(1, "llama_decode failed with " + std::to_string(rc));
}

int cmd_tokenize(int argc, char ** argv) {
    if (argc != 2) die(2, "usage: tokenize MODEL TEXTS");
    const std::string text = read_file(argv[1]);
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    for (size_t at = 0; at < text.size();) {
        const size_t end = text.find(sep, at);
        if (end == std::string::npos) die(2, std::string("'") + argv[1] + "': text after the last separator line");
        texts.push_back(text.substr(at, end - at));
        at = end + sep.size();
    }
    llama_model * m = load_model(argv[0], true);
    const llama_vocab * v = llama_model_get_vocab(m);
    for (const bool special : {false, true}) {
        std::printf("%s", special ? ",\n \"special\": [" : "{\"plain\": [");
        for (size_t i = 0; i < texts.size(); ++i) {
            const std::string & s = texts[i];
            const int32_t n = -llama_tokenize(v, s.data(), int32_t(s.size()), nullptr, 0, special, special);
            std::vector<llama_token> ids(size_t(n > 0 ? n : 0));
            if (llama_tokenize(v, s.data(), int32_t(s.size()), ids.data(), int32_t(ids.size()), special, special) < 0) {
                die(1, "llama_tokenize failed");
            }
            std::printf("%s", i ? ",\n  " : "");
            print_ids(ids);
        }
        std::printf("]");
    }
    std::printf("}\n");
    llama_model_free(m);
    return 0;
}

int cmd_greedy(int argc, char ** argv) {
    if (argc != 4) die(2, "usage: greedy MODEL PROMPT_IDS N LOGITS_OUT");
    const std::vector<llama_token> prompt = parse_ids(argv[1]);
    const int n_steps = std::atoi(argv[2]);
    if (n_steps <= 0) die(2, std::string("N must be > 0, got '") + argv[2] + "'");
    llama_model * m = load_model(argv[0], false);
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
    llama_context * ctx = make_context(m, prompt.size() + size_t(n_steps));
    std::FILE * out = std::fopen(argv[3], "wb");
    if (out == nullptr) die(1, std::string("cannot write '") + argv[3] + "'");
    std::vector<llama_token> ids;
    decode(ctx, prompt, 0, false);
    for (int s = 0; s < n_steps; ++s) {
        const float * logits = llama_get_logits_ith(ctx, -1);
        if (std::fwrite(logits, sizeof(float), size_t(n_vocab), out) != size_t(n_vocab)) die(1, "short write");
        llama_token best = 0;
        for (llama_token t = 1; t < n_vocab; ++t) best = logits[t] > logits[best] ? t : best;
        ids.push_back(best);
        if (s + 1 < n_steps) decode(ctx, {best}, int32_t(prompt.size()) + s, false);
    }
    if (std::fclose(out) != 0) die(1, "cannot close the logits file");
    std::printf("{\"n_vocab\": %d, \"ids\": ", n_vocab);
    print_ids(ids);
    std::printf("}\n");
    llama_free(ctx);
    llama_model_free(m);
    return 0;
}

int cmd_nll(int argc, char ** argv) {
    if (argc != 2) die(2, "usage: nll MODEL IDS");
    const std::vector<llama_token> ids = parse_ids(argv[1]);
    if (ids.size() < 2) die(2, "nll needs at least 2 ids");
    llama_model * m = load_model(argv[0], false);
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
    llama_context * ctx = make_context(m, ids.size());
    decode(ctx, ids, 0, true);
    double nll = 0.0;
    for (size_t t = 0; t + 1 < ids.size(); ++t) {
        const float * l = llama_get_logits_ith(ctx, int32_t(t));
        double mx = l[0];
        for (int32_t i = 1; i < n_vocab; ++i) mx = std::max(mx, double(l[i]));
        double sum = 0.0;
        for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(double(l[i]) - mx);
        nll += mx + std::log(sum) - double(l[ids[t + 1]]);
    }
    std::printf("{\"n\": %zu, \"nll\": %.9g}\n", ids.size() - 1, nll);
    llama_free(ctx);
    llama_model_free(m);
    return 0;
}

int cmd_bench(int argc, char ** argv) {
    if (argc != 4) die(2, "usage: bench MODEL N_PROMPT N_GEN THREADS");
    const int n_prompt = std::atoi(argv[1]), n_gen = std::atoi(argv[2]), threads = std::atoi(argv[3]);
    if (n_prompt <= 0 || n_gen <= 0 || threads <= 0) die(2, "N_PROMPT, N_GEN and THREADS must be > 0");
    llama_model * m = load_model(argv[0], false);
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = uint32_t(n_prompt + n_gen + 1);
    cp.n_batch = cp.n_ctx;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.no_perf = true;
    llama_context * ctx = llama_init_from_model(m, cp);
    if (ctx == nullptr) die(1, "llama.cpp cannot create a context");
    std::vector<llama_token> prompt(static_cast<size_t>(n_prompt));
    for (int i = 0; i < n_prompt; ++i) prompt[size_t(i)] = 1 + llama_token((int64_t(i) * 7919) % (n_vocab - 1));
    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    decode(ctx, prompt, 0, false);
    const double t_prefill = std::chrono::duration<double>(clock::now() - t0).count();
    llama_token tok = 1;
    t0 = clock::now();
    for (int s = 0; s < n_gen; ++s) {
        decode(ctx, {tok}, n_prompt + s, false);
        const float * logits = llama_get_logits_ith(ctx, -1);
        tok = llama_token(std::max_element(logits, logits + n_vocab) - logits);
    }
    const double t_decode = std::chrono::duration<double>(clock::now() - t0).count();
    std::printf("{\"prefill_tps\": %.6g, \"decode_tps\": %.6g}\n", n_prompt / t_prefill, n_gen / t_decode);
    llama_free(ctx);
    llama_model_free(m);
    return 0;
}

int cmd_quantize(int argc, char ** argv) {
    if (argc != 3) die(2, "usage: quantize IN OUT TYPE");
    static const struct {
        const char * name;
        llama_ftype ftype;
    } types[] = {
        {"f16", LLAMA_FTYPE_MOSTLY_F16},       {"q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
        {"q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},     {"q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},
        {"q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},     {"q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},
        {"q2_k", LLAMA_FTYPE_MOSTLY_Q2_K},     {"q3_k_m", LLAMA_FTYPE_MOSTLY_Q3_K_M},
        {"q4_k_s", LLAMA_FTYPE_MOSTLY_Q4_K_S}, {"q4_k_m", LLAMA_FTYPE_MOSTLY_Q4_K_M},
        {"q5_k_s", LLAMA_FTYPE_MOSTLY_Q5_K_S}, {"q5_k_m", LLAMA_FTYPE_MOSTLY_Q5_K_M},
        {"q6_k", LLAMA_FTYPE_MOSTLY_Q6_K},     {"iq4_nl", LLAMA_FTYPE_MOSTLY_IQ4_NL},
        {"iq4_xs", LLAMA_FTYPE_MOSTLY_IQ4_XS},
    };
    llama_model_quantize_params qp = llama_model_quantize_default_params();
    qp.nthread = n_threads;
    bool found = false;
    for (const auto & t : types) {
        if (std::strcmp(t.name, argv[2]) == 0) {
            qp.ftype = t.ftype;
            found = true;
        }
    }
    if (!found) die(2, std::string("unknown type '") + argv[2] + "'");
    if (llama_model_quantize(argv[0], argv[1], &qp) != 0)
        die(1, std::string("llama_model_quantize failed on '") + argv[0] + "'");
    return 0;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2)
        die(2, "usage: llama_oracle tokenize|greedy|nll|bench|quantize ARGS... (see tests/oracle/llama_oracle.cpp)");
    const std::string cmd = argv[1];
    llama_log_set(
        [](ggml_log_level level, const char * text, void *) {
            if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
        },
        nullptr);
    ggml_backend_load_all_from_path(ORACLE_BACKEND_DIR);
    llama_backend_init();
    int rc = 2;
    if (cmd == "tokenize")
        rc = cmd_tokenize(argc - 2, argv + 2);
    else if (cmd == "greedy")
        rc = cmd_greedy(argc - 2, argv + 2);
    else if (cmd == "nll")
        rc = cmd_nll(argc - 2, argv + 2);
    else if (cmd == "bench")
        rc = cmd_bench(argc - 2, argv + 2);
    else if (cmd == "quantize")
        rc = cmd_quantize(argc - 2, argv + 2);
    else
        die(2, "unknown command '" + cmd + "'");
    llama_backend_free();
    return rc;
}
