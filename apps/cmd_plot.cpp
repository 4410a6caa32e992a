// mtb plot RUN... -o OUT [--label NAME]... [--x step|tokens] [--smooth S] [--title T]
//          [--width W] [--height H] [--y-min Y] [--y-max Y]
//   Loss curves of training runs (each RUN a run directory holding metrics.jsonl) on one
//   chart: OUT.svg and OUT.png.
#include <cstdio>

#include "commands.h"
#include "mtb/core/error.h"
#include "mtb/tools/plot.h"

namespace mtb::app {

void add_plot(CLI::App& app) {
  struct Opts {
    std::vector<std::string> runs, labels;
    std::string out, x = "step";
    PlotOptions plot;
    double y_min = 0, y_max = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("plot", "Draw the loss curves of training runs to SVG and PNG");
  sub->add_option("runs", o->runs, "Run directories (each holding metrics.jsonl)")->required();
  sub->add_option("-o,--out", o->out, "Output path without extension: writes OUT.svg and OUT.png")->required();
  sub->add_option("--label", o->labels, "Legend label per run, in order (default: the run directory's name)");
  sub->add_option("--x", o->x, "X axis: step or tokens")->check(CLI::IsMember({"step", "tokens"}))->capture_default_str();
  sub->add_option("--smooth", o->plot.smooth, "Train-loss smoothing, an EMA weight in [0, 1) (0: raw)")
      ->capture_default_str();
  sub->add_option("--title", o->plot.title, "Chart title")->capture_default_str();
  sub->add_option("--width", o->plot.width, "Width in pixels")->capture_default_str();
  sub->add_option("--height", o->plot.height, "Height in pixels")->capture_default_str();
  auto* ymin = sub->add_option("--y-min", o->y_min, "Lowest loss shown (default: from the data)");
  auto* ymax = sub->add_option("--y-max", o->y_max, "Highest loss shown (default: from the data)");
  sub->callback([o, ymin, ymax] {
    if (!o->labels.empty() && o->labels.size() != o->runs.size())
      throw Error("--label: " + std::to_string(o->labels.size()) + " labels for " + std::to_string(o->runs.size()) +
                  " runs (give one per run, or none)");
    std::vector<RunMetrics> runs;
    for (size_t i = 0; i < o->runs.size(); ++i)
      runs.push_back(read_run_metrics(o->runs[i], o->labels.empty() ? "" : o->labels[i]));
    o->plot.x_tokens = o->x == "tokens";
    if (ymin->count()) o->plot.y_min = o->y_min;
    if (ymax->count()) o->plot.y_max = o->y_max;
    for (const std::string& path : plot_loss_curves(runs, o->out, o->plot)) std::printf("wrote %s\n", path.c_str());
  });
}

}  // namespace mtb::app
