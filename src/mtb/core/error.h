// mtb::Error: the one exception type. Its message is a single line that names the
// file, key or tensor at fault; the command line prints it and exits non-zero.
#pragma once
#include <stdexcept>
#include <string>

namespace mtb {

struct Error : std::runtime_error {
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace mtb
