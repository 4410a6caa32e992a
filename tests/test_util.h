// Helpers shared by the tests.
#pragma once
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "mtb/core/error.h"

// Expects `stmt` to throw mtb::Error whose one-line message contains `needle`.
#define EXPECT_ERROR_CONTAINS(stmt, needle)                                                   \
  do {                                                                                        \
    try {                                                                                     \
      stmt;                                                                                   \
      ADD_FAILURE() << "expected mtb::Error containing '" << (needle) << "'";                 \
    } catch (const mtb::Error& e) {                                                           \
      const std::string msg = e.what();                                                       \
      EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg;                   \
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;                \
    }                                                                                         \
  } while (0)

namespace mtb::test {

inline std::string source_dir() { return MTB_SOURCE_DIR; }
inline std::string binary_dir() { return MTB_BINARY_DIR; }
inline std::string shared_models() { return source_dir() + "/../shared/models"; }
// A directory of this test's own under the build tree (ctest runs tests in parallel
// processes: none may share a scratch file). Created empty on first use in a test.
inline std::string scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  for (char& c : name)
    if (c == '/') c = '_';
  const std::string dir = binary_dir() + "/test-scratch/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

// build/mtb run with `args` (through /bin/sh) and `stdin_text` on its standard input.
struct CliResult {
  int code;  // exit status, -1 when it did not exit normally
  std::string out, err;
};
inline CliResult run_mtb(const std::string& args, const std::string& stdin_text = "") {
  const std::string dir = scratch_dir();
  std::ofstream(dir + "/in.txt", std::ios::binary) << stdin_text;
  const std::string cmd = binary_dir() + "/mtb " + args + " < " + dir + "/in.txt > " + dir + "/out.txt 2> " + dir + "/err.txt";
  const int rc = std::system(cmd.c_str());
  auto slurp = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(dir + "/out.txt"), slurp(dir + "/err.txt")};
}

// Where the PyTorch reference writes its fixtures (ctest's fixture step).
inline std::string fixtures_dir() { return binary_dir() + "/fixtures"; }

}  // namespace mtb::test
