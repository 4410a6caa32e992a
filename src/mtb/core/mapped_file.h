// A whole file, read-only in memory: mapped, or, while a HugePageReads lives on the opening
// thread, read once into memory on 2 MiB pages (files of 64 MiB and more, where the kernel has
// transparent huge pages; MTB_MMAP=1 in the environment turns this off). Either way weights
// are used in place as stored, never converted.
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
  void* map_ = nullptr;  // what munmap releases
  size_t map_len_ = 0;
};

// The scope in which MappedFile::open reads large files into huge pages. open_model opens
// weights in one: decoding streams every weight byte once per token, and on a file mapping's
// 4 KiB pages the page walks cost about 6% of the token rate (qwen3-0.6b BF16, 2 threads),
// for a slower start (0.3-1.3 s per GiB on a VM, against almost nothing for a mapping).
class HugePageReads {
 public:
  HugePageReads();
  ~HugePageReads();
  HugePageReads(const HugePageReads&) = delete;
  HugePageReads& operator=(const HugePageReads&) = delete;
};

// Reads a whole (small) file into a string; throws mtb::Error naming the path.
std::string read_text_file(const std::string& path);
// Writes a file atomically (temporary + rename); throws mtb::Error naming the path.
void write_file_atomic(const std::string& path, const void* data, size_t size);

}  // namespace mtb
