// Loss curves of training runs (`mtb plot`): each run directory's metrics.jsonl is read
// and its train loss (thin, light, optionally smoothed) and validation loss (thick, with
// markers) are drawn against step or tokens, several runs on one chart with a legend.
// The chart is laid out once as a list of shapes, then written twice: as SVG text (polylines,
// circles and <text> elements, so the file stays searchable) and as PNG drawn by cairo.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mtb {

struct LossPoint {
  int64_t step = 0;
  int64_t tokens = 0;
  double loss = 0;
};

struct RunMetrics {
  std::string label;  // the legend entry
  std::string path;   // the metrics.jsonl read
  std::vector<LossPoint> train, val;
};

// Reads RUN/metrics.jsonl (or RUN itself when it is a file): lines holding "train_loss" are
// training points, lines holding "val_loss" validation points, both with "step" and "tokens";
// blank lines, other lines and null losses are skipped. `label` defaults to the run
// directory's name. Throws mtb::Error (one line) for a missing directory or file, a line that
// is not a JSON object (file and line named), a loss or step that is not a number, or a file
// without any loss.
RunMetrics read_run_metrics(const std::string& run, const std::string& label = "");

struct PlotOptions {
  bool x_tokens = false;    // x axis: tokens seen instead of optimizer steps
  double smooth = 0.0;      // train loss EMA weight in [0, 1): y_i = s y_{i-1} + (1 - s) x_i (debiased)
  int width = 960, height = 600;
  std::string title = "Loss";
  std::optional<double> y_min, y_max;  // default: the data's range
};

// RGB 0..255 of series i's color (a fixed palette, repeating after 8).
void series_color(size_t i, int rgb[3]);

// Up to about `target` round tick values (1, 2 or 5 x 10^k apart) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target);

// Draws the runs into OUT.svg and OUT.png (OUT without extension; a trailing .svg or .png is
// dropped) and returns the two paths. Throws mtb::Error for no runs, no points, a bad size
// or a file that cannot be written.
std::vector<std::string> plot_loss_curves(const std::vector<RunMetrics>& runs, const std::string& out,
                                          const PlotOptions& options);

}  // namespace mtb
