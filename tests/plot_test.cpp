// `mtb plot`: metrics.jsonl reading (train and validation lines, skipped lines, errors naming
// file and line), nice ticks, and a rendered chart: the SVG holds a polyline per series and
// the legend's labels, the PNG has the requested size and the series colors.
#include <cairo/cairo.h>  // mtb_lib links cairo; its include directory is private to it
#include <gtest/gtest.h>

#include <algorithm>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "mtb/core/mapped_file.h"
#include "mtb/tools/plot.h"
#include "test_util.h"

namespace mtb {
namespace {
namespace fs = std::filesystem;

// A run directory with `steps` training lines and a validation line every 10 steps.
std::string write_run(const std::string& dir, int steps, double scale) {
  fs::create_directories(dir);
  std::ofstream out(dir + "/metrics.jsonl");
  for (int s = 1; s <= steps; ++s) {
    out << "{\"step\":" << s << ",\"tokens\":" << s * 2048 << ",\"train_loss\":" << scale * (2.0 + 6.0 / s)
        << ",\"lr\":0.001,\"tokens_per_s\":5000.5,\"elapsed_s\":" << s * 0.4 << "}\n";
    if (s % 10 == 0) out << "{\"step\":" << s << ",\"tokens\":" << s * 2048 << ",\"val_loss\":" << scale * (2.2 + 6.0 / s) << "}\n";
  }
  return dir;
}

bool has_pixel(cairo_surface_t* s, int r, int g, int b) {
  const int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
  const int stride = cairo_image_surface_get_stride(s);
  const unsigned char* data = cairo_image_surface_get_data(s);
  const uint32_t want = 0xFF000000u | (uint32_t(r) << 16) | (uint32_t(g) << 8) | uint32_t(b);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      if (reinterpret_cast<const uint32_t*>(data + y * stride)[x] == want) return true;
  return false;
}

TEST(Plot, ReadsTrainAndValidationLines) {
  const std::string dir = test::scratch_dir() + "/run-a";
  fs::create_directories(dir);
  std::ofstream(dir + "/metrics.jsonl") << "{\"step\":1,\"tokens\":512,\"train_loss\":5.5,\"lr\":0.1}\n\n"
                                        << "{\"step\":2,\"tokens\":1024,\"train_loss\":null}\n"
                                        << "{\"event\":\"checkpoint\"}\n"
                                        << "{\"step\":2,\"tokens\":1024,\"val_loss\":4.25}\n";
  const RunMetrics m = read_run_metrics(dir + "/");
  EXPECT_EQ(m.label, "run-a");
  EXPECT_EQ(m.path, dir + "/metrics.jsonl");
  ASSERT_EQ(m.train.size(), 1u);
  EXPECT_EQ(m.train[0].step, 1);
  EXPECT_EQ(m.train[0].tokens, 512);
  EXPECT_EQ(m.train[0].loss, 5.5);
  ASSERT_EQ(m.val.size(), 1u);
  EXPECT_EQ(m.val[0].loss, 4.25);
  EXPECT_EQ(read_run_metrics(dir, "mine").label, "mine");
}

TEST(Plot, NiceTicks) {
  EXPECT_EQ(nice_ticks(0, 1000, 5), (std::vector<double>{0, 200, 400, 600, 800, 1000}));
  EXPECT_EQ(nice_ticks(2.13, 7.9, 6), (std::vector<double>{3, 4, 5, 6, 7}));
  EXPECT_EQ(nice_ticks(0, 0.5, 5), (std::vector<double>{0, 0.1, 0.2, 0.30000000000000004, 0.4, 0.5}));
}

TEST(Plot, RendersSvgAndPng) {
  const std::string dir = test::scratch_dir();
  std::vector<RunMetrics> runs = {read_run_metrics(write_run(dir + "/gpt2", 50, 1.0)),
                                  read_run_metrics(write_run(dir + "/modern", 50, 0.9), "modern <block>")};
  PlotOptions opt;
  opt.width = 640;
  opt.height = 400;
  opt.smooth = 0.5;
  opt.title = "GPT-2 vs modern";
  const auto files = plot_loss_curves(runs, dir + "/out/chart.png", opt);
  ASSERT_EQ(files, (std::vector<std::string>{dir + "/out/chart.svg", dir + "/out/chart.png"}));

  const std::string svg = read_text_file(files[0]);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"400\""), std::string::npos);
  EXPECT_NE(svg.find(">GPT-2 vs modern</text>"), std::string::npos);
  EXPECT_NE(svg.find(">gpt2</text>"), std::string::npos);
  EXPECT_NE(svg.find(">modern &lt;block&gt;</text>"), std::string::npos);  // escaped
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  // Per run: a thin light train polyline of 50 points and a thick validation one of 5.
  size_t thin = 0, thick = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) {
    const std::string el = svg.substr(at, svg.find("/>", at) - at);
    const size_t points = size_t(std::count(el.begin(), el.end(), ','));
    if (el.find("stroke=\"#1f77b4\" stroke-opacity=\"0.45\" stroke-width=\"1.2\"") != std::string::npos && points == 50) ++thin;
    if (el.find("stroke=\"#ff7f0e\" stroke-width=\"2.5\"") != std::string::npos && points == 5) ++thick;
  }
  EXPECT_EQ(thin, 1u);
  EXPECT_EQ(thick, 1u);

  cairo_surface_t* png = cairo_image_surface_create_from_png(files[1].c_str());
  ASSERT_EQ(cairo_surface_status(png), CAIRO_STATUS_SUCCESS);
  EXPECT_EQ(cairo_image_surface_get_width(png), 640);
  EXPECT_EQ(cairo_image_surface_get_height(png), 400);
  int rgb[3];
  series_color(0, rgb);
  EXPECT_TRUE(has_pixel(png, rgb[0], rgb[1], rgb[2]));  // the validation markers' fill
  series_color(1, rgb);
  EXPECT_TRUE(has_pixel(png, rgb[0], rgb[1], rgb[2]));
  series_color(5, rgb);
  EXPECT_FALSE(has_pixel(png, rgb[0], rgb[1], rgb[2]));  // no third run
  cairo_surface_destroy(png);
}

