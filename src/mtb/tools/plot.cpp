#include "mtb/tools/plot.h"

#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include "mtb/core/error.h"
#include "mtb/core/mapped_file.h"

namespace fs = std::filesystem;

namespace mtb {

// ---- reading ---------------------------------------------------------------------------

namespace {

int64_t integer_field(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) throw Error(where + ": \"" + key + "\" is missing or not a number");
  return it->get<int64_t>();
}

}  // namespace

RunMetrics read_run_metrics(const std::string& run, const std::string& label) {
  std::error_code ec;
  if (!fs::exists(run, ec)) throw Error("run " + run + ": no such directory");
  RunMetrics m;
  m.path = fs::is_directory(run, ec) ? (fs::path(run) / "metrics.jsonl").string() : run;
  if (!fs::is_regular_file(m.path, ec)) throw Error("run " + run + ": no metrics.jsonl in the directory");
  fs::path name = fs::path(run).lexically_normal();
  if (name.filename().empty()) name = name.parent_path();  // "runs/a/" -> "runs/a"
  if (!fs::is_directory(run, ec)) name = name.parent_path();
  m.label = !label.empty() ? label : name.filename().string();
  if (m.label.empty() || m.label == ".") m.label = fs::absolute(name, ec).filename().string();

  std::ifstream in(m.path);
  if (!in) throw Error(m.path + ": cannot open");
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = m.path + ":" + std::to_string(n);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw Error(where + ": not a JSON object");
    }
    if (!j.is_object()) throw Error(where + ": not a JSON object");
    for (const char* key : {"train_loss", "val_loss"}) {
      const auto it = j.find(key);
      if (it == j.end() || it->is_null()) continue;
      if (!it->is_number()) throw Error(where + ": \"" + key + "\" is not a number");
      LossPoint p{integer_field(j, "step", where), integer_field(j, "tokens", where), it->get<double>()};
      if (!std::isfinite(p.loss)) continue;
      (key[0] == 't' ? m.train : m.val).push_back(p);
    }
  }
  if (m.train.empty() && m.val.empty()) throw Error(m.path + ": no train_loss or val_loss values");
  return m;
}

// ---- layout ----------------------------------------------------------------------------

