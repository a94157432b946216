#include "csd/hls/score_top.h"

namespace hill::csd::hls {

uint32_t top_flags(const kernel_config & c) {
    return (c.key_f32 ? 1u : 0u) | (c.int4 ? 2u : 0u) | (c.aggregate_max ? 4u : 0u) | (c.per_kv_head ? 8u : 0u) |
           (c.aggregate_softmax ? 16u : 0u);
}

}  // namespace hill::csd::hls

extern "C" void hill_csd_score(const void * keys, int64_t row_stride, int64_t n_tokens,
                               const hill::csd::hls::query_buffer * qb, int32_t n_head, int32_t n_head_kv,
                               int32_t head_dim, uint32_t flags, float * scores) {
    HLS_PRAGMA(HLS INTERFACE m_axi port = keys offset = slave bundle = gmem0)
    HLS_PRAGMA(HLS INTERFACE m_axi port = qb offset = slave bundle = gmem1)
    HLS_PRAGMA(HLS INTERFACE m_axi port = scores offset = slave bundle = gmem1)
    HLS_PRAGMA(HLS INTERFACE s_axilite port = row_stride)
    HLS_PRAGMA(HLS INTERFACE s_axilite port = n_tokens)
    HLS_PRAGMA(HLS INTERFACE s_axilite port = n_head)
    HLS_PRAGMA(HLS INTERFACE s_axilite port = n_head_kv)
    HLS_PRAGMA(HLS INTERFACE s_axilite port = head_dim)
    HLS_PRAGMA(HLS INTERFACE s_axilite port = flags)
    HLS_PRAGMA(HLS INTERFACE s_axilite port = return)
#ifdef __SYNTHESIS__
    // The on-chip copy of the query: loaded once per call, then read every cycle.
    static hill::csd::hls::query_buffer local;
    HLS_PRAGMA(HLS ARRAY_PARTITION variable = local.q dim = 2 complete)
    local = *qb;
#else
    const hill::csd::hls::query_buffer & local = *qb;  // the emulator's buffer is already its on-chip copy
#endif
    hill::csd::hls::kernel_config c;
    c.n_head = n_head;
    c.n_head_kv = n_head_kv;
    c.head_dim = head_dim;
    c.key_f32 = (flags & 1u) != 0;
    c.int4 = (flags & 2u) != 0;
    c.aggregate_max = (flags & 4u) != 0;
    c.per_kv_head = (flags & 8u) != 0;
    c.aggregate_softmax = (flags & 16u) != 0;
    hill::csd::hls::score_tokens(c, local, keys, row_stride, n_tokens, scores);
}
