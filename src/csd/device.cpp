#include "csd/device.h"

#include "core/error.h"
#include "csd/emulator.h"
#include "csd/plain_ssd.h"

namespace hill::csd {

std::string_view name(storage_kind k) {
    return k == storage_kind::plain ? "plain" : "emulator";
}

storage_kind parse_storage(std::string_view s) {
    for (storage_kind k : {storage_kind::plain, storage_kind::emulator}) {
        if (s == name(k)) return k;
    }
    fail_usage("unknown storage '{}': expected plain or emulator", s);
}

void device::count_store_io(const kv_store_stats & before) {
    write_bytes_ += kv_.stats().cold_write_bytes - before.cold_write_bytes;
    promote_read_bytes_ += kv_.stats().cold_read_bytes - before.cold_read_bytes;
}

void device::append(int il, int64_t n, const void * k, const void * v) {
    const kv_store_stats before = kv_.stats();
    kv_.append(il, n, k, v);
    count_store_io(before);
}

bool device::move(int il, int64_t t, kv_tier to) {
    const kv_store_stats before = kv_.stats();
    const bool moved = kv_.move(il, t, to);
    count_store_io(before);
    return moved;
}

device_counters device::counters() const {
    device_counters c = pass_counters();
    c.internal_write_bytes += write_bytes_;
    c.link_write_bytes += write_bytes_;
    c.internal_read_bytes += promote_read_bytes_;
    c.link_kv_bytes += promote_read_bytes_;
    return c;
}

void check_scoring(storage_kind k, const score_params & p) {
    if (k != storage_kind::emulator) return;
    if (p.key == score_precision::fp16 || p.query != query_precision::int8) {
        fail_usage("--storage emulator scores INT8 or INT4 keys against an INT8 query (the device's integer kernel); "
                   "got --score-precision {} --query-precision {}", name(p.key), name(p.query));
    }
}

std::unique_ptr<device> make_device(const storage_params & p, kv_store & kv, const attention_shape & s,
                                    thread_pool & pool) {
    if (p.block_tokens < 1 || p.block_tokens > max_block_tokens) {
        fail_usage("--score-block must be in [1, {}] tokens, got {}", max_block_tokens, p.block_tokens);
    }
    if (p.kind == storage_kind::plain) return std::make_unique<plain_ssd>(p, kv, s, pool);
    return std::make_unique<emulator>(p, kv, s);
}

}  // namespace hill::csd
