// Plots of the `hillinfer bench` experiments, drawn by gnuplot (Debian: gnuplot-nox) as PNG files.
//
// write_plot writes the data (STEM.dat) and the script (STEM.gp) beside each other, so that a plot can
// be redrawn or restyled by hand (`gnuplot STEM.gp`), then runs gnuplot on the script.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace hill {

struct plot_series {
    std::string title;
    std::vector<std::pair<double, double>> points;  // (x, y); lines mode: drawn in this order
};

struct plot_spec {
    std::string title, xlabel, ylabel;
    bool logx = false, logy = false;
    // Lines mode (categories empty): every series a line with points over numeric x.
    // Bars mode: clustered bars, one cluster per category; series[s].points[i].second is the bar of
    // series s in categories[i] (its x is ignored; NaN: no bar).
    std::vector<std::string> categories;
    std::vector<plot_series> series;
    // Vertical lines at x with a label (lines mode), e.g. the planner's β.
    std::vector<std::pair<double, std::string>> xmarks;
};

// True when a `gnuplot` command is on PATH.
bool gnuplot_available();

// Refuses (exit_code::usage) when gnuplot is missing, naming the Debian package: call before long work.
void require_gnuplot();

// Writes stem + ".dat", stem + ".gp" and png_path (1200×700 pixels). Errors: hill::error(bad_input) when
// a file cannot be written or gnuplot fails (its exit status and output in the message), usage when gnuplot
// is missing.
void write_plot(const plot_spec & spec, const std::string & stem, const std::string & png_path);

}  // namespace hill
