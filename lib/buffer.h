// buffer.h: immutable, shared byte ranges that either own their bytes or borrow them from an
// owner kept alive by reference count (an mmap'd file, a parsed message). Weights are held in
// Buffers so that loading, passes and executors never copy them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace onnxtool {

class Buffer {
 public:
  Buffer() = default;
  /// Takes ownership of the string's bytes (no copy).
  static Buffer fromString(std::string&& s);
  /// Copies the bytes.
  static Buffer copyOf(std::span<const uint8_t> bytes);
  static Buffer copyOf(std::string_view bytes);
  /// Zero-filled owned buffer of n bytes.
  static Buffer zeros(size_t n);
  /// Borrows [data, data+size) from memory kept alive by `owner`.
  static Buffer borrow(std::shared_ptr<const void> owner, const uint8_t* data, size_t size);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }
  /// A sub-range sharing the same owner. Precondition: offset + n <= size().
  Buffer slice(size_t offset, size_t n) const;
  /// Mutable access: only valid for buffers made by zeros()/copyOf()/fromString() that are not
  /// shared yet; used by producers filling a fresh buffer.
  uint8_t* mutableData() { return const_cast<uint8_t*>(data_); }
  /// Whether data() is aligned to `alignment` bytes (borrowed bytes may sit at any file offset).
  bool isAligned(size_t alignment) const { return reinterpret_cast<uintptr_t>(data_) % alignment == 0; }
  /// For bytes borrowed from a mapped file: lets the kernel drop their pages from memory (they
  /// are read from the file again if touched). For use after copying them elsewhere. No-op for
  /// other buffers.
  void dropMappedPages() const;

 private:
  friend class MappedFile;
  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
};

/// A read-only memory map of a whole file; bytes are paged in only when touched.
class MappedFile {
 public:
  /// Maps `path`; throws Error(Io) naming the file on failure. Empty files map to an empty range.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  /// A Buffer over [offset, offset+n) keeping this map alive. Precondition: in range.
  Buffer buffer(std::shared_ptr<const MappedFile> self, size_t offset, size_t n) const;

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace onnxtool
