// buffer.cpp: shared byte ranges and read-only file maps.
#include "lib/buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lib/error.h"

namespace onnxtool {

Buffer Buffer::fromString(std::string&& s) {
  auto owner = std::make_shared<std::string>(std::move(s));
  Buffer b;
  b.data_ = reinterpret_cast<const uint8_t*>(owner->data());
  b.size_ = owner->size();
  b.owner_ = std::move(owner);
  return b;
}

Buffer Buffer::copyOf(std::span<const uint8_t> bytes) {
  return fromString(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

Buffer Buffer::copyOf(std::string_view bytes) { return fromString(std::string(bytes)); }

Buffer Buffer::zeros(size_t n) { return fromString(std::string(n, '\0')); }

Buffer Buffer::borrow(std::shared_ptr<const void> owner, const uint8_t* data, size_t size) {
  Buffer b;
  b.owner_ = std::move(owner);
  b.data_ = data;
  b.size_ = size;
  return b;
}

Buffer Buffer::slice(size_t offset, size_t n) const {
  Buffer b = borrow(owner_, data_ + offset, n);
  b.mapped_ = mapped_;
  return b;
}

void Buffer::dropMappedPages() const {
  if (!mapped_ || size_ == 0) return;
  // Private, never-written file pages: dropping them only costs a re-read if touched again.
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  uintptr_t begin = reinterpret_cast<uintptr_t>(data_) & ~(page - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(data_) + size_ + page - 1) & ~(page - 1);
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ErrorKind::Io, "{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(ErrorKind::Io, "{}: cannot stat: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorKind::Io, "{}: not a regular file", path);
  }
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = static_cast<size_t>(st.st_size);
  if (m->size_ > 0) {
    void* p = ::mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail(ErrorKind::Io, "{}: cannot map: {}", path, std::strerror(e));
    }
    m->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return m;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

Buffer MappedFile::buffer(std::shared_ptr<const MappedFile> self, size_t offset, size_t n) const {
  Buffer b = Buffer::borrow(std::move(self), data_ + offset, n);
  b.mapped_ = true;
  return b;
}

}  // namespace onnxtool
