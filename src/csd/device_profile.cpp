#include "csd/device_profile.h"

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "format/json_file.h"

namespace hill::csd {

namespace {

// The paper's device (HillInfer paper §5 "Hardware"): a Samsung SmartSSD (Xilinx Kintex UltraScale+
// KU15P FPGA, 4 GB DDR4, 4 TB NAND) "providing a peak bandwidth of approximately 3.2 GB/s", on a
// PCIe 3.0 interface.
//   internal read 3.2 GB/s: that peak, NAND to FPGA through the device's internal PCIe switch.
//   link 3.5 GB/s: PCIe 3.0 ×4 carries 8 GT/s × 4 lanes × 128/130 = 3.94 GB/s; after packet (TLP)
//     overheads about 3.5 GB/s of payload is what such links deliver (our estimate).
//   score 16 GB/s: the kernel consumes one 512-bit AXI word of keys per cycle at 250 MHz, a usual
//     Vitis kernel clock on that part (our assumption; the paper gives no FPGA throughput). The
//     flash feeds it at 3.2 GB/s, so with this profile the device is read-bound, as on the real one.
device_profile smartssd_profile() {
    return device_profile{"smartssd", 3.2e9, 16e9, 3.5e9};
}

}  // namespace

device_profile load_device_profile(std::string_view name_or_path) {
    if (name_or_path == "none") return device_profile{};
    if (name_or_path == "smartssd") return smartssd_profile();
    const std::string path(name_or_path);
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        fail_usage("--csd-profile '{}': not none, smartssd, or an existing JSON file", path);
    }
    const json_file doc = json_file::load(path, "the device profile");
    device_profile p;
    p.name = path;
    doc.root().for_each_member([&](const std::string & key, const json_value & value) {
        if (key == "name") {
            p.name = value.get<std::string>();
            return;
        }
        double * dst = key == "internal_read_gbps" ? &p.internal_read_bps
                       : key == "score_gbps"       ? &p.score_bps
                       : key == "link_gbps"        ? &p.link_bps
                                                   : nullptr;
        if (dst == nullptr) {
            fail_input(
                "{}: unknown key \"{}\" in the device profile (expected name, internal_read_gbps, "
                "score_gbps, link_gbps)",
                path, key);
        }
        if (!value.json().is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0.0) {
            value.fail_expected("a non-negative number of GB/s (0: uncapped)");
        }
        *dst = value.get<double>() * 1e9;
    });
    return p;
}

std::string describe(const device_profile & p) {
    auto rate = [](double bps) { return bps > 0.0 ? fmt::format("{:.3g} GB/s", bps / 1e9) : std::string("uncapped"); };
    return fmt::format("{} (read {}, score {}, link {})", p.name, rate(p.internal_read_bps), rate(p.score_bps),
                       rate(p.link_bps));
}

token_bucket::token_bucket(double rate_bps, double burst_bytes)
    : rate_(rate_bps), burst_(burst_bytes), tokens_(burst_bytes), last_(clock::now()) {}

void token_bucket::refill() {
    const clock::time_point now = clock::now();
    tokens_ = std::min(burst_, tokens_ + std::chrono::duration<double>(now - last_).count() * rate_);
    last_ = now;
}

}  // namespace hill::csd
