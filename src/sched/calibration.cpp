#include "sched/calibration.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "format/json_file.h"

namespace hill {

namespace {

constexpr const char * what = "the calibration cache";
constexpr const char * rate_keys[] = {"f_c_gbps", "f_s_gbps", "b_c_gbps", "b_s_gbps"};

// The whole cache, checked: version 1 and an "entries" object. nullopt: no file. A file that is not a
// calibration cache is one calibrate refuses to overwrite, so its message says how to get past it.
std::optional<json_file> load_cache(const std::string & path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return std::nullopt;
    try {
        json_file doc = json_file::load(path, what);
        const json_value root = doc.root();
        root.require_object();
        (void)root.required_int("/version", 1, 1);
        root.at("/entries", "an object of calibration entries").require_object();
        return doc;
    } catch (const error & e) {
        throw error(e.code(), fmt::format("{} (remove the file, or give `hillinfer calibrate --out` another path, "
                                          "then rerun it)",
                                          e.what()));
    }
}

calibration parse_entry(const json_value & e, const std::string & path, const std::string & key) {
    double r[4];
    try {
        for (int i = 0; i < 4; ++i) {
            const json_value v = e.at(std::string("/") + rate_keys[i], "a rate in GB/s");
            if (!v.json().is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0.0) {
                v.fail_expected("a finite rate in GB/s above 0");
            }
            r[i] = v.get<double>() * 1e9;
        }
    } catch (const error & x) {
        fail_input("{} (rerun `hillinfer calibrate`: it replaces the entry)", x.what());
    }
    return calibration{r[0], r[1], r[2], r[3], fmt::format("{} [{}]", path, key)};
}

}  // namespace

calibration default_calibration(const csd::device_profile & p) {
    const auto capped = [](double a, double b) {  // the smaller of two caps, 0 = uncapped
        if (a <= 0.0) return b;
        return b <= 0.0 ? a : std::min(a, b);
    };
    const double f_s = capped(p.score_bps, p.internal_read_bps), b_s = capped(p.internal_read_bps, p.link_bps);
    return calibration{
        4e9, f_s > 0.0 ? f_s : 1e9, 10e9, b_s > 0.0 ? b_s : 1e9,
        fmt::format("default (no calibration cached for this kv-dir, storage and profile: run `hillinfer "
                    "calibrate`; f_c 4 GB/s, B_c 10 GB/s assumed, f_s and B_s from profile {})",
                    p.name)};
}

std::string calibration_key(const std::string & kv_dir, std::string_view storage, std::string_view profile) {
    std::filesystem::path dir = std::filesystem::absolute(kv_dir.empty() ? std::string(".") : kv_dir);
    struct stat st {};
    while (::stat(dir.c_str(), &st) != 0 && dir.has_parent_path() && dir.parent_path() != dir) dir = dir.parent_path();
    return fmt::format("dev {}:{}/{}/{}", major(st.st_dev), minor(st.st_dev), storage, profile);
}

std::optional<calibration> load_calibration(const std::string & path, const std::string & key) {
    const std::optional<json_file> doc = load_cache(path);
    if (!doc) return std::nullopt;
    std::optional<calibration> out;
    doc->root().at("/entries").for_each_member([&](const std::string & k, const json_value & e) {
        if (k == key) out = parse_entry(e, path, key);
    });
    return out;
}

calibration calibration_for(const std::string & cache_path, const std::string & kv_dir, csd::storage_kind storage,
                            const csd::device_profile & profile) {
    try {
        const std::optional<calibration> c =
            load_calibration(cache_path, calibration_key(kv_dir, name(storage), profile.name));
        return c ? *c : default_calibration(profile);
    } catch (const error & e) {
        // The cache only tunes the planner: a bad one costs the measured rates, not the run.
        log_warn("{}; the planner uses the default rates", e.what());
        calibration d = default_calibration(profile);
        d.source = fmt::format(
            "default (the calibration cache {} is unusable; f_c 4 GB/s, B_c 10 GB/s assumed, f_s "
            "and B_s from profile {})",
            cache_path, profile.name);
        return d;
    }
}

void save_calibration(const std::string & path, const std::string & key, const calibration & c,
                      const nlohmann::json & extra) {
    HILL_ASSERT(extra.is_object() && c.f_c_bps > 0 && c.f_s_bps > 0 && c.b_c_bps > 0 && c.b_s_bps > 0);
    nlohmann::json all = {{"version", 1}, {"entries", nlohmann::json::object()}};
    if (const std::optional<json_file> doc = load_cache(path)) all = doc->root().json();
    nlohmann::json e = extra;
    e["f_c_gbps"] = c.f_c_bps / 1e9;
    e["f_s_gbps"] = c.f_s_bps / 1e9;
    e["b_c_gbps"] = c.b_c_bps / 1e9;
    e["b_s_gbps"] = c.b_s_bps / 1e9;
    all["entries"][key] = e;
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
        std::filesystem::create_directories(dir, ec);
        if (ec) fail_input("cannot create the directory '{}' of {} '{}': {}", dir.string(), what, path, ec.message());
    }
    const std::string text = all.dump(2) + "\n";
    atomic_file f(path);  // errors name the path: an unwritable directory, a path that is a directory
    f.write(text.data(), text.size());
    f.commit();
}

}  // namespace hill
