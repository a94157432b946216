#include "score/quant_copy.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>

#include "compute/kernel_mode.h"
#include "compute/ops.h"
#include "compute/q8_dot.h"
#include "core/error.h"
#include "core/fp16.h"
#include "score/host_scorer.h"
#include "score/score_avx2.h"

namespace hill {

namespace {

// Nibble i of a packed head vector of n elements (quant_copy.h): in its block of b elements (32, the
// last one n mod 32), byte j holds element j (low nibble) and element j + b/2 (high nibble).
inline int32_t nibble(const uint8_t * row, int n, int i) {
    const int b0 = i / 32 * 32, half = std::min(n - b0, 32) / 2, j = i - b0;
    const uint8_t byte = row[b0 / 2 + (j < half ? j : j - half)];
    return j < half ? byte & 0x0f : byte >> 4;
}

// 2-bit field i of a packed int2 head vector of n elements (quant_copy.h): in its block of b elements
// (32, the last one n mod 32), byte j holds elements j + m · b/4 in bits 2m, 2m + 1 (m = 0..3).
inline int32_t crumb(const uint8_t * row, int n, int i) {
    const int b0 = i / 32 * 32, quarter = std::min(n - b0, 32) / 4, j = i - b0;
    return (row[b0 / 4 + j % quarter] >> (2 * (j / quarter))) & 3;
}

// 3-bit field i of a packed int3 head vector of n elements (quant_copy.h): in its block of b elements
// (32, the last one n mod 32; 3b/8 bytes from byte 3 · b0 / 8), the low two bits as crumb() packs them
// in the block's first b/4 bytes, the high bit of element j at bit j mod 8 of byte b/4 + j / 8.
inline int32_t field3(const uint8_t * row, int n, int i) {
    const int b0 = i / 32 * 32, b = std::min(n - b0, 32), quarter = b / 4, j = i - b0;
    const uint8_t * block = row + b0 / 8 * 3;
    return ((block[j % quarter] >> (2 * (j / quarter))) & 3) | ((block[quarter + j / 8] >> (j % 8)) & 1) << 2;
}

// Scalar references of score_avx2::dots_u4_i8, dots_u3_i8 and dots_u2_i8.
template <int32_t (*Elem)(const uint8_t *, int, int)>
void dots_packed_scalar(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out) {
    for (int t = 0; t < n_k; ++t) {
        for (int h = 0; h < n_q; ++h) {
            int32_t s = 0;
            for (int i = 0; i < n; ++i) s += int32_t(q[h * n + i]) * Elem(k[t], n, i);
            out[t * n_q + h] = s;
        }
    }
}

// Element i of a key row of type f16 or f32.
inline float key_elem(bool f16, const void * k, int64_t i) {
    return f16 ? fp16_to_fp32(static_cast<const f16_bits *>(k)[i]) : static_cast<const float *>(k)[i];
}

// v rounded to the nearest integer, ties to even, for |v| < 2^22 (lrint's result in the default rounding
// mode): adding 1.5 · 2^23 leaves no fraction bits, so the addition rounds; the subtraction is exact. A
// loop of it vectorizes where lrint is a call.
inline float round_to_even(float v) {
    constexpr float shift = 12582912.0f;  // 1.5 · 2^23
    return (v + shift) - shift;
}

// The fields of m <= 8 head vectors of one key row (quant_copy.h, "Method"; the scalar reference of
// score_avx2::copy_fields, whose contract score_avx2.h states): per head in turn, k̃ = k · (1 / c) and its
// maximum, then at 4 bits u = k̂ + 8, at 2 and 3 bits y = k̃ · (1 / max|k̃|), σ = c0 · rms(y) refined by
// `rounds` rounds of Lloyd's iteration (each element its nearest level, u = round((y / σ + top) / 2)
// clamped to [0, top], then σ = Σ y ℓ / Σ ℓ², sums in f32 in element order), and the fields at the last σ.
void copy_fields_scalar(const uint8_t * k, bool f16, const float * rc, int m, int n, int bits, float c0, int rounds,
                        float * amax, float * sigma, uint8_t * u, float * work) {
    float * kt = work;
    const int top = (1 << bits) - 1;
    for (int h = 0; h < m; ++h) {
        const float * rh = rc + size_t(h) * size_t(n);
        uint8_t * uh = u + size_t(h) * size_t(n);
        if (f16) {
            fp16_to_fp32_row(reinterpret_cast<const f16_bits *>(k) + size_t(h) * size_t(n), kt, n);
        } else {
            std::copy_n(reinterpret_cast<const float *>(k) + size_t(h) * size_t(n), n, kt);
        }
        bool nan = false;
        float a = 0.0f;
        for (int i = 0; i < n; ++i) {
            kt[i] *= rh[i];
            const float x = std::fabs(kt[i]);
            nan |= std::isnan(x);
            a = x > a ? x : a;
        }
        amax[h] = nan ? std::numeric_limits<float>::quiet_NaN() : a;
        if (!(a <= FLT_MAX) || nan || a < quantize_min_amax) continue;  // quantize_row stores no fields
        if (bits == 4) {
            // quantize_symmetric(f32 k̃, int4): |k̃ · 7 / max|k̃|| rounds to at most 7.
            const float inv = 7.0f / a;
            for (int i = 0; i < n; ++i) uh[i] = uint8_t(round_to_even(kt[i] * inv) + 8.0f);
            continue;
        }
        // In units of max|k̃|, so that no square underflows.
        const float inv_amax = 1.0f / a;
        float * y = kt;
        for (int i = 0; i < n; ++i) y[i] *= inv_amax;
        const auto to_fields = [&](float inv) {
            for (int i = 0; i < n; ++i) {
                uh[i] = uint8_t(std::clamp(round_to_even((y[i] * inv + float(top)) * 0.5f), 0.0f, float(top)));
            }
        };
        float ss = 0.0f;
        for (int i = 0; i < n; ++i) ss += y[i] * y[i];
        float sg = c0 * std::sqrt(ss / float(n));  // > 0: one |y| is 1
        for (int round = 0; round < rounds; ++round) {
            to_fields(1.0f / sg);
            float yl = 0.0f, ll = 0.0f;
            for (int i = 0; i < n; ++i) {
                const float l = float(2 * int(uh[i]) - top);
                yl += y[i] * l;
                ll += l * l;
            }
            sg = yl / ll;  // > 0: every y ℓ >= 0, the largest |y| gives 1 · |ℓ| >= 1
        }
        to_fields(1.0f / sg);
        sigma[h] = sg;
    }
}

// Bit 2 of each of the 8 fields f[0..8), as bit j of one byte (the 3-bit layout's high-bit plane): the
// product gathers byte j's bit 0 at bit 56 + j, with no two partial products on one bit.
uint8_t high_bits8(const uint8_t * f) {
    uint64_t x;
    std::memcpy(&x, f, 8);  // little-endian (as the model readers): byte j is f[j]
    return uint8_t((((x >> 2) & 0x0101010101010101ull) * 0x0102040810204080ull) >> 56);
}

// A whole block of 32 fields f packed as quant_copy.h lays it out (4 bits: 16 bytes, byte j = f[j] | f[j + 16]
// << 4; 2 and 3 bits: byte j of the first 8 = the low two bits of f[j + 8m] at bits 2m; 3 bits: then the
// high-bit plane), eight bytes at a time (no field exceeds its width, so no byte carries into the next).
void pack_block32(const uint8_t * f, int bits, uint8_t * out) {
    uint64_t w[4];
    std::memcpy(w, f, 32);
    if (bits == 4) {
        const uint64_t lo[2] = {w[0] | w[2] << 4, w[1] | w[3] << 4};
        std::memcpy(out, lo, 16);
        return;
    }
    constexpr uint64_t low2 = 0x0303030303030303ull;
    const uint64_t p = (w[0] & low2) | (w[1] & low2) << 2 | (w[2] & low2) << 4 | (w[3] & low2) << 6;
    std::memcpy(out, &p, 8);
    if (bits == 3) {
        for (int m = 0; m < 4; ++m) out[8 + m] = high_bits8(f + 8 * m);
    }
}

// The limits of the channel scales (quant_copy.h): below max_d c_d · channel_floor a channel's scale is
// raised to it, so that a channel silent in the first rows cannot turn a later token's k / c into the
// only non-zero value of its head (or overflow); below channel_min every scale is 1.
constexpr float channel_floor = 1e-3f;
constexpr float channel_min = 0x1p-60f;

// Rounds of Lloyd's iteration refining a 2- or 3-bit head vector's scale (quant_copy.h).
constexpr int lloyd_rounds = 1;

// n elements, not zero-filled; nullptr when the system refuses.
template <class T>
std::unique_ptr<T[]> allocate(size_t n) {
    return std::unique_ptr<T[]>(new (std::nothrow) T[n]);
}

}  // namespace

int parse_score_copy(std::string_view name) {
    if (name == "int4") return 4;
    if (name == "int3") return 3;
    if (name == "int2") return 2;
    if (name == "off") return 0;
    fail_usage("--score-copy: unknown scoring copy '{}': expected int4, int3, int2 or off", name);
}

quant_copy::quant_copy(const attention_shape & s, const score_params & p, int bits, int n_seq, int n_layer,
                       int64_t n_ctx, int n_threads)
    : shape_(s), params_(p), bits_(bits), n_seq_(n_seq), n_layer_(n_layer), n_ctx_(n_ctx), n_threads_(n_threads) {
    HILL_ASSERT(s.n_head > 0 && s.n_head_kv > 0 && s.n_head % s.n_head_kv == 0);
    HILL_ASSERT(supports(s.head_dim, bits));
    HILL_ASSERT(n_seq >= 1 && n_layer >= 1 && n_ctx >= 1 && n_threads >= 1);
    group_ = s.n_head / s.n_head_kv;
    head_bytes_ = size_t(s.head_dim) * size_t(bits) / 8;
    row_bytes_ = size_t(s.n_head_kv) * head_bytes_;
    dots_stride_ = (score_block * group_ + 15) / 16 * 16;
    const size_t n_rows = size_t(n_seq) * size_t(n_layer) * size_t(n_ctx);
    keys_ = allocate<uint8_t>(n_rows * row_bytes_);
    scales_ = allocate<bf16_bits>(n_rows * size_t(s.n_head_kv));
    if (keys_ == nullptr || scales_ == nullptr) {
        fail_input("cannot allocate the scoring copy: {} bytes for {} sequences × {} layers × {} positions",
                   n_rows * bytes_per_token_layer(s, bits), n_seq, n_layer, n_ctx);
    }
    channel_.assign(size_t(n_seq) * size_t(n_layer) * size_t(s.n_head_kv) * size_t(s.head_dim), 1.0f);
    inv_channel_.assign(channel_.size(), 1.0f);
    first_.resize(size_t(n_seq) * size_t(n_layer) * size_t(scale_rows) * size_t(s.n_head_kv) * size_t(s.head_dim));
    const size_t nq = size_t(s.n_head) * size_t(s.head_dim);
    q_scaled_.resize(nq);
    q_i8_.resize(nq);
    q_scale_.resize(size_t(s.n_head));
    q_offset_.resize(size_t(s.n_head));
    dots_.resize(size_t(n_threads) * size_t(dots_stride_));
    row_keys_.resize(row_bytes_);
    row_scales_.resize(size_t(s.n_head_kv));
    set_params(p);
}

void quant_copy::set_params(const score_params & p) {
    params_ = p;
    query_ready_ = false;
    head_mass_.clear();
    log2_scale_ = 0.0f;
    if (p.aggregate == score_aggregate::softmax) {
        HILL_ASSERT(shape_.scale > 0.0f);
        head_mass_.resize(size_t(shape_.n_head));
        log2_scale_ = log2_e * shape_.scale;
    }
}

bool quant_copy::supports(int head_dim, int bits) {
    return head_dim > 0 && head_dim <= max_head_dim &&
           ((bits == 4 && head_dim % 2 == 0) || (bits == 3 && head_dim % 8 == 0) || (bits == 2 && head_dim % 4 == 0));
}

uint64_t quant_copy::bytes_per_token_layer(const attention_shape & s, int bits) {
    return uint64_t(s.n_head_kv) * (uint64_t(s.head_dim) * uint64_t(bits) / 8 + sizeof(bf16_bits));
}

uint64_t quant_copy::bytes_for(const attention_shape & s, int bits, int n_seq, int n_layer, int64_t n_ctx) {
    const uint64_t pairs = uint64_t(n_seq) * uint64_t(n_layer);
    return pairs * (uint64_t(n_ctx) * bytes_per_token_layer(s, bits) +
                    uint64_t(scale_rows + 2) * uint64_t(s.n_head_kv) * uint64_t(s.head_dim) * sizeof(float));
}

std::string quant_copy::describe() const { return fmt::format("the INT{} scoring copy / int8 query", bits_); }

double quant_copy::bytes_per_token_layer() const { return double(bytes_per_token_layer(shape_, bits_)); }

uint64_t quant_copy::bytes() const {
    const uint64_t n_rows = uint64_t(n_seq_) * uint64_t(n_layer_) * uint64_t(n_ctx_);
    return n_rows * bytes_per_token_layer(shape_, bits_) + (channel_.size() + inv_channel_.size() + first_.size()) * sizeof(float) +
           q_scaled_.size() * sizeof(float) + q_i8_.size() +
           (q_scale_.size() + q_offset_.size()) * 4 + row_scales_.size() * sizeof(bf16_bits) + dots_.size() * 4 +
           row_keys_.size() + head_mass_.size() * sizeof(float);
}

int quant_copy::n_group() const {
    return params_.granularity == select_granularity::layer ? 1 : shape_.n_head_kv;
}

size_t quant_copy::pair_index(int seq, int il) const {
    HILL_ASSERT(seq >= 0 && seq < n_seq_ && il >= 0 && il < n_layer_);
    return size_t(seq) * size_t(n_layer_) + size_t(il);
}

const uint8_t * quant_copy::keys(int seq, int il) const {
    return keys_.get() + pair_index(seq, il) * size_t(n_ctx_) * row_bytes_;
}

const bf16_bits * quant_copy::key_scales(int seq, int il) const {
    return scales_.get() + pair_index(seq, il) * size_t(n_ctx_) * size_t(shape_.n_head_kv);
}

const float * quant_copy::channel_scales(int seq, int il) const {
    return channel_.data() + pair_index(seq, il) * size_t(shape_.n_head_kv) * size_t(shape_.head_dim);
}

void quant_copy::quantize_row(ggml_type type, const void * k, const float * rc, uint8_t * packed, bf16_bits * scale) const {
    const int hd = shape_.head_dim;
    const bool f16 = type == ggml_type::f16;
    const size_t elem_bytes = f16 ? 2 : 4;
    const auto fields = kernel_mode_get() == kernel_mode::avx2 ? score_avx2::copy_fields : copy_fields_scalar;
    const float c0 = bits_ == 2 ? 0.5f : bits_ == 3 ? 0.293f : 0.0f;
    // Eight head vectors at a time: their maxima, scales and fields, then each one packed.
    float amax[8], sigma[8];
    uint8_t u[8 * max_head_dim];
    alignas(32) float work[8 * max_head_dim];
    for (int g0 = 0; g0 < shape_.n_head_kv; g0 += 8) {
        const int m = std::min(shape_.n_head_kv - g0, 8);
        fields(static_cast<const uint8_t *>(k) + size_t(g0) * size_t(hd) * elem_bytes, f16,
               rc + size_t(g0) * size_t(hd), m, hd, bits_, c0, lloyd_rounds, amax, sigma, u, work);
        for (int h = 0; h < m; ++h) {
            const int g = g0 + h;
            uint8_t * out = packed + size_t(g) * head_bytes_;
            if (!(amax[h] <= FLT_MAX) || amax[h] < quantize_min_amax) {  // inf or NaN element, or (nearly) all zeros
                std::fill(out, out + head_bytes_, uint8_t(bits_ == 4 ? 0x88 : 0x00));
                scale[g] = fp32_to_bf16(amax[h] < quantize_min_amax ? 0.0f : std::numeric_limits<float>::quiet_NaN());
                continue;
            }
            const uint8_t * uh = u + size_t(h) * size_t(hd);
            for (int b0 = 0; b0 < hd; b0 += 32) {
                const int b = std::min(hd - b0, 32);
                const uint8_t * ub = uh + b0;
                uint8_t * block = out + size_t(b0 / 8 * bits_);
                if (b == 32) {
                    pack_block32(ub, bits_, block);
                    continue;
                }
                if (bits_ == 4) {
                    for (int j = 0; j < b / 2; ++j) block[j] = uint8_t(ub[j] | ub[j + b / 2] << 4);
                    continue;
                }
                const int quarter = b / 4;
                for (int j = 0; j < quarter; ++j) {
                    block[j] = uint8_t((ub[j] & 3) | (ub[j + quarter] & 3) << 2 | (ub[j + 2 * quarter] & 3) << 4 |
                                       (ub[j + 3 * quarter] & 3) << 6);
                }
                if (bits_ == 3) {
                    for (int j8 = 0; j8 < b / 8; ++j8) block[quarter + j8] = high_bits8(ub + 8 * j8);
                }
            }
            scale[g] = fp32_to_bf16(bits_ == 4 ? amax[h] / 7.0f : amax[h] * sigma[h]);
        }
    }
}

void quant_copy::set_rope(rope_layout layout, std::vector<std::vector<double>> inv_freq) {
    const int hd = shape_.head_dim, half = hd / 2;
    HILL_ASSERT(hd % 2 == 0 && int(inv_freq.size()) == n_layer_);
    for (const std::vector<double> & f : inv_freq) HILL_ASSERT(int(f.size()) == half);
    // The pairs as compute/ops.h rope() turns them: pair j is (j · step, j · step + other).
    const int step = layout == rope_layout::adjacent_pairs ? 2 : 1;
    const int other = layout == rope_layout::adjacent_pairs ? 1 : half;
    partner_.assign(size_t(hd), 0);
    pair_.assign(size_t(hd), 0);
    for (int j = 0; j < half; ++j) {
        partner_[size_t(j * step)] = j * step + other;
        partner_[size_t(j * step + other)] = j * step;
        pair_[size_t(j * step)] = j + 1;           // leading element: + (pair + 1)
        pair_[size_t(j * step + other)] = -(j + 1);  // trailing: − (pair + 1)
    }
    rope_theta_ = std::move(inv_freq);
}

float quant_copy::rotated_bound(const float * x, int64_t i, int d, int il, int64_t r) const {
    // The method of quant_copy.h: channel d of the pair (lead, trail) = (u, v) at position r, turned by
    // φ in [0, Φ], is A cos(φ + ψ) (lead: ψ = atan2(v, u); trail: that − π/2).
    const int code = pair_[size_t(d)];
    const int j = std::abs(code) - 1;
    const double own = x[i], mate = x[i - d + partner_[size_t(d)]];
    const double u = code > 0 ? own : mate, v = code > 0 ? mate : own;
    const double amp = std::hypot(u, v);
    const double psi = std::atan2(v, u) - (code > 0 ? 0.0 : M_PI / 2);
    const double phi = rope_theta_[size_t(il)][size_t(j)] * double(std::max<int64_t>(0, n_ctx_ - 1 - r));
    const double bound = phi >= M_PI || std::ceil(psi / M_PI) * M_PI <= psi + phi
                             ? amp
                             : amp * std::max(std::fabs(std::cos(psi)), std::fabs(std::cos(psi + phi)));
    return float(std::min(bound, double(FLT_MAX)));  // two finite elements near FLT_MAX: not inf
}

void quant_copy::write(int seq, int il, int64_t p0, int64_t n, ggml_type type, const void * k, int64_t row_stride) {
    const size_t pair = pair_index(seq, il);
    const int hd = shape_.head_dim, n_kv = shape_.n_head_kv;
    const int64_t width = int64_t(n_kv) * hd;
    HILL_ASSERT(p0 >= 0 && n >= 0 && p0 + n <= n_ctx_);
    HILL_ASSERT(type == ggml_type::f16 || type == ggml_type::f32);
    HILL_ASSERT(row_stride >= width);
    if (n == 0) return;
    HILL_ASSERT(k != nullptr);
    const bool f16 = type == ggml_type::f16;
    const size_t elem_bytes = f16 ? 2 : 4;
    auto row = [&](int64_t r) { return static_cast<const uint8_t *>(k) + size_t(r * row_stride) * elem_bytes; };
    float * c = channel_.data() + pair * size_t(width);
    float * rc = inv_channel_.data() + pair * size_t(width);
    uint8_t * keys = keys_.get() + pair * size_t(n_ctx_) * row_bytes_;
    bf16_bits * scales = scales_.get() + pair * size_t(n_ctx_) * size_t(n_kv);
    const int64_t n_first = std::min(p0 + n, scale_rows);
    if (p0 < scale_rows) {
        // The rows among the first scale_rows positions are kept (f32) and the channel scales are taken
        // again from positions [0, n_first): per KV head the largest finite |k_d|, floored at
        // channel_floor of the head's largest; all 1 when that largest is below channel_min. The
        // positions before p0 are quantized again under them.
        float * first = first_.data() + pair * size_t(scale_rows) * size_t(width);
        for (int64_t r = p0; r < n_first; ++r) {
            for (int64_t i = 0; i < width; ++i) first[r * width + i] = key_elem(f16, row(r - p0), i);
        }
        std::fill(c, c + width, 0.0f);
        for (int64_t r = 0; r < n_first; ++r) {
            const float * x = first + r * width;
            for (int64_t i = 0; i < width; ++i) {
                const int64_t d = i % hd;
                const float a = std::fabs(x[i]);
                const bool paired = !partner_.empty() && a <= FLT_MAX && std::fabs(x[i - d + partner_[size_t(d)]]) <= FLT_MAX;
                const float bound = paired ? rotated_bound(x, i, d, il, r) : a;
                if (bound <= FLT_MAX) c[i] = std::max(c[i], bound);
            }
        }
        for (int g = 0; g < n_kv; ++g) {
            float * cg = c + size_t(g) * size_t(hd);
            const float m = *std::max_element(cg, cg + hd);
            for (int i = 0; i < hd; ++i) cg[i] = m < channel_min ? 1.0f : std::max(cg[i], m * channel_floor);
        }
        for (int64_t i = 0; i < width; ++i) rc[i] = 1.0f / c[i];
        for (int64_t r = 0; r < p0; ++r) {
            quantize_row(ggml_type::f32, first + r * width, rc, keys + size_t(r) * row_bytes_, scales + size_t(r) * size_t(n_kv));
        }
    }
    for (int64_t r = 0; r < n; ++r) {
        const size_t t = size_t(p0 + r);
        quantize_row(type, row(r), rc, keys + t * row_bytes_, scales + t * size_t(n_kv));
    }
}

void quant_copy::prepare_query(int seq, int il, const float * q, const float * head_mass) {
    query_pair_ = pair_index(seq, il);
    HILL_ASSERT(q != nullptr);
    if (!head_mass_.empty()) {
        HILL_ASSERT(head_mass != nullptr);
        std::copy(head_mass, head_mass + head_mass_.size(), head_mass_.begin());
    }
    const int hd = shape_.head_dim;
    const float * c = channel_.data() + query_pair_ * size_t(shape_.n_head_kv) * size_t(hd);
    for (int h = 0; h < shape_.n_head; ++h) {
        const size_t o = size_t(h) * size_t(hd);
        const float * cg = c + size_t(h / group_) * size_t(hd);
        for (int i = 0; i < hd; ++i) q_scaled_[o + size_t(i)] = q[o + size_t(i)] * cg[i];
        q_scale_[size_t(h)] =
            quantize_symmetric(ggml_type::f32, q_scaled_.data() + o, hd, score_precision::int8, q_i8_.data() + o);
        int32_t sum = 0;
        for (int i = 0; i < hd; ++i) sum += q_i8_[o + size_t(i)];
        q_offset_[size_t(h)] = (bits_ == 4 ? 8 : (1 << bits_) - 1) * sum;
    }
    query_ready_ = true;
}

quant_copy::dots_fn quant_copy::kernel() const {
    if (kernel_mode_get() != kernel_mode::avx2) {
        return bits_ == 2   ? dots_packed_scalar<crumb>
               : bits_ == 3 ? dots_packed_scalar<field3>
                            : dots_packed_scalar<nibble>;
    }
    switch (int8_isa_get()) {
        case int8_isa::avx512_vnni:
            return bits_ == 2   ? score_avx512::dots_u2_i8
                   : bits_ == 3 ? score_avx512::dots_u3_i8
                                : score_avx512::dots_u4_i8;
        case int8_isa::avx_vnni:
            return bits_ == 2 ? score_vnni::dots_u2_i8 : bits_ == 3 ? score_vnni::dots_u3_i8 : score_vnni::dots_u4_i8;
        case int8_isa::avx2: break;
    }
    return bits_ == 2 ? score_avx2::dots_u2_i8 : bits_ == 3 ? score_avx2::dots_u3_i8 : score_avx2::dots_u4_i8;
}

// The scalar reference of score_avx2::softmax_group (same contract).
static void softmax_group_scalar(const int32_t * dots, int group, int32_t mul, const int32_t * offset,
                                 const float * q_scale, const float * s_k, float c, const float * b, int n,
                                 float * acc) {
    for (int t = 0; t < n; ++t) {
        float sum = 0.0f;
        for (int h = 0; h < group; ++h) {
            const float dot = float(mul * dots[t * group + h] - offset[h]) * q_scale[h] * s_k[t];
            const float w = softmax_weight(dot, c, b != nullptr ? b[h] : 0.0f);
            sum = h == 0 ? w : sum + w;
        }
        acc[t] = sum;
    }
}

void quant_copy::score_tokens(dots_fn dots_of, const uint8_t * keys, const bf16_bits * scales, int nb, int n_next,
                              int32_t * dots, float * out, int64_t stride) const {
    const int hd = shape_.head_dim, n_kv = shape_.n_head_kv, group = group_;
    const int32_t mul = bits_ == 4 ? 1 : 2;  // the stored field u stands for u − 8 (int4), 2u − 7 (int3), 2u − 3 (int2)
    const bool per_layer = params_.granularity == select_granularity::layer;
    const score_aggregate agg = params_.aggregate;
    const uint8_t * k[score_block];
    float token_score[score_block];
    const bool softmax = agg == score_aggregate::softmax;
    const auto weights = kernel_mode_get() == kernel_mode::avx2 ? score_avx2::softmax_group : softmax_group_scalar;
    float acc[score_block];
    float s_k[score_block];  // KV head g's key scales of the block, in f32 (exact)
    for (int g = 0; g < n_kv; ++g) {
        const size_t h0 = size_t(g) * size_t(group);  // first query head of KV head g
        for (int t = 0; t < nb; ++t) s_k[t] = bf16_to_fp32(scales[size_t(t) * size_t(n_kv) + size_t(g)]);
        for (int t = 0; t < nb; ++t) k[t] = keys + size_t(t) * row_bytes_ + size_t(g) * head_bytes_;
        for (int t = 0; t < n_next; ++t) {
            const uint8_t * next = k[0] + size_t(nb + t) * row_bytes_;
            for (size_t o = 0; o < head_bytes_; o += 64) __builtin_prefetch(next + o, 0, 3);
        }
        dots_of(q_i8_.data() + h0 * size_t(hd), group, k, nb, hd, dots);
        if (softmax) {
            // All query heads of KV head g over the block's tokens (vectorized), summed in head order as below.
            weights(dots, group, mul, q_offset_.data() + h0, q_scale_.data() + h0, s_k, log2_scale_,
                    head_mass_.empty() ? nullptr : head_mass_.data() + h0, nb, acc);
            for (int t = 0; t < nb; ++t) {
                if (!per_layer) {
                    out[int64_t(g) * stride + t] = group_score(agg, acc[t]);
                } else {
                    token_score[t] = g == 0 ? acc[t] : token_score[t] + acc[t];
                }
            }
            continue;
        }
        for (int t = 0; t < nb; ++t) {
            const int32_t * d = dots + t * group;
            float head_score = 0.0f;
            for (int h = 0; h < group; ++h) {
                const size_t hq = h0 + size_t(h);
                const float dot = float(mul * d[h] - q_offset_[hq]) * q_scale_[hq] * s_k[t];
                const float v = head_term(agg, dot, log2_scale_, head_mass_.empty() ? 0.0f : head_mass_[hq]);
                head_score = h == 0 ? v : combine_scores(agg, head_score, v);
            }
            if (!per_layer) {
                out[int64_t(g) * stride + t] = group_score(agg, head_score);
            } else {
                token_score[t] = g == 0 ? head_score : combine_scores(agg, token_score[t], head_score);
            }
        }
    }
    if (per_layer) {
        for (int t = 0; t < nb; ++t) out[t] = group_score(agg, token_score[t]);
    }
}

void quant_copy::score(int64_t n, float * scores, int64_t stride, thread_pool & pool) {
    HILL_ASSERT(query_ready_);
    HILL_ASSERT(n >= 0 && n <= n_ctx_);
    HILL_ASSERT(n == 0 || scores != nullptr);
    HILL_ASSERT(n_group() == 1 || stride >= n);
    HILL_ASSERT(pool.n_threads() <= n_threads_);
    const dots_fn dots_of = kernel();
    const uint8_t * keys = keys_.get() + query_pair_ * size_t(n_ctx_) * row_bytes_;
    const bf16_bits * scales = scales_.get() + query_pair_ * size_t(n_ctx_) * size_t(shape_.n_head_kv);
    const size_t n_kv = size_t(shape_.n_head_kv);
    // The threads claim ranges of tokens as they go (about 16 per thread) rather than a fixed share
    // each: on a machine whose cores the I/O threads share, the thread whose core is taken does less
    // (a token's score does not depend on the range it was scored in).
    const int64_t per_claim =
        std::max<int64_t>(score_block, n / (int64_t(pool.n_threads()) * 16) / score_block * score_block);
    std::atomic<int64_t> next_claim{0};
    const auto job = [&](int ith, int) {
        int32_t * dots = dots_.data() + size_t(ith) * size_t(dots_stride_);
        for (int64_t j_begin; (j_begin = next_claim.fetch_add(per_claim, std::memory_order_relaxed)) < n;) {
            const int64_t j_end = std::min(n, j_begin + per_claim);
            for (int64_t j0 = j_begin; j0 < j_end; j0 += score_block) {
                const int nb = int(std::min<int64_t>(score_block, j_end - j0));
                const int n_next = int(std::clamp<int64_t>(j_end - j0 - score_block, 0, score_block));
                const bf16_bits * next_scales = scales + size_t(j0 + score_block) * n_kv;
                for (size_t o = 0; o < size_t(n_next) * n_kv; o += 32) __builtin_prefetch(next_scales + o, 0, 3);
                score_tokens(dots_of, keys + size_t(j0) * row_bytes_, scales + size_t(j0) * n_kv, nb, n_next, dots,
                             scores + j0, stride);
            }
        }
    };
    pool.run(job, n * int64_t(shape_.n_head) * shape_.head_dim);
}

void quant_copy::score_row(ggml_type type, const void * k, float * scores, int64_t stride) {
    HILL_ASSERT(query_ready_);
    HILL_ASSERT(type == ggml_type::f16 || type == ggml_type::f32);
    HILL_ASSERT(k != nullptr && scores != nullptr);
    const size_t w = query_pair_ * size_t(shape_.n_head_kv) * size_t(shape_.head_dim);
    quantize_row(type, k, inv_channel_.data() + w, row_keys_.data(), row_scales_.data());
    score_tokens(kernel(), row_keys_.data(), row_scales_.data(), 1, 0, dots_.data(), scores, stride);
}

}  // namespace hill
