// The kernel's top function: the entry point Vitis HLS synthesizes (and the emulator calls), with the
// interfaces of a SmartSSD kernel — keys streamed from device DRAM through an AXI master, the query
// loaded once into the on-chip buffer, scores written back through a second AXI master, the sizes as
// AXI-Lite scalars. See README.md beside this file.
#pragma once

#include <cstdint>

#include "csd/hls/score_kernel.h"

extern "C" {

// Scores n_tokens key rows of row_stride elements (f16 bits, or f32 when key_f32) at `keys` against the
// query in `qb`: scores f32 [n_tokens, n_group]. flags: bit 0 key_f32, bit 1 int4, bit 2 aggregate max,
// bit 3 one score per KV head, bit 4 softmax aggregate (overrides bit 2). Bounds as hill::csd::hls::score_tokens.
void hill_csd_score(const void * keys, int64_t row_stride, int64_t n_tokens, const hill::csd::hls::query_buffer * qb,
                    int32_t n_head, int32_t n_head_kv, int32_t head_dim, uint32_t flags, float * scores);
}

namespace hill::csd::hls {

// The flags word of hill_csd_score for a kernel_config.
uint32_t top_flags(const kernel_config & c);

}  // namespace hill::csd::hls
