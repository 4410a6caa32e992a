// Training against the PyTorch reference (python/reference/grad_fixtures.py, float64
// autograd): every parameter's gradient for every variant of the matrix, the losses of 10
// AdamW steps (clipping, warmup + cosine schedule; micro-batches for some variants), and
// trained models that save as Hugging Face directories and run in mtb::Model.
// The fixtures come from ctest's `grad_fixtures` step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "mtb/core/mapped_file.h"
#include "mtb/io/hf.h"
#include "mtb/model/model.h"
#include "mtb/train/forward_backward.h"
#include "mtb/train/optim.h"
#include "mtb/train/trainable.h"
#include "test_util.h"

namespace mtb {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

const std::vector<std::string> kVariants = {
    "example-3m",  "mha",        "mqa",           "gqa-tied",       "tied-redundant-lmhead",
    "interleaved", "qwen3-like", "llama3-scaling", "nope-every-4th", "qwen2-like",
    "mistral-bf16", "mla",       "mla-qlora",     "gpt2"};
// These run the AdamW steps as two micro-batches of one sequence each (gradient accumulation).
const std::set<std::string> kMicroBatched = {"mla-qlora", "gpt2", "gqa-tied"};

std::string fixture(const std::string& rel) {
  const std::string p = test::binary_dir() + "/grad_fixtures/" + rel;
  if (!fs::exists(p)) throw Error(p + " is missing: run ctest (its grad_fixtures step writes it)");
  return p;
}

template <typename T>
std::vector<T> read_array(const std::string& path) {
  const std::string bytes = read_text_file(path);
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

struct Fixture {
  json meta;
  train::Trainable model;
  std::vector<int32_t> ids, targets;  // [B][T]
  int B = 0, T = 0;
};

Fixture load(const std::string& name) {
  LoadedModel m = load_hf_dir(fixture(name));
  Fixture f{json::parse(read_text_file(fixture(name + "/grads.json"))),
            train::Trainable::from_tensors(m.config, m.tensors, m.where), {}, {}, 0, 0};
  f.B = f.meta["B"], f.T = f.meta["T"];
  const auto batch = read_array<int32_t>(fixture(name + "/batch.i32"));
  const size_t n = size_t(f.B) * f.T;
  EXPECT_EQ(batch.size(), 2 * n);
  f.ids.assign(batch.begin(), batch.begin() + long(n));
  f.targets.assign(batch.begin() + long(n), batch.end());
  return f;
}

class Variant : public ::testing::TestWithParam<std::string> {};

TEST_P(Variant, GradientsMatchTheFloat64Reference) {
  Fixture f = load(GetParam());
  train::Activations acts;
  f.model.zero_grads();
  const double loss = train::forward_backward_mean(f.model, f.ids.data(), f.targets.data(), f.B, f.T, acts);
  const double want_loss = f.meta["loss"];
  EXPECT_NEAR(loss, want_loss, 1e-5 * want_loss);
  const auto ref = read_array<double>(fixture(GetParam() + "/grads.f64"));
  std::set<std::string> seen;
  double worst = 0;
  std::string worst_name;
  for (const json& e : f.meta["tensors"]) {
    const std::string name = e["name"];
    seen.insert(name);
    const train::Param* p = f.model.find(name);
    ASSERT_NE(p, nullptr) << "mtb has no parameter " << name;
    ASSERT_EQ(p->spec.shape, e["shape"].get<Shape>()) << name;
    const double* want = ref.data() + size_t(e["offset"]);
    const float* got = f.model.grads().data() + p->offset;
    double max_err = 0, max_ref = 0;
    for (int64_t i = 0; i < p->numel; ++i) {
      max_err = std::max(max_err, std::fabs(double(got[i]) - want[i]));
      max_ref = std::max(max_ref, std::fabs(want[i]));
    }
    EXPECT_LE(max_err, 1e-4 * max_ref + 1e-7) << name << ": max|err| " << max_err << ", max|ref| " << max_ref;
    const double ratio = max_err / max_ref;  // reported for gradients that are not zero in exact arithmetic
    if (max_ref > 1e-6 && ratio > worst) worst = ratio, worst_name = name;
  }
  EXPECT_EQ(seen.size(), f.model.params().size()) << "the reference and mtb list different parameters";
  std::printf("  %-22s loss %.8f (ref %.8f)  worst tensor %s: max|err| / max|ref| = %.3g\n", GetParam().c_str(),
              loss, want_loss, worst_name.c_str(), worst);
}

TEST_P(Variant, AdamWLossesMatchTheReferenceStepByStep) {
  Fixture f = load(GetParam());
  const json& a = f.meta["adamw"];
  train::AdamWConfig oc;
  oc.beta1 = a["beta1"], oc.beta2 = a["beta2"], oc.eps = a["eps"], oc.weight_decay = a["weight_decay"];
  train::AdamW opt(f.model, oc);
  train::LrSchedule sched;
  sched.lr_max = a["lr_max"], sched.lr_min = a["lr_min"], sched.warmup = a["warmup"], sched.total = a["steps"];
  const double clip = a["clip"];
  const bool micro = kMicroBatched.count(GetParam()) > 0;
  const int64_t n_targets = train::count_targets(f.targets.data(), int64_t(f.targets.size()));
  train::Activations acts;
  double worst = 0;
  for (int s = 0; s < int(a["steps"]); ++s) {
    f.model.zero_grads();
    double loss = 0;
    if (micro) {  // one sequence at a time, gradients accumulated, scaled by the whole batch's count
      train::LossSum sum;
      for (int b = 0; b < f.B; ++b) {
        const size_t o = size_t(b) * f.T;
        const train::LossSum part = train::forward_backward(f.model, f.ids.data() + o, f.targets.data() + o, 1, f.T,
                                                            acts, 1.0f / float(n_targets));
        sum.sum += part.sum, sum.count += part.count;
      }
      EXPECT_EQ(sum.count, n_targets);
      loss = sum.mean();
    } else {
      loss = train::forward_backward_mean(f.model, f.ids.data(), f.targets.data(), f.B, f.T, acts);
    }
    const double norm = train::clip_grad_norm(f.model, clip);
    opt.step(f.model, sched.at(s));
    const double want = a["losses"][size_t(s)], want_norm = a["grad_norms"][size_t(s)];
    EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want)) << "step " << s;
    EXPECT_NEAR(norm, want_norm, 1e-4 * want_norm) << "step " << s;
    worst = std::max(worst, std::fabs(loss - want) / std::fabs(want));
  }
  std::printf("  %-22s %s loss %.6f -> %.6f, worst relative loss error over %d steps %.3g\n", GetParam().c_str(),
              micro ? "2 micro-batches," : "whole batch,    ", double(a["losses"][0]),
              double(a["losses"][size_t(a["steps"]) - 1]), int(a["steps"]), worst);
}

