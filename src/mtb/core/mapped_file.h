// A whole file mapped read-only into memory. Weights are used in place, never copied.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace mtb {

class MappedFile {
 public:
  // Throws mtb::Error naming the path if it cannot be opened or mapped.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole (small) file into a string; throws mtb::Error naming the path.
std::string read_text_file(const std::string& path);
// Writes a file atomically (temporary + rename); throws mtb::Error naming the path.
void write_file_atomic(const std::string& path, const void* data, size_t size);

}  // namespace mtb
