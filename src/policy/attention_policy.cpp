#include "policy/attention_policy.h"

#include "core/error.h"
#include "core/sys_info.h"
#include "policy/selection_policy.h"

namespace hill {

std::string_view name(policy_kind k) {
    switch (k) {
        case policy_kind::full: return "full";
        case policy_kind::hillinfer: return "hillinfer";
        case policy_kind::streaming: return "streaming";
    }
    return "?";
}

policy_kind parse_policy(std::string_view s) {
    for (policy_kind k : {policy_kind::full, policy_kind::hillinfer, policy_kind::streaming}) {
        if (s == name(k)) return k;
    }
    fail_usage("unknown policy '{}': expected full, hillinfer or streaming", s);
}

void validate(const policy_params & p) {
    if (!(p.alpha > 0.0 && p.alpha <= 1.0)) fail_usage("--alpha must be in (0, 1], got {}", p.alpha);
    if (p.n_sinks < 0) fail_usage("--sinks must be >= 0, got {}", p.n_sinks);
    if (p.n_window < 0) fail_usage("--window must be >= 0, got {}", p.n_window);
}

namespace {

// Dense attention over every token, segment by segment across the tiers.
class full_policy final : public attention_policy {
public:
    explicit full_policy(const attention_shape & s, int n_layer) : shape_(s) { stats_.layers.resize(size_t(n_layer)); }
    policy_kind kind() const override { return policy_kind::full; }

    void attend(int il, const float * q, kv_store & kv, csd::device & storage, device_tier & dev,
                float * out) override {
        const int64_t t0 = time_us();
        dev.begin(shape_, q, 1);
        auto attend_segment = [&](const kv_view & view, const int32_t * rows, const int32_t *) { dev.attend(view, rows); };
        const bool on_disk = !kv.cold_layer(il).groups.empty();
        device_pass_guard guard(storage);
        if (on_disk) storage.read_all_begin(il);  // the device reads its pages while the host attends to its own
        kv.for_each_segment(il, attend_segment, kv_part::k_and_v, kv_scope::in_memory);
        if (on_disk) storage.read_drain(attend_segment);
        guard.done();
        dev.end(out);
        policy_layer_stats & L = stats_.layers[size_t(il)];
        const int64_t n = kv.n_tokens(il);
        ++L.n_steps;
        L.n_context += uint64_t(n);
        L.n_attended += uint64_t(n);
        L.n_attended_hot += uint64_t(n - kv.n_cold(il));
        stats_.t_attend_us += uint64_t(time_us() - t0);
    }

private:
    attention_shape shape_;
};

}  // namespace

std::unique_ptr<attention_policy> make_policy(const policy_params & p, const attention_shape & s, int n_layer,
                                              int64_t n_ctx, thread_pool & pool) {
    validate(p);
    if (p.kind == policy_kind::full) return std::make_unique<full_policy>(s, n_layer);
    return std::make_unique<selection_policy>(p, s, n_layer, n_ctx, pool);
}

}  // namespace hill