void series_color(size_t i, int rgb[3]) {
  static const int palette[8][3] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44},  {214, 39, 40},
                                    {148, 103, 189}, {140, 86, 75}, {227, 119, 194}, {23, 190, 207}};
  for (int c = 0; c < 3; ++c) rgb[c] = palette[i % 8][c];
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo) || target < 1) return {lo};
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (f * mag >= raw) {
      step = f * mag;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

namespace {

struct Rgba {
  double r = 0, g = 0, b = 0, a = 1;
};

Rgba rgba(const int rgb[3], double a) { return {rgb[0] / 255.0, rgb[1] / 255.0, rgb[2] / 255.0, a}; }
Rgba gray(double v, double a = 1) { return {v, v, v, a}; }

// One thing to draw. Polyline: pts; Circle: pts[0] and r; Rect: pts[0] = corner, pts[1] =
// size; Text: pts[0] = baseline anchor point. `clip`: cut to the plot area.
struct Shape {
  enum class Kind { Polyline, Circle, Rect, Text };
  Kind kind = Kind::Polyline;
  std::vector<std::pair<double, double>> pts;
  double r = 0;
  Rgba stroke{0, 0, 0, 0}, fill{0, 0, 0, 0};
  double width = 0;
  std::string text;
  double size = 12;
  int anchor = 0;  // 0 start, 1 middle, 2 end
  bool bold = false, vertical = false, clip = false;
};

struct Chart {
  int width = 0, height = 0;
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // the plot area
  std::vector<Shape> shapes;
};

const char* const kFont = "DejaVu Sans";

// Text width from cairo's font metrics (the same font the PNG uses).
double text_width(const std::string& s, double size, bool bold) {
  static cairo_surface_t* surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1);
  cairo_t* cr = cairo_create(surface);
  cairo_select_font_face(cr, kFont, CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_destroy(cr);
  return e.x_advance;
}

std::string format_number(double v, double step) {
  const char* suffix = "";
  double scale = 1;
  const double big = std::max(std::abs(v), step);
  if (big >= 1e9) scale = 1e9, suffix = "G";
  else if (big >= 1e6) scale = 1e6, suffix = "M";
  else if (big >= 1e4) scale = 1e3, suffix = "k";
  const int decimals = std::clamp(int(-std::floor(std::log10(step / scale) + 1e-9)), 0, 6);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f%s", decimals, v / scale, suffix);
  return buf;
}

Chart layout(const std::vector<RunMetrics>& runs, const PlotOptions& o) {
  Chart c;
  c.width = o.width;
  c.height = o.height;
  c.x0 = 76;
  c.x1 = o.width - 24;
  c.y0 = 48;
  c.y1 = o.height - 58;
  auto xof = [&](const LossPoint& p) { return double(o.x_tokens ? p.tokens : p.step); };

  // The series: smoothed train losses and validation losses per run.
  std::vector<std::vector<std::pair<double, double>>> train(runs.size()), val(runs.size());
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  for (size_t r = 0; r < runs.size(); ++r) {
    double ema = 0, weight = 0;
    for (const LossPoint& p : runs[r].train) {
      ema = o.smooth * ema + (1 - o.smooth) * p.loss;
      weight = o.smooth * weight + (1 - o.smooth);
      train[r].emplace_back(xof(p), ema / weight);
    }
    for (const LossPoint& p : runs[r].val) val[r].emplace_back(xof(p), p.loss);
    for (const auto* s : {&train[r], &val[r]})
      for (const auto& [x, y] : *s) {
        xlo = std::min(xlo, x), xhi = std::max(xhi, x);
        ylo = std::min(ylo, y), yhi = std::max(yhi, y);
      }
  }
  if (xlo >= 0) xlo = 0;
  if (xhi <= xlo) xhi = xlo + 1;
  xhi += 0.015 * (xhi - xlo);  // room for the last marker
  if (o.y_min) ylo = *o.y_min;
  if (o.y_max) yhi = *o.y_max;
  if (yhi <= ylo) yhi = ylo + 1;
  if (!o.y_min || !o.y_max) {
    const double pad = 0.04 * (yhi - ylo);
    if (!o.y_min) ylo -= pad;
    if (!o.y_max) yhi += pad;
  }
  auto px = [&](double x) { return c.x0 + (x - xlo) / (xhi - xlo) * (c.x1 - c.x0); };
  auto py = [&](double y) { return c.y1 - (y - ylo) / (yhi - ylo) * (c.y1 - c.y0); };

  auto line = [&](std::vector<std::pair<double, double>> pts, Rgba color, double width, bool clip) {
    Shape s;
    s.kind = Shape::Kind::Polyline;
    s.pts = std::move(pts);
    s.stroke = color;
    s.width = width;
    s.clip = clip;
    c.shapes.push_back(std::move(s));
  };
  auto text = [&](double x, double y, std::string t, double size, int anchor, bool bold = false, bool vertical = false) {
    Shape s;
    s.kind = Shape::Kind::Text;
    s.pts = {{x, y}};
    s.text = std::move(t);
    s.size = size;
    s.anchor = anchor;
    s.bold = bold;
    s.vertical = vertical;
    s.fill = gray(0.15);
    c.shapes.push_back(std::move(s));
  };
  auto circle = [&](double x, double y, double r, Rgba color, bool clip) {
    Shape s;
    s.kind = Shape::Kind::Circle;
    s.pts = {{x, y}};
    s.r = r;
    s.fill = color;
    s.clip = clip;
    c.shapes.push_back(std::move(s));
  };

  // Grid, ticks and their labels.
  const std::vector<double> xt = nice_ticks(xlo, xhi, 8), yt = nice_ticks(ylo, yhi, 7);
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  for (double t : xt) {
    line({{px(t), c.y0}, {px(t), c.y1}}, gray(0.9), 1, false);
    line({{px(t), c.y1}, {px(t), c.y1 + 5}}, gray(0.3), 1, false);
    text(px(t), c.y1 + 19, format_number(t, xstep), 11, 1);
  }
  for (double t : yt) {
    line({{c.x0, py(t)}, {c.x1, py(t)}}, gray(0.9), 1, false);
    line({{c.x0 - 5, py(t)}, {c.x0, py(t)}}, gray(0.3), 1, false);
    text(c.x0 - 8, py(t) + 4, format_number(t, ystep), 11, 2);
  }
  line({{c.x0, c.y0}, {c.x1, c.y0}, {c.x1, c.y1}, {c.x0, c.y1}, {c.x0, c.y0}}, gray(0.3), 1, false);
  text((c.x0 + c.x1) / 2, c.height - 16, o.x_tokens ? "tokens" : "step", 13, 1);
  text(20, (c.y0 + c.y1) / 2, "loss (nats per token)", 13, 1, false, true);
  text((c.x0 + c.x1) / 2, 30, o.title, 17, 1, true);

  // The curves: train thin and light under validation thick with markers.
  for (size_t r = 0; r < runs.size(); ++r) {
    int rgb[3];
    series_color(r, rgb);
    std::vector<std::pair<double, double>> pts;
    for (const auto& [x, y] : train[r]) pts.emplace_back(px(x), py(y));
    if (pts.size() > 1) line(std::move(pts), rgba(rgb, 0.45), 1.2, true);
  }
  for (size_t r = 0; r < runs.size(); ++r) {
    int rgb[3];
    series_color(r, rgb);
    std::vector<std::pair<double, double>> pts;
    for (const auto& [x, y] : val[r]) pts.emplace_back(px(x), py(y));
    if (pts.size() > 1) line(pts, rgba(rgb, 1), 2.5, true);
    for (const auto& [x, y] : pts) circle(x, y, 3.5, rgba(rgb, 1), true);
  }

  // Legend, top right inside the plot: one entry per run, then the key to the two styles.
  const double row = 18, swatch = 26;
  double wmax = text_width("validation (thick, dots)", 11, false);
  for (const RunMetrics& m : runs) wmax = std::max(wmax, text_width(m.label, 12, false));
  const double lw = swatch + 18 + wmax, lh = row * double(runs.size() + 2) + 10;
  const double lx = c.x1 - lw - 10, ly = c.y0 + 10;
  Shape box;
  box.kind = Shape::Kind::Rect;
  box.pts = {{lx, ly}, {lw, lh}};
  box.fill = gray(1, 0.88);
  box.stroke = gray(0.75);
  box.width = 1;
  c.shapes.push_back(box);
  double y = ly + 5 + row / 2;
  for (size_t r = 0; r < runs.size(); ++r, y += row) {
    int rgb[3];
    series_color(r, rgb);
    line({{lx + 8, y}, {lx + 8 + swatch, y}}, rgba(rgb, 1), 2.5, false);
    circle(lx + 8 + swatch / 2, y, 3.5, rgba(rgb, 1), false);
    text(lx + swatch + 14, y + 4, runs[r].label, 12, 0);
  }
  line({{lx + 8, y}, {lx + 8 + swatch, y}}, gray(0.45, 0.6), 1.2, false);
  text(lx + swatch + 14, y + 4, "train (thin)", 11, 0);
  y += row;
  line({{lx + 8, y}, {lx + 8 + swatch, y}}, gray(0.45), 2.5, false);
  circle(lx + 8 + swatch / 2, y, 3.5, gray(0.45), false);
  text(lx + swatch + 14, y + 4, "validation (thick, dots)", 11, 0);
  return c;
}

// ---- SVG -------------------------------------------------------------------------------

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '&') out += "&amp;";
    else if (ch == '<') out += "&lt;";
    else if (ch == '>') out += "&gt;";
    else if (ch == '"') out += "&quot;";
    else out += ch;
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

std::string color_attr(const char* what, const Rgba& c) {
  char buf[96];
  std::snprintf(buf, sizeof buf, " %s=\"#%02x%02x%02x\"", what, int(std::lround(c.r * 255)), int(std::lround(c.g * 255)),
                int(std::lround(c.b * 255)));
  std::string s = buf;
  if (c.a < 1) s += std::string(" ") + what + "-opacity=\"" + num(c.a) + "\"";
  return s;
}

std::string to_svg(const Chart& c) {
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(c.width) + "\" height=\"" +
       std::to_string(c.height) + "\" viewBox=\"0 0 " + std::to_string(c.width) + " " + std::to_string(c.height) +
       "\" font-family=\"DejaVu Sans, Verdana, Arial, sans-serif\">\n";
  s += "<defs><clipPath id=\"plot-area\"><rect x=\"" + num(c.x0) + "\" y=\"" + num(c.y0) + "\" width=\"" +
       num(c.x1 - c.x0) + "\" height=\"" + num(c.y1 - c.y0) + "\"/></clipPath></defs>\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  for (const Shape& sh : c.shapes) {
    const std::string clip = sh.clip ? " clip-path=\"url(#plot-area)\"" : "";
    switch (sh.kind) {
      case Shape::Kind::Polyline: {
        s += "<polyline points=\"";
        for (size_t i = 0; i < sh.pts.size(); ++i) {
          if (i) s += ' ';
          s += num(sh.pts[i].first);
          s += ',';
          s += num(sh.pts[i].second);
        }
        s += "\" fill=\"none\"" + color_attr("stroke", sh.stroke) + " stroke-width=\"" + num(sh.width) +
             "\" stroke-linejoin=\"round\"" + clip + "/>\n";
        break;
      }
      case Shape::Kind::Circle:
        s += "<circle cx=\"" + num(sh.pts[0].first) + "\" cy=\"" + num(sh.pts[0].second) + "\" r=\"" + num(sh.r) + "\"" +
             color_attr("fill", sh.fill) + clip + "/>\n";
        break;
      case Shape::Kind::Rect:
        s += "<rect x=\"" + num(sh.pts[0].first) + "\" y=\"" + num(sh.pts[0].second) + "\" width=\"" +
             num(sh.pts[1].first) + "\" height=\"" + num(sh.pts[1].second) + "\"" + color_attr("fill", sh.fill) +
             color_attr("stroke", sh.stroke) + " stroke-width=\"" + num(sh.width) + "\"/>\n";
        break;
      case Shape::Kind::Text: {
        const char* anchor = sh.anchor == 0 ? "start" : sh.anchor == 1 ? "middle" : "end";
        const std::string x = num(sh.pts[0].first), y = num(sh.pts[0].second);
        s += "<text x=\"" + x + "\" y=\"" + y + "\" font-size=\"" + num(sh.size) + "\" text-anchor=\"" + anchor + "\"" +
             color_attr("fill", sh.fill) + (sh.bold ? " font-weight=\"bold\"" : "") +
             (sh.vertical ? " transform=\"rotate(-90 " + x + " " + y + ")\"" : "") + ">" + xml_escape(sh.text) +
             "</text>\n";
        break;
      }
    }
  }
  return s + "</svg>\n";
}

