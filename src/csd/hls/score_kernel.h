// The storage device's scoring kernel (HillInfer paper §4.4 "CSD-based Evaluation Configuration"),
// written as synthesizable C++ for Vitis HLS and compiled for the CPU into the emulator
// (csd/emulator.h). README.md beside this file says how to build it for a real SmartSSD.
//
// What it computes, per token: the key row f16 (or f32) [n_head_kv, head_dim] is cast on the fly to
// INT8 or INT4 per KV head (symmetric: s_k = max|k| / q_max, k̂ = round(k / s_k), ties to even,
// q_max = 127 or 7), dotted with the INT8 query held on chip (q̂ int8 [n_head, head_dim], s_q per
// head, quantized once per step by the host), and the per-head dots (Σ q̂·k̂ exact in int32, by a
// fully unrolled adder tree over the head dimension) scaled and aggregated exactly as the host
// scorer's INT8-query path does (score/host_scorer.h):
//     dot_h = float(Σ q̂_h·k̂) · s_q[h] · s_k,   head score = sum or max over the GQA group, in head
//     order; token score = sum or max over KV heads in order (layer) or one per KV head (kv_head);
// or, for the softmax aggregate, each dot_h first turned into its weight exp2(dot_h · c − b_h) and the
// group's score the log2 of the weights' sum (score/head_softmax.h: the same +, −, ×, ÷ and floor as
// the host, no exponential unit), c and b_h f32 [n_head] held on chip with the query.
// The integer sums are exact and the float operations are the same ones in the same order, so the
// scores are bit-identical to host_scorer's (tested).
//
// HLS style: fixed loop bounds (the head dimension is a template parameter, the kernel is built for
// the model's head_dim rounded up to 64, 128 or 256 and the tail is zeros), static arrays, the query
// in an on-chip buffer, and pragmas (HLS_PRAGMA) that compile away on the CPU.
#pragma once

#include <cstdint>

#ifdef __SYNTHESIS__
#define HLS_PRAGMA(x) _Pragma(#x)
#else
#define HLS_PRAGMA(x)
#endif

namespace hill::csd::hls {

constexpr int max_head_dim = 256;  // largest head_dim the kernel is built for
constexpr int max_head = 128;      // query heads the on-chip query buffer holds
constexpr int max_group = 64;      // score groups (KV heads at kv_head granularity)

struct kernel_config {
    int n_head = 0;           // query heads, <= max_head
    int n_head_kv = 0;        // KV heads, divides n_head, <= max_group
    int head_dim = 0;         // <= max_head_dim
    bool key_f32 = false;     // keys stored f32 (else f16)
    bool int4 = false;        // q_max 7 (else INT8: 127)
    bool aggregate_max = false;  // max over heads (else sum)
    bool per_kv_head = false;    // one score per KV head (else one per token)
    bool aggregate_softmax = false;  // per-head softmax weights summed (overrides aggregate_max)
    int n_group() const { return per_kv_head ? n_head_kv : 1; }
};

// The on-chip query buffer (BRAM on the FPGA): the step's INT8 query, its per-head scales and, for the
// softmax aggregate, the per-head normalizers b_h and c = log2(e) · scale.
struct query_buffer {
    int8_t q[max_head][max_head_dim];  // int8 [max_head, max_head_dim]; zeros past head_dim
    float scale[max_head];             // f32 [max_head]
    float head_mass[max_head];         // f32 [max_head]: b_h (softmax aggregate; else zeros)
    float log2_scale;                  // c (softmax aggregate; else 0)
};

// Copies the query q̂ int8 [n_head, head_dim] and scales f32 [n_head] into buf (zero-padded), and for the
// softmax aggregate head_mass f32 [n_head] and log2_scale (head_mass may be null otherwise).
void load_query(const kernel_config & c, const int8_t * q, const float * scale, const float * head_mass,
                float log2_scale, query_buffer & buf);

// Scores n_tokens keys: key row t at keys + t · row_stride elements (f16 bits or f32 per c.key_f32),
// [n_head_kv, head_dim] each; out f32 [n_tokens, n_group]. Asserts the config is within the bounds.
void score_tokens(const kernel_config & c, const query_buffer & qb, const void * keys, int64_t row_stride,
                  int64_t n_tokens, float * out);

}  // namespace hill::csd::hls