TEST(PlotErrors, OneLineNamingFileAndLine) {
  const std::string dir = test::scratch_dir();
  fs::remove_all(dir + "/empty");  // from an earlier run
  EXPECT_ERROR_CONTAINS(read_run_metrics(dir + "/missing"), "run " + dir + "/missing: no such directory");
  fs::create_directories(dir + "/empty");
  EXPECT_ERROR_CONTAINS(read_run_metrics(dir + "/empty"), "no metrics.jsonl");
  std::ofstream(dir + "/empty/metrics.jsonl") << "\n{\"step\":1}\n";
  EXPECT_ERROR_CONTAINS(read_run_metrics(dir + "/empty"), dir + "/empty/metrics.jsonl: no train_loss or val_loss");
  fs::create_directories(dir + "/bad");
  std::ofstream(dir + "/bad/metrics.jsonl") << "{\"step\":1,\"tokens\":1,\"train_loss\":3}\n{\"step\":2,\"tok\n";
  EXPECT_ERROR_CONTAINS(read_run_metrics(dir + "/bad"), dir + "/bad/metrics.jsonl:2: not a JSON object");
  std::ofstream(dir + "/bad/metrics.jsonl") << "{\"step\":\"one\",\"tokens\":1,\"train_loss\":3}\n";
  EXPECT_ERROR_CONTAINS(read_run_metrics(dir + "/bad"), "metrics.jsonl:1: \"step\" is missing or not a number");
  std::ofstream(dir + "/bad/metrics.jsonl") << "[1,2]\n";
  EXPECT_ERROR_CONTAINS(read_run_metrics(dir + "/bad"), "metrics.jsonl:1: not a JSON object");
  EXPECT_ERROR_CONTAINS(plot_loss_curves({}, dir + "/x", {}), "no runs");
  const RunMetrics ok = read_run_metrics(write_run(dir + "/ok", 10, 1.0));
  PlotOptions tiny;
  tiny.width = 10;
  EXPECT_ERROR_CONTAINS(plot_loss_curves({ok}, dir + "/x", tiny), "size 10x600");
  EXPECT_FALSE(fs::exists(dir + "/x.svg"));
}

TEST(PlotCli, WritesBothFilesAndRefusesMissingRuns) {
  const std::string dir = test::scratch_dir();
  for (const char* f : {"/loss.svg", "/loss.png", "/loss2.svg"}) fs::remove(dir + f);
  write_run(dir + "/a", 20, 1.0);
  write_run(dir + "/b", 20, 1.1);
  const std::string mtb = test::binary_dir() + "/mtb";
  const std::string log = dir + "/log.txt";
  auto run = [&](const std::string& args) { return std::system((mtb + " plot " + args + " > " + log + " 2>&1").c_str()); };
  ASSERT_EQ(run(dir + "/a " + dir + "/b --label A --label B --x tokens -o " + dir + "/loss"), 0);
  EXPECT_TRUE(fs::exists(dir + "/loss.svg"));
  EXPECT_TRUE(fs::exists(dir + "/loss.png"));
  EXPECT_NE(read_text_file(dir + "/loss.svg").find(">tokens</text>"), std::string::npos);
  EXPECT_EQ(run(dir + "/a " + dir + "/nope -o " + dir + "/loss2"), 1 << 8);
  EXPECT_NE(read_text_file(log).find("mtb: error: run " + dir + "/nope: no such directory"), std::string::npos);
  EXPECT_EQ(run(dir + "/a " + dir + "/b --label A -o " + dir + "/loss2"), 1 << 8);
  EXPECT_NE(read_text_file(log).find("1 labels for 2 runs"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir + "/loss2.svg"));
}

}  // namespace
}  // namespace mtb
