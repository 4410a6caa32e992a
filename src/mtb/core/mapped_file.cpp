#include "mtb/core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "mtb/core/error.h"

namespace mtb {

namespace {

// True when the kernel hands out transparent huge pages to memory that asks (madvise or
// always mode) and MTB_MMAP is not set.
bool use_huge_pages() {
  static const bool on = [] {
    if (std::getenv("MTB_MMAP")) return false;
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string mode;
    std::getline(f, mode);
    return mode.find("[always]") != std::string::npos || mode.find("[madvise]") != std::string::npos;
  }();
  return on;
}

thread_local int g_huge_page_reads = 0;  // HugePageReads alive on this thread

constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kHugeFileBytes = size_t(64) << 20;

}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = size_t(st.st_size);
  if (g_huge_page_reads > 0 && f->size_ >= kHugeFileBytes && use_huge_pages()) {
    // Anonymous memory on 2 MiB pages (see HugePageReads). The buffer starts on a huge-page
    // boundary, so every offset keeps the alignment it has in the file.
    const size_t len = (f->size_ + kHugePage - 1) / kHugePage * kHugePage;
    void* p = mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw Error(path + ": cannot allocate " + std::to_string(len >> 20) + " MiB: " + std::strerror(errno));
    }
    uint8_t* base = static_cast<uint8_t*>(p);
    uint8_t* data = base + (kHugePage - reinterpret_cast<uintptr_t>(base) % kHugePage) % kHugePage;
    madvise(data, len, MADV_HUGEPAGE);
    f->map_ = base, f->map_len_ = len + kHugePage;
    for (size_t got = 0; got < f->size_;) {
      const ssize_t r = pread(fd, data + got, std::min(f->size_ - got, size_t(1) << 30), off_t(got));
      if (r <= 0) {
        const std::string why = r < 0 ? std::strerror(errno) : "file shrank while being read";
        ::close(fd);
        throw Error(path + ": read failed at byte " + std::to_string(got) + ": " + why);
      }
      got += size_t(r);
    }
    mprotect(data, len, PROT_READ);  // as read-only as a mapping
    f->data_ = data;
  } else if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw Error(path + ": cannot map: " + std::strerror(errno));
    }
    f->data_ = static_cast<const uint8_t*>(p);
    f->map_ = p, f->map_len_ = f->size_;
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (map_) munmap(map_, map_len_);
}

HugePageReads::HugePageReads() { ++g_huge_page_reads; }
HugePageReads::~HugePageReads() { --g_huge_page_reads; }

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error(path + ": cannot write: " + std::strerror(errno));
  bool ok = std::fwrite(data, 1, size, f) == size;
  ok = (std::fflush(f) == 0) && ok;
  ok = (fsync(fileno(f)) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error(path + ": write failed: " + std::strerror(errno));
  }
}

}  // namespace mtb