TEST_P(Variant, TrainedModelSavesAndRunsInModel) {
  Fixture f = load(GetParam());
  train::AdamW opt(f.model, {});
  train::Activations acts;
  for (int s = 0; s < 2; ++s) {
    f.model.zero_grads();
    train::forward_backward_mean(f.model, f.ids.data(), f.targets.data(), f.B, f.T, acts);
    opt.step(f.model, 1e-3);
  }
  const std::string dir = test::binary_dir() + "/train_saved/" + GetParam();
  fs::remove_all(dir);
  save_hf_dir(dir, f.model.config(), f.model.to_tensors(), DType::F32);
  LoadedModel back = load_hf_dir(dir);
  Model m(back.config, back.tensors, dir);
  // Loss of sequence 0 from mtb::Model's logits = the trainer's own forward.
  const std::vector<int32_t> ids(f.ids.begin(), f.ids.begin() + f.T);
  const std::vector<float> logits = m.forward(ids);
  const int V = m.config().vocab;
  double sum = 0;
  int64_t count = 0;
  for (int t = 0; t < f.T; ++t) {
    const int32_t y = f.targets[size_t(t)];
    if (y == train::kIgnoreIndex) continue;
    const float* z = logits.data() + size_t(t) * V;
    double mx = z[0], se = 0;
    for (int i = 0; i < V; ++i) mx = std::max(mx, double(z[i]));
    for (int i = 0; i < V; ++i) se += std::exp(double(z[i]) - mx);
    sum += mx + std::log(se) - z[y], ++count;
  }
  const train::LossSum ev = train::evaluate(f.model, f.ids.data(), f.targets.data(), 1, f.T, acts);
  EXPECT_EQ(ev.count, count);
  EXPECT_NEAR(ev.mean(), sum / double(count), 1e-5 * ev.mean());
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Matrix, Variant, ::testing::ValuesIn(kVariants),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string s = i.param;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

}  // namespace
}  // namespace mtb
