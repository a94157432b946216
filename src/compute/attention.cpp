#include "compute/attention.h"

#include "compute/kernel_mode.h"
#include "compute/kernels_avx2.h"
#include "core/error.h"
#include "core/fp16.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

namespace hill {

namespace {

// Scalar references of the AVX2 dot / axpy kernels (f32 accumulation).
float dot_f32_scalar(const float * a, const float * b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

float dot_f16_scalar(const float * a, const uint16_t * b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += a[i] * fp16_to_fp32(b[i]);
    return s;
}

void axpy_f32_scalar(float a, const float * x, float * y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void axpy_f16_scalar(float a, const uint16_t * x, float * y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * fp16_to_fp32(x[i]);
}

// The K·q and p·V kernels for one (kv_type, kernel_mode), on type-erased rows.
struct head_kernels {
    float (*dot)(const float * q, const void * k, int64_t n);
    void (*axpy)(float a, const void * v, float * y, int64_t n);
    size_t elem_bytes;
};

template <auto dot, class T>
float dot_erased(const float * q, const void * k, int64_t n) {
    return dot(q, static_cast<const T *>(k), n);
}

template <auto axpy, class T>
void axpy_erased(float a, const void * v, float * y, int64_t n) {
    axpy(a, static_cast<const T *>(v), y, n);
}

head_kernels select_kernels(ggml_type kv_type) {
    HILL_ASSERT(kv_type == ggml_type::f32 || kv_type == ggml_type::f16);
    const bool f16 = kv_type == ggml_type::f16;
    if (kernel_mode_get() == kernel_mode::avx2) {
        return f16 ? head_kernels{dot_erased<avx2::dot_f16, uint16_t>, axpy_erased<avx2::axpy_f16, uint16_t>, 2}
                   : head_kernels{dot_erased<avx2::dot_f32, float>, axpy_erased<avx2::axpy_f32, float>, 4};
    }
    return f16 ? head_kernels{dot_erased<dot_f16_scalar, uint16_t>, axpy_erased<axpy_f16_scalar, uint16_t>, 2}
               : head_kernels{dot_erased<dot_f32_scalar, float>, axpy_erased<axpy_f32_scalar, float>, 4};
}

void check_shape(const attention_shape & s, const kv_view & kv) {
    HILL_ASSERT(s.n_head > 0 && s.n_head_kv > 0 && s.n_head % s.n_head_kv == 0 && s.head_dim > 0);
    HILL_ASSERT(kv.type == ggml_type::f32 || kv.type == ggml_type::f16);
    HILL_ASSERT(kv.n_kv >= 0 && kv.row_stride >= int64_t(s.n_head_kv) * s.head_dim);
    HILL_ASSERT(kv.n_kv == 0 || (kv.k != nullptr && kv.v != nullptr));
}

// Whether attention_head_accumulate runs the fused AVX2 kernel (avx2::attention_group_accumulate).
bool fused_kernel(int head_dim) {
    return kernel_mode_get() == kernel_mode::avx2 && head_dim % 8 == 0;
}

// Keys per block of the GQA paths (attention_decode_accumulate, attention_prefill_accumulate) with
// the dot/axpy kernels and the scalar reference: a multiple of their chunk (32 keys), so that walking
// the keys block by block gives the chunks, and the result, of one pass over all of them; the block's
// K and V are read from memory once for all the query heads (and tokens) that walk it.
constexpr int64_t key_block = 512;

// Keys per block of the GQA paths with the fused AVX2 kernel: one chunk of it (a block must be a
// multiple of it). A KV head's query heads take a block together (accumulate_group), so the block
// size is for the caches: the 64 keys of one KV head (head_dim 128, f16: 32 KiB of K and V) stay in
// L2 while the 16 tokens of a prefill tile read them, where 512 keys (256 KiB in rows 2 KiB apart,
// which collide in the cache sets) did not. On the AMD EPYC test VM (32 query / 8 KV heads of 128,
// f16, 64 tokens after 8,192, one thread): prefill 14-23 ns per (token, key, head) against 26-27
// with blocks of 512 (44-46 before the group kernel).
constexpr int64_t fused_block = avx2::attn_chunk;
static_assert(attention_key_split % key_block == 0 && attention_key_split % fused_block == 0);

// Query head h of token row q_tok [n_head, head_dim] against KV tokens [0, n).
void attend_one(const attention_shape & s, const float * q_tok, const kv_view & kv, int64_t n, int h, float * out_tok) {
    const int group = s.n_head / s.n_head_kv;
    const size_t eb = kv.type == ggml_type::f16 ? 2 : 4;
    const size_t head_off = size_t(h / group) * size_t(s.head_dim) * eb;
    attention_head(q_tok + int64_t(h) * s.head_dim, kv.type, static_cast<const uint8_t *>(kv.k) + head_off,
                   static_cast<const uint8_t *>(kv.v) + head_off, n, kv.row_stride, s.head_dim, s.scale,
                   out_tok + int64_t(h) * s.head_dim);
}

}  // namespace

void attention_head_accumulate(const float * q, ggml_type kv_type, const void * k, const void * v, const int32_t * rows,
                               int64_t n, int64_t row_stride, int head_dim, float scale, float * acc,
                               softmax_state & st, float softcap) {
    HILL_ASSERT(head_dim > 0 && n >= 0 && softcap >= 0.0f);
    const head_kernels kern = select_kernels(kv_type);
    if (fused_kernel(head_dim) && softcap == 0.0f) {  // the group kernel with one head, same online softmax
        avx2::attention_group_accumulate(q, 1, kv_type, static_cast<const uint8_t *>(k),
                                         static_cast<const uint8_t *>(v), rows, n, 0,
                                         size_t(row_stride) * kern.elem_bytes, head_dim, scale, acc, &st.m, &st.l);
        return;
    }
    const size_t stride_bytes = size_t(row_stride) * kern.elem_bytes;
    const auto * kb = static_cast<const uint8_t *>(k);
    const auto * vb = static_cast<const uint8_t *>(v);
    auto row = [rows](int64_t j) { return size_t(rows != nullptr ? int64_t(rows[j]) : j); };

    // The reference (and the AVX2 path of head dims the fused kernel does not take): online
    // softmax over chunks of keys: scores of a chunk, then one rescale of the accumulator if the
    // running max m grew, then p·V. l: running Σ exp(s - m), in double because it sums up to n_kv
    // terms.
    constexpr int64_t chunk = 32;
    float sc[chunk];
    float m = st.m;
    double l = st.l;
    for (int64_t j0 = 0; j0 < n; j0 += chunk) {
        const int64_t nj = std::min(chunk, n - j0);
        float cm = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < nj; ++j) {
            sc[j] = kern.dot(q, kb + row(j0 + j) * stride_bytes, head_dim) * scale;
            if (softcap > 0.0f) sc[j] = softcap * std::tanh(sc[j] / softcap);
            cm = std::max(cm, sc[j]);
        }
        if (cm > m) {
            if (l > 0.0) {
                const float c = std::exp(m - cm);
                l *= c;
                for (int i = 0; i < head_dim; ++i) acc[i] *= c;
            }
            m = cm;
        }
        for (int64_t j = 0; j < nj; ++j) {
            const float p = std::exp(sc[j] - m);
            l += p;
            kern.axpy(p, vb + row(j0 + j) * stride_bytes, acc, head_dim);
        }
    }
    st.m = m;
    st.l = l;
}

namespace {

// attention_head_accumulate for n_q query heads of one KV head over the same n keys (q, acc: f32
// [n_q, head_dim], st [n_q]; k, v, rows as there): the fused AVX2 kernel takes them together, in
// calls of up to avx2::attn_group_max heads (each K and V row read and widened once per call, not
// once per head), with each head's result that of attention_head_accumulate alone, bit for bit;
// otherwise one attention_head_accumulate per head. n_ahead: the keys after the n that the fused
// kernel may prefetch (the caller's next block; 0 for none).
void accumulate_group(const float * q, int n_q, ggml_type kv_type, const void * k, const void * v, const int32_t * rows,
                      int64_t n, int64_t n_ahead, int64_t row_stride, int head_dim, float scale, float softcap,
                      float * acc, softmax_state * st) {
    if (!fused_kernel(head_dim) || softcap > 0.0f) {
        for (int i = 0; i < n_q; ++i) {
            attention_head_accumulate(q + int64_t(i) * head_dim, kv_type, k, v, rows, n, row_stride, head_dim, scale,
                                      acc + int64_t(i) * head_dim, st[i], softcap);
        }
        return;
    }
    HILL_ASSERT(n >= 0 && (kv_type == ggml_type::f32 || kv_type == ggml_type::f16));
    const size_t row_bytes = size_t(row_stride) * (kv_type == ggml_type::f16 ? 2 : 4);
    for (int i0 = 0; i0 < n_q; i0 += avx2::attn_group_max) {
        const int nq = std::min(avx2::attn_group_max, n_q - i0);
        float m[avx2::attn_group_max];
        double l[avx2::attn_group_max];
        for (int i = 0; i < nq; ++i) {
            m[i] = st[i0 + i].m;
            l[i] = st[i0 + i].l;
        }
        avx2::attention_group_accumulate(q + int64_t(i0) * head_dim, nq, kv_type, static_cast<const uint8_t *>(k),
                                         static_cast<const uint8_t *>(v), rows, n, n_ahead, row_bytes, head_dim, scale,
                                         acc + int64_t(i0) * head_dim, m, l);
        for (int i = 0; i < nq; ++i) {
            st[i0 + i].m = m[i];
            st[i0 + i].l = l[i];
        }
    }
}

}  // namespace

void attention_head_finish(const float * acc, const softmax_state & st, int head_dim, float * out) {
    const float inv = st.l > 0.0 ? float(1.0 / st.l) : 0.0f;
    for (int i = 0; i < head_dim; ++i) out[i] = acc[i] * inv;
}

void attention_head(const float * q, ggml_type kv_type, const void * k, const void * v, int64_t n, int64_t row_stride,
                    int head_dim, float scale, float * out) {
    softmax_state st;
    std::fill(out, out + head_dim, 0.0f);
    attention_head_accumulate(q, kv_type, k, v, nullptr, n, row_stride, head_dim, scale, out, st);
    attention_head_finish(out, st, head_dim, out);
}

void attention_decode_accumulate(const attention_shape & s, const float * q, const kv_view & kv, const int32_t * rows,
                                 float * acc, softmax_state * st, thread_pool & pool) {
    check_shape(s, kv);
    if (kv.n_kv == 0) return;
    const int group = s.n_head / s.n_head_kv;
    const size_t eb = kv.type == ggml_type::f16 ? 2 : 4;
    // Work items: one KV head and a slice of its query heads — all of them, unless there are fewer KV
    // heads than threads (then as many slices as fill the threads). Each thread takes a contiguous
    // range of items and walks the keys in blocks, every item of its range continuing its online
    // softmax over a block (accumulate_group: all the item's query heads at once) before the next
    // block. A block's K and V are read from memory once per item, not once per query head; the
    // chunks — the result — are those of one attention_head_accumulate per head over all the keys,
    // whatever the thread count. With the fused AVX2 kernel a block is fused_block keys, and the
    // kernel prefetches, while it scores a block, the item's rows of the next block (n_ahead): the
    // thread reads its part of each token's row nearly in address order, with the prefetches spread
    // over the computation. On the AMD EPYC test VM (32 query / 8 KV heads, f16, 32,768 keys; a
    // loaded VM, runs' medians) this took, with 2 threads, 19-25 ns per key per query head at
    // head_dim 64 where prefetching each next block at once before its first item took 30-37 (the
    // per-head walk before the group kernel: 28-40), and 34-47 against 50-54 through a shuffled row
    // list at head_dim 128; with one thread, 50-60 ns at head_dim 128 where walking all the keys of
    // one KV head after another took 70-90.
    const int slices = std::min(group, (pool.n_threads() + s.n_head_kv - 1) / s.n_head_kv);
    const int64_t block = fused_kernel(s.head_dim) ? fused_block : key_block;
    const size_t row_bytes = size_t(kv.row_stride) * eb;
    const auto items = [&](int64_t i0, int64_t i1) {
        for (int64_t j0 = 0; j0 < kv.n_kv; j0 += block) {
            const int64_t n = std::min(block, kv.n_kv - j0), n_ahead = std::min(block, kv.n_kv - j0 - n);
            const size_t off = rows != nullptr ? 0 : size_t(j0) * row_bytes;
            for (int64_t i = i0; i < i1; ++i) {
                const int g = int(i / slices), sl = int(i % slices);
                const int h0 = g * group + sl * group / slices, h1 = g * group + (sl + 1) * group / slices;
                const size_t head_off = size_t(g) * size_t(s.head_dim) * eb + off;
                const auto * kb = static_cast<const uint8_t *>(kv.k) + head_off;
                const auto * vb = static_cast<const uint8_t *>(kv.v) + head_off;
                accumulate_group(q + int64_t(h0) * s.head_dim, h1 - h0, kv.type, kb, vb,
                                 rows != nullptr ? rows + j0 : nullptr, n, n_ahead, kv.row_stride, s.head_dim, s.scale,
                                 s.softcap, acc + int64_t(h0) * s.head_dim, st + h0);
            }
        }
    };
    // An item's work: q·k and p·v of its query heads over every key.
    pool.parallel_for(int64_t(s.n_head_kv) * slices, items, 1,
                      2 * kv.n_kv * s.head_dim * ((group + slices - 1) / slices));
}

void attention_decode(const attention_shape & s, const float * q, const kv_view & kv, float * out, thread_pool & pool) {
    check_shape(s, kv);
    HILL_ASSERT(s.softcap == 0.0f);
    // Contiguous head ranges per thread keep the query heads of one KV head together.
    const auto heads = [&](int64_t h0, int64_t h1) {
        for (int64_t h = h0; h < h1; ++h) attend_one(s, q, kv, kv.n_kv, int(h), out);
    };
    pool.parallel_for(s.n_head, heads, 1, 2 * kv.n_kv * s.head_dim);
}

void attention_prefill_accumulate(const attention_shape & s, const float * q, int64_t n_tok, const kv_view & kv,
                                  const int32_t * rows, int64_t causal_p0, float * acc, softmax_state * st,
                                  thread_pool & pool) {
    check_shape(s, kv);
    HILL_ASSERT(n_tok >= 0);
    if (n_tok == 0 || kv.n_kv == 0) return;
    const int group = s.n_head / s.n_head_kv;
    const size_t eb = kv.type == ggml_type::f16 ? 2 : 4;
    const int64_t qo_stride = int64_t(s.n_head) * s.head_dim;
    // Work items: a tile of up to tile_tokens query tokens × one KV head. An item walks the keys in
    // blocks (fused_block keys with the fused AVX2 kernel, else key_block), and every query row of
    // the tile (its tokens × the KV head's query heads, a token's query heads in one accumulate_group)
    // continues its online softmax over a block before the next block: the block's K and V are read
    // from memory once per tile instead of once per (token, head). A block is a multiple of the
    // kernels' chunks, so the chunks — and the result — are those of one call over all the keys (row
    // t still equals attention_decode bit for bit). Items are taken from a shared counter, latest
    // tiles (the longest rows of a causal triangle) first.
    constexpr int64_t tile_tokens = 16;
    const int64_t block = fused_kernel(s.head_dim) ? fused_block : key_block;
    const bool windowed = s.window > 0 && causal_p0 != no_causal_mask;
    const int64_t n_tiles = (n_tok + tile_tokens - 1) / tile_tokens;
    const int64_t n_items = n_tiles * s.n_head_kv;
    std::atomic<int64_t> next{0};
    pool.run([&](int, int) {
        for (;;) {
            const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
            if (i >= n_items) break;
            const int64_t tile = n_tiles - 1 - i / s.n_head_kv;
            const int g = int(i % s.n_head_kv);
            const int64_t t0 = tile * tile_tokens, t1 = std::min(t0 + tile_tokens, n_tok);
            const int64_t n_max = std::clamp<int64_t>(causal_p0 + t1, 0, kv.n_kv);  // keys the tile's last token sees
            // The first key of token t's window (0 without one); the tile's first token's is the least.
            const auto lo_of = [&](int64_t t) {
                return windowed ? std::clamp<int64_t>(causal_p0 + t + 1 - s.window, 0, kv.n_kv) : int64_t(0);
            };
            const size_t head_off = size_t(g) * size_t(s.head_dim) * eb;
            const auto * kb = static_cast<const uint8_t *>(kv.k) + head_off;
            const auto * vb = static_cast<const uint8_t *>(kv.v) + head_off;
            for (int64_t j0 = lo_of(t0) / block * block; j0 < n_max; j0 += block) {
                const int64_t j_end = std::min(j0 + block, kv.n_kv);
                for (int64_t t = t0; t < t1; ++t) {
                    const int64_t hi = std::clamp<int64_t>(causal_p0 + t + 1, j0, j_end);
                    const int64_t lo = std::clamp<int64_t>(lo_of(t), j0, hi);
                    if (hi == lo) continue;
                    const size_t off = rows != nullptr ? 0 : size_t(lo * kv.row_stride) * eb;
                    const int64_t h0 = int64_t(g) * group;
                    accumulate_group(q + t * qo_stride + h0 * s.head_dim, group, kv.type, kb + off, vb + off,
                                     rows != nullptr ? rows + lo : nullptr, hi - lo, 0, kv.row_stride, s.head_dim,
                                     s.scale, s.softcap, acc + t * qo_stride + h0 * s.head_dim, st + t * s.n_head + h0);
                }
            }
        }
    });
}

void attention_prefill(const attention_shape & s, const float * q, int64_t n_tok, int64_t p0, const kv_view & kv,
                       float * out, thread_pool & pool) {
    HILL_ASSERT(n_tok >= 0 && p0 >= 0 && kv.n_kv >= p0 + n_tok);
    std::vector<softmax_state> st(size_t(n_tok * s.n_head));
    const int64_t n_out = n_tok * s.n_head * s.head_dim;
    std::fill(out, out + n_out, 0.0f);
    attention_prefill_accumulate(s, q, n_tok, kv, nullptr, p0, out, st.data(), pool);
    for (int64_t i = 0; i < n_tok * s.n_head; ++i) {
        attention_head_finish(out + i * s.head_dim, st[size_t(i)], s.head_dim, out + i * s.head_dim);
    }
}

void attention_logits(const attention_shape & s, const float * q, const kv_view & keys, const int32_t * rows, float * out,
                      int64_t ld, thread_pool & pool) {
    HILL_ASSERT(s.n_head > 0 && s.n_head_kv > 0 && s.n_head % s.n_head_kv == 0 && s.head_dim > 0);
    HILL_ASSERT(keys.type == ggml_type::f32 || keys.type == ggml_type::f16);
    HILL_ASSERT(keys.n_kv >= 0 && ld >= keys.n_kv && (keys.n_kv == 0 || keys.k != nullptr));
    const head_kernels kern = select_kernels(keys.type);
    const int group = s.n_head / s.n_head_kv;
    const auto heads = [&](int64_t h0, int64_t h1) {
        for (int64_t h = h0; h < h1; ++h) {
            const float * qh = q + h * s.head_dim;
            const auto * k = static_cast<const uint8_t *>(keys.k) + size_t(h / group) * size_t(s.head_dim) * kern.elem_bytes;
            float * o = out + h * ld;
            for (int64_t j = 0; j < keys.n_kv; ++j) {
                const int64_t r = rows != nullptr ? rows[j] : j;
                o[j] = s.scale * kern.dot(qh, k + size_t(r) * size_t(keys.row_stride) * kern.elem_bytes, s.head_dim);
                if (s.softcap > 0.0f) o[j] = s.softcap * std::tanh(o[j] / s.softcap);
            }
        }
    };
    pool.parallel_for(s.n_head, heads, 1, keys.n_kv * s.head_dim);
}

}  // namespace hill
