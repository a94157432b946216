// Summary statistics shared by the benchmark programs.
#pragma once

#include <algorithm>
#include <vector>

namespace hill::bench {

// Median and spread (min, max) of repeated measurements.
struct stat3 {
    double median, lo, hi;
};

inline stat3 summarize(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace hill::bench
