#include "kv/device_tier.h"

#include "core/error.h"

#include <algorithm>
#include <vector>

namespace hill {

void device_tier::attend(const kv_view & kv, const int32_t * rows, int64_t causal_p0, int kv_head) {
    attend_split(kv, rows, causal_p0, kv_head, capacity_tokens(), nullptr);
}

void device_tier::attend_in_parts(const kv_view & kv, const int32_t * rows, int64_t causal_p0, int64_t part,
                                  const std::function<void(int64_t)> & between) {
    HILL_ASSERT(part > 0 && part % attention_key_split == 0);
    attend_split(kv, rows, causal_p0, -1, part, &between);
}

void device_tier::attend_split(const kv_view & kv, const int32_t * rows, int64_t causal_p0, int kv_head, int64_t part,
                               const std::function<void(int64_t)> * between) {
    const int64_t cap = std::min(part, capacity_tokens());
    HILL_ASSERT(cap > 0);
    const size_t eb = kv.type == ggml_type::f16 ? 2 : 4;
    for (int64_t j0 = 0; j0 < kv.n_kv; j0 += cap) {
        if (j0 > 0 && between != nullptr && *between) (*between)(j0);
        const int64_t nj = std::min(cap, kv.n_kv - j0);
        kv_view part = kv;
        part.n_kv = nj;
        if (rows == nullptr) {
            part.k = static_cast<const uint8_t *>(kv.k) + size_t(j0 * kv.row_stride) * eb;
            part.v = static_cast<const uint8_t *>(kv.v) + size_t(j0 * kv.row_stride) * eb;
        }
        attend_batch(part, rows != nullptr ? rows + j0 : nullptr,
                     causal_p0 == no_causal_mask ? no_causal_mask : causal_p0 - j0, kv_head);
    }
}

namespace {

class cpu_device_tier final : public device_tier {
public:
    cpu_device_tier(thread_pool & pool, int64_t max_tokens, int64_t n_embd_q, int n_head)
        : pool_(pool),
          max_tokens_(max_tokens),
          acc_(size_t(max_tokens * n_embd_q)),
          st_(size_t(max_tokens * n_head)) {}

    std::string_view name() const override { return "cpu"; }
    // Host memory is attended in place: no staging slots, so no batch limit.
    int64_t capacity_tokens() const override { return no_causal_mask; }

    void begin(const attention_shape & s, const float * q, int64_t n_tok) override {
        HILL_ASSERT(n_tok > 0 && n_tok <= max_tokens_);
        HILL_ASSERT(size_t(n_tok) * size_t(s.n_head) <= st_.size());
        shape_ = s;
        q_ = q;
        n_tok_ = n_tok;
        std::fill_n(acc_.begin(), size_t(n_tok) * size_t(s.n_head) * size_t(s.head_dim), 0.0f);
        std::fill_n(st_.begin(), size_t(n_tok) * size_t(s.n_head), softmax_state{});
    }

    void end(float * out) override {
        const int64_t hd = shape_.head_dim;
        for (int64_t i = 0; i < n_tok_ * shape_.n_head; ++i) {
            attention_head_finish(acc_.data() + i * hd, st_[size_t(i)], int(hd), out + i * hd);
        }
        n_tok_ = 0;
    }

private:
    void attend_batch(const kv_view & kv, const int32_t * rows, int64_t causal_p0, int kv_head) override {
        HILL_ASSERT(n_tok_ > 0);
        const uint64_t eb = kv.type == ggml_type::f16 ? 2 : 4;
        if (kv_head >= 0) {
            // The query heads of one KV head: a shape of one KV head over the head's columns.
            HILL_ASSERT(n_tok_ == 1 && causal_p0 == no_causal_mask && kv_head < shape_.n_head_kv);
            const int group = shape_.n_head / shape_.n_head_kv;
            attention_shape sub = shape_;
            sub.n_head = group;
            sub.n_head_kv = 1;
            const size_t q_off = size_t(kv_head) * size_t(group) * size_t(shape_.head_dim);
            const size_t kv_off = size_t(kv_head) * size_t(shape_.head_dim) * eb;
            const kv_view part{kv.type, static_cast<const uint8_t *>(kv.k) + kv_off,
                               static_cast<const uint8_t *>(kv.v) + kv_off, kv.n_kv, kv.row_stride};
            attention_decode_accumulate(sub, q_ + q_off, part, rows, acc_.data() + q_off,
                                        st_.data() + size_t(kv_head) * size_t(group), pool_);
            stats_.kv_bytes_attended += 2 * uint64_t(kv.n_kv) * uint64_t(shape_.head_dim) * eb;
            return;
        }
        if (n_tok_ == 1 && causal_p0 == no_causal_mask) {
            attention_decode_accumulate(shape_, q_, kv, rows, acc_.data(), st_.data(), pool_);
        } else {
            attention_prefill_accumulate(shape_, q_, n_tok_, kv, rows, causal_p0, acc_.data(), st_.data(), pool_);
        }
        stats_.kv_bytes_attended += 2 * uint64_t(kv.n_kv) * uint64_t(shape_.n_head_kv) * uint64_t(shape_.head_dim) * eb;
    }

    thread_pool & pool_;
    int64_t max_tokens_;
    attention_shape shape_;
    const float * q_ = nullptr;
    int64_t n_tok_ = 0;
    std::vector<float> acc_;          // f32 [max_tokens, n_head, head_dim] running Σ p·v
    std::vector<softmax_state> st_;   // [max_tokens, n_head]
};

}  // namespace

std::unique_ptr<device_tier> make_cpu_device_tier(thread_pool & pool, int64_t max_tokens, int64_t n_embd_q,
                                                  int n_head) {
    return std::make_unique<cpu_device_tier>(pool, max_tokens, n_embd_q, n_head);
}

}  // namespace hill
