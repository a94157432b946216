#include "experiments/plot.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/error.h"

namespace hill {

namespace {

void write_text(const std::string & path, const std::string & text) {
    atomic_file f(path);
    f.write(text.data(), text.size());
    f.commit();
}

// A string inside a gnuplot single-quoted string (a quote is doubled).
std::string quoted(const std::string & s) {
    std::string out = "'";
    for (const char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
    return out + "'";
}

std::string number(double x) {
    return std::isfinite(x) ? fmt::format("{:.6g}", x) : std::string("NaN");
}

}  // namespace

bool gnuplot_available() {
    return std::system("command -v gnuplot > /dev/null 2>&1") == 0;
}

void require_gnuplot() {
    if (!gnuplot_available())
        fail_usage("--plot needs gnuplot, which is not on PATH (Debian: apt-get install gnuplot-nox)");
}

void write_plot(const plot_spec & spec, const std::string & stem, const std::string & png_path) {
    require_gnuplot();
    const std::string dat = stem + ".dat", gp = stem + ".gp";
    std::string data, script = fmt::format(
                          "set terminal pngcairo size 1200,700 noenhanced\nset output {}\nset title {}\nset xlabel "
                          "{}\nset ylabel {}\n"
                          "set grid\nset key outside right top\n",
                          quoted(png_path), quoted(spec.title), quoted(spec.xlabel), quoted(spec.ylabel));
    if (spec.logx) script += "set logscale x\n";
    if (spec.logy) script += "set logscale y\n";
    if (spec.categories.empty()) {
        // One data block per series (gnuplot's index), separated by two blank lines.
        for (const plot_series & s : spec.series) {
            data += "# " + s.title + "\n";
            for (const auto & [x, y] : s.points) data += number(x) + " " + number(y) + "\n";
            data += "\n\n";
        }
        for (const auto & [x, text] : spec.xmarks) {
            script += fmt::format(
                "set arrow from {0}, graph 0 to {0}, graph 1 nohead dashtype 2 linewidth 2\n"
                "set label {1} at {0}, graph 0.95 left offset 0.5,0\n",
                number(x), quoted(text));
        }
        script += "plot ";
        for (size_t i = 0; i < spec.series.size(); ++i) {
            script += fmt::format("{}{} index {} using 1:2 with linespoints linewidth 2 title {}",
                                  i > 0 ? ", \\\n  " : "", quoted(dat), i, quoted(spec.series[i].title));
        }
    } else {
        // One row per category: its name, then one column per series.
        for (size_t c = 0; c < spec.categories.size(); ++c) {
            data += "\"" + spec.categories[c] + "\"";
            for (const plot_series & s : spec.series)
                data += " " + number(c < s.points.size() ? s.points[c].second : NAN);
            data += "\n";
        }
        script +=
            "set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
            "set xtics rotate by -30\nset xlabel offset 0,-1\nplot ";
        for (size_t i = 0; i < spec.series.size(); ++i) {
            script += fmt::format("{}{} using {}{} title {}", i > 0 ? ", \\\n  " : "", quoted(dat), i + 2,
                                  i == 0 ? ":xtic(1)" : "", quoted(spec.series[i].title));
        }
    }
    script += "\n";
    write_text(dat, data);
    write_text(gp, script);
    std::string shell_gp = "'";  // the script's path in single quotes for the shell
    for (const char c : gp) shell_gp += c == '\'' ? std::string("'\\''") : std::string(1, c);
    const std::string cmd = "gnuplot " + shell_gp + "' 2>&1";
    FILE * p = popen(cmd.c_str(), "r");
    if (p == nullptr) fail_input("could not start gnuplot for the plot '{}'", png_path);
    std::string out;
    char buf[512];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    const int rc = pclose(p);
    std::error_code ec;
    if (rc != 0 || !std::filesystem::exists(png_path, ec) || std::filesystem::file_size(png_path, ec) == 0) {
        fail_input("gnuplot could not draw the plot '{}' from '{}' (exit status {}): {}", png_path, gp,
                   WIFEXITED(rc) ? WEXITSTATUS(rc) : rc, out);
    }
}

}  // namespace hill
