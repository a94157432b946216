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

bool scores_at(storage_kind k, const score_params & p) {
    return k != storage_kind::emulator || (p.key != score_precision::fp16 && p.query == query_precision::int8);
}

void check_scoring(storage_kind k, const score_params & p) {
    if (!scores_at(k, p)) {
        fail_usage("--storage emulator scores INT8 or INT4 keys against an INT8 query (the device's integer kernel); "
                   "got --score-precision {} --query-precision {}", name(p.key), name(p.query));
    }
}

std::unique_ptr<device> make_device(const storage_params & p, const cold_pool * pool, const kv_layout & layout,
                                    const attention_shape & s, thread_pool & threads) {
    if (p.block_tokens < 1 || p.block_tokens > max_block_tokens) {
        fail_usage("--score-block must be in [1, {}] tokens, got {}", max_block_tokens, p.block_tokens);
    }
    if (p.kind == storage_kind::plain) return std::make_unique<plain_ssd>(p, pool, layout, s, threads);
    return std::make_unique<emulator>(p, pool, layout, s);
}

}  // namespace hill::csd