// ---- PNG (cairo) -----------------------------------------------------------------------

void draw(cairo_t* cr, const Chart& c) {
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  auto source = [&](const Rgba& k) { cairo_set_source_rgba(cr, k.r, k.g, k.b, k.a); };
  for (const Shape& sh : c.shapes) {
    cairo_save(cr);
    if (sh.clip) {
      cairo_rectangle(cr, c.x0, c.y0, c.x1 - c.x0, c.y1 - c.y0);
      cairo_clip(cr);
    }
    switch (sh.kind) {
      case Shape::Kind::Polyline:
        for (size_t i = 0; i < sh.pts.size(); ++i)
          (i ? cairo_line_to : cairo_move_to)(cr, sh.pts[i].first, sh.pts[i].second);
        cairo_set_line_width(cr, sh.width);
        cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
        source(sh.stroke);
        cairo_stroke(cr);
        break;
      case Shape::Kind::Circle:
        cairo_arc(cr, sh.pts[0].first, sh.pts[0].second, sh.r, 0, 2 * M_PI);
        source(sh.fill);
        cairo_fill(cr);
        break;
      case Shape::Kind::Rect:
        cairo_rectangle(cr, sh.pts[0].first, sh.pts[0].second, sh.pts[1].first, sh.pts[1].second);
        source(sh.fill);
        cairo_fill_preserve(cr);
        cairo_set_line_width(cr, sh.width);
        source(sh.stroke);
        cairo_stroke(cr);
        break;
      case Shape::Kind::Text: {
        cairo_select_font_face(cr, kFont, CAIRO_FONT_SLANT_NORMAL,
                               sh.bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
        cairo_set_font_size(cr, sh.size);
        cairo_text_extents_t e;
        cairo_text_extents(cr, sh.text.c_str(), &e);
        cairo_translate(cr, sh.pts[0].first, sh.pts[0].second);
        if (sh.vertical) cairo_rotate(cr, -M_PI / 2);
        cairo_move_to(cr, -e.x_advance * 0.5 * sh.anchor, 0);
        source(sh.fill);
        cairo_show_text(cr, sh.text.c_str());
        break;
      }
    }
    cairo_restore(cr);
  }
}

void write_png(const Chart& c, const std::string& path) {
  std::unique_ptr<cairo_surface_t, void (*)(cairo_surface_t*)> surface(
      cairo_image_surface_create(CAIRO_FORMAT_ARGB32, c.width, c.height), cairo_surface_destroy);
  if (cairo_surface_status(surface.get()) != CAIRO_STATUS_SUCCESS)
    throw Error(path + ": cannot create a " + std::to_string(c.width) + "x" + std::to_string(c.height) + " image");
  cairo_t* cr = cairo_create(surface.get());
  draw(cr, c);
  cairo_destroy(cr);
  // Written beside and renamed, so a reader never sees half a file.
  const std::string tmp = path + ".tmp";
  const cairo_status_t st = cairo_surface_write_to_png(surface.get(), tmp.c_str());
  std::error_code ec;
  if (st != CAIRO_STATUS_SUCCESS) {
    fs::remove(tmp, ec);
    throw Error(path + ": cannot write: " + cairo_status_to_string(st));
  }
  fs::rename(tmp, path, ec);
  if (ec) throw Error(path + ": cannot write: " + ec.message());
}

}  // namespace

