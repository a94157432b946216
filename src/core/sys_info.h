// Process and machine facts reported in run summaries.
#pragma once

#include <cstdint>
#include <string>

namespace hill {

// Peak resident set size of this process so far (VmHWM), in bytes; 0 if unknown.
uint64_t peak_rss_bytes();

// Memory the kernel could give this process without swapping (MemAvailable of /proc/meminfo), in
// bytes; 0 if unknown.
uint64_t available_memory_bytes();

// "3.2 GiB"-style rendering of a byte count (binary units).
std::string format_bytes(uint64_t n);

// "1 token", "0 tokens", "5 tokens": a count and a noun whose plural takes an 's'.
std::string format_count(int64_t n, const char * noun);

// Monotonic clock in microseconds.
int64_t time_us();

}  // namespace hill
