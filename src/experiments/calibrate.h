// `hillinfer calibrate`: measures the planner's four rates on this machine (sched/calibration.h;
// DESIGN.md §4; HillInfer paper §4.3 Eq. 2) with short, bounded runs over a random context whose KV
// is in a real cold pool in kv_dir, through the engine's own parts:
//   f_c  the host scorer (score/host_scorer.h, INT8 keys and query: what hillinfer scores the hot pool
//        with beside the emulator) over every key of the layer in DRAM: key bytes per second;
//   f_s  score passes of the storage device (csd::make_device with the profile) over every cold token
//        of the layer: key bytes per second, page reads included;
//   B_c  gathers of a random α share of the layer's K and V rows in DRAM into a staging buffer on the
//        host threads: K and V bytes per second;
//   B_s  read passes of the storage device for a fresh random α share of the cold tokens each pass:
//        K and V bytes returned per second.
// Each rate runs whole passes until `seconds` have passed (at least one pass).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/thread_pool.h"
#include "csd/device.h"
#include "engine/context.h"
#include "sched/calibration.h"

namespace hill {

class model;

struct calibrate_params {
    std::string kv_dir;  // cold pool directory (on the disk to measure)
    csd::storage_kind storage = csd::storage_kind::emulator;
    csd::device_profile profile;
    // The attention shape measured: Llama-3-8B's (32 query / 8 KV heads of 128, f16: 2 KiB of keys per
    // token), one layer of n_tokens tokens — 32 MiB of keys at 16384, so that no rate runs from the caches.
    int n_head = 32, n_head_kv = 8, head_dim = 128;
    int64_t n_tokens = 16384;
    double alpha = 0.2;    // share of the tokens gathered (B_c) and read (B_s) per pass
    double seconds = 0.5;  // per rate, at least
};

// One rate: bytes over seconds of `passes` passes.
struct rate_measurement {
    double bytes = 0, seconds = 0;
    int passes = 0;
    double bps() const { return seconds > 0 ? bytes / seconds : 0.0; }
};

struct calibrate_result {
    rate_measurement f_c, f_s, b_c, b_s;
    calibration cal;  // the four rates (source: "measured")
};

// The checks of run_calibration's parameters, alone (usage errors as below): to refuse bad flags first.
void check(const calibrate_params & p);

// Errors (hill::error): usage for n_tokens outside [1024, 2^22], alpha outside (0, 1], seconds outside
// (0, 60]; the cold pool's and the device's errors (kv_dir not writable, too little free space,
// failed reads) as context and csd::make_device report them. The files it writes in kv_dir (a model
// and the cold pool) are removed at the end, also on an error.
calibrate_result run_calibration(const calibrate_params & p, thread_pool & pool);

// A context of one sequence of n random f16 tokens (standard normal K and V) of model m in one cold
// pool in kv_dir, `cold` of them without a hot copy, under policy hillinfer with INT8 keys and query
// on `storage` with `profile`. k and v, if given, receive the KV: f16 bits [n_layer][n, n_embd_kv].
// Errors: as context.
std::unique_ptr<context> make_random_context(const model & m, int64_t n, double cold, const std::string & kv_dir,
                                             csd::storage_kind storage, const csd::device_profile & profile,
                                             double alpha, thread_pool & pool,
                                             std::vector<std::vector<uint16_t>> * k = nullptr,
                                             std::vector<std::vector<uint16_t>> * v = nullptr);

}  // namespace hill
