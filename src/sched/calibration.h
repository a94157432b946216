// The calibration profile (DESIGN.md §1, §4): the four rates of this machine the planner's latency
// model needs (HillInfer paper §4.3 "Analytical Latency Model", Eq. 2), measured by `hillinfer
// calibrate` (experiments/calibrate.h) and cached as JSON, one entry per (cold-pool file system,
// storage device, device profile).
//
// Cache file (default: $XDG_CACHE_HOME/hillinfer/calibration.json or ~/.cache/hillinfer/...):
//   {"version": 1, "entries": {"<key>": {"f_c_gbps": 3.1, "f_s_gbps": 0.31, "b_c_gbps": 9.8,
//                                         "b_s_gbps": 0.92, ...other keys kept as written...}}}
// GB/s = 1e9 bytes per second; the four rates are required, finite and > 0; any other key of an
// entry (kv_dir, storage, profile, measured_at, shape) is information for people and is ignored.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "csd/device.h"

namespace hill {

struct calibration {
    double f_c_bps = 0.0;  // host scoring: bytes of f16 keys the host scorer (score/host_scorer.h) scores per second
    double f_s_bps = 0.0;  // storage device scoring, under its profile: bytes of f16 keys per second, its page
                           // reads included (the device reads the keys it scores)
    double b_c_bps = 0.0;  // hot pool → attention: bytes of selected K and V rows gathered from DRAM per second
    double b_s_bps = 0.0;  // cold pool → host: bytes of selected K and V rows the storage device returns per second
    std::string source;    // where the rates come from: "FILE [key]" or "default (...)"
};

// The rates assumed when no calibration is cached (the run report says so; `hillinfer calibrate`
// measures them): f_c 4 GB/s (an AVX2 INT8 scorer on a few cores; bench_score), B_c 10 GB/s (a
// gather of 4 KiB rows from DRAM), and for the storage device its profile's caps — f_s the smaller
// of score and internal read (it reads the keys it scores), B_s the smaller of internal read and
// link — or, uncapped, 1 GB/s each (the emulator's one kernel thread and a consumer SSD's random
// reads). Our assumptions, not measurements.
calibration default_calibration(const csd::device_profile & profile);

// The cache key of a cold pool in kv_dir on storage under profile: "dev MAJOR:MINOR/STORAGE/PROFILE",
// the file system's device of kv_dir (or of its nearest existing parent: the pool's directory may not
// exist yet), so that every directory of one disk shares the entry.
std::string calibration_key(const std::string & kv_dir, std::string_view storage, std::string_view profile);

// The entry `key` of the cache file at path; nullopt when the file does not exist or has no such
// entry. Errors (hill::error, bad_input): a file that is not valid JSON, not a calibration cache
// (version 1 with an "entries" object) or whose entry lacks a rate or has one that is not a finite
// number > 0 — naming the file, the JSON Pointer and the value, and what to do (a bad entry: rerun
// `hillinfer calibrate`, which replaces it; a file that is no cache, which calibrate does not overwrite:
// remove it or give `calibrate --out` another path).
std::optional<calibration> load_calibration(const std::string & path, const std::string & key);

// The cached calibration of a cold pool in kv_dir on storage under profile (the entry calibration_key
// names in the cache file at cache_path), or default_calibration(profile) when none is cached or the
// cache is unusable (load_calibration's error, then logged as a warning: the cache only tunes the
// planner, so a corrupt one does not stop a run; `hillinfer calibrate` still refuses it).
calibration calibration_for(const std::string & cache_path, const std::string & kv_dir, csd::storage_kind storage,
                            const csd::device_profile & profile);

// Writes c as entry `key` of the cache file at path (atomically, core/atomic_file.h), keeping the
// file's other entries; `extra` (a JSON object) adds informational keys to the entry. Creates path's
// directory when missing; replaces a bad entry `key`. Errors, naming the path: the directory cannot be
// created or written, an existing file is not a calibration cache (as load_calibration; bad_input); the
// path is a directory (usage).
void save_calibration(const std::string & path, const std::string & key, const calibration & c,
                      const nlohmann::json & extra);

}  // namespace hill
