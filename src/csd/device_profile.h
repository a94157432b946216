// The device profile (DESIGN.md §5): caps on what a storage device can do per second, enforced on the
// emulator (and on the plain SSD's reads) with token buckets, so that a CPU stands in for the paper's
// SmartSSD at its speeds.
//
//   internal_read_bps  bytes per second read from flash inside the device (NAND -> FPGA)
//   score_bps          bytes of FP16 keys per second the scoring kernel consumes (the planner's f_s)
//   link_bps           bytes per second over the device's host link (PCIe): score blocks, selected KV
// 0 means uncapped. Profiles: `none` (all uncapped: the emulator runs as fast as this CPU lets it),
// `smartssd` (the paper's device, numbers and sources in device_profile.cpp), or a JSON file
//   {"name": "...", "internal_read_gbps": 3.2, "score_gbps": 16, "link_gbps": 3.5}
// (GB/s = 1e9 bytes per second; a missing key is uncapped).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>

namespace hill::csd {

struct device_profile {
    std::string name = "none";
    double internal_read_bps = 0.0;
    double score_bps = 0.0;
    double link_bps = 0.0;
};

// `none`, `smartssd`, or the path of a JSON profile (above). Errors (hill::error): an unknown name
// that is not a readable file (usage); a file that is not a JSON object of non-negative finite
// numbers under the known keys, naming the file and the key (bad_input).
device_profile load_device_profile(std::string_view name_or_path);

// One line: "smartssd (read 3.2 GB/s, score 16 GB/s, link 3.5 GB/s)".
std::string describe(const device_profile & p);

// A token bucket (rate bytes per second, burst `burst_bytes`): take(n) returns at once while tokens
// last and otherwise sleeps until the bucket has refilled enough, so that over any interval longer
// than burst / rate the bytes taken stay within rate · interval + burst. rate 0: never waits. One
// thread uses a bucket at a time.
class token_bucket {
public:
    // burst: 1 MiB lets a whole coalesced read through at once, and is 0.3 ms at 3.2 GB/s: caps hold
    // to well under 1% over a decode step of milliseconds.
    explicit token_bucket(double rate_bps = 0.0, double burst_bytes = 1 << 20);
    double rate_bps() const { return rate_; }
    // Takes n bytes' worth, waiting as needed; gives up early (returns false) when cancelled()
    // returns true (polled every 2 ms at most while waiting). Adds the time waited to *waited_us.
    template <class F>
    bool take(uint64_t n, F && cancelled, uint64_t * waited_us) {
        if (rate_ <= 0.0) return true;
        refill();
        tokens_ -= double(n);
        if (tokens_ >= 0.0) return true;
        const clock::time_point t0 = clock::now();
        while (tokens_ < 0.0 && !cancelled()) {
            std::this_thread::sleep_for(std::chrono::duration<double>(std::min(-tokens_ / rate_, 0.002)));
            refill();
        }
        if (waited_us != nullptr) {
            *waited_us += uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - t0).count());
        }
        return tokens_ >= 0.0;
    }

private:
    using clock = std::chrono::steady_clock;
    void refill();
    double rate_;
    double burst_;
    double tokens_;       // may go negative: a take larger than the burst borrows, and later takes wait
    clock::time_point last_;
};

}  // namespace hill::csd