std::vector<std::string> plot_loss_curves(const std::vector<RunMetrics>& runs, const std::string& out,
                                          const PlotOptions& options) {
  if (runs.empty()) throw Error("plot: no runs given");
  if (options.width < 320 || options.height < 240 || options.width > 8000 || options.height > 8000)
    throw Error("plot: size " + std::to_string(options.width) + "x" + std::to_string(options.height) +
                " is outside 320x240 .. 8000x8000");
  if (!(options.smooth >= 0 && options.smooth < 1)) throw Error("plot: smoothing must be in [0, 1)");
  if (options.y_min && options.y_max && !(*options.y_max > *options.y_min))
    throw Error("plot: the y maximum must be above the y minimum");
  for (const RunMetrics& r : runs)
    if (r.train.empty() && r.val.empty()) throw Error(r.path + ": no train_loss or val_loss values");
  std::string base = out;
  if (base.ends_with(".svg") || base.ends_with(".png")) base.resize(base.size() - 4);
  if (base.empty()) throw Error("plot: empty output path");
  const fs::path parent = fs::path(base).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);

  const Chart chart = layout(runs, options);
  const std::string svg = to_svg(chart);
  write_file_atomic(base + ".svg", svg.data(), svg.size());
  write_png(chart, base + ".png");
  return {base + ".svg", base + ".png"};
}

}  // namespace mtb
