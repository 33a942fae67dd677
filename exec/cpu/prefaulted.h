// prefaulted.h: the allocator of big buffers written whole right after allocation (packed
// weights): their pages are mapped in one call (MAP_POPULATE) rather than faulted in one by one
// as they are first written (on a VM, a third less time: 340 MB in 175-230 ms against 265-370
// ms). From 64 KiB on (was 1 MiB: buffers in between came from malloc's own mappings, faulted
// a page at a time: DenseNet-121's prepare 43 -> 38 ms, MobileNetV2's 14.1 -> 13.1). A fresh
// buffer's elements are zero and resize() writes nothing over them (the mapped pages are zero
// already; small buffers are cleared when allocated).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstring>
#include <new>
#include <vector>

namespace onnxtool::cpu {

template <typename T>
struct PrefaultedAllocator {
  using value_type = T;
  static constexpr size_t kMapBytes = size_t{64} << 10;  ///< from this size on, a mapping of its own

  PrefaultedAllocator() = default;
  template <typename U>
  PrefaultedAllocator(const PrefaultedAllocator<U>&) {}

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kMapBytes) return static_cast<T*>(std::memset(::operator new(bytes, std::align_val_t(64)), 0, bytes));
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kMapBytes) ::operator delete(p, std::align_val_t(64));
    else ::munmap(p, bytes);
  }
  template <typename U>
  void construct(U* p) {  // default-initialise: no zeroing pass over fresh pages
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <typename U>
  bool operator==(const PrefaultedAllocator<U>&) const {
    return true;
  }
};

/// A buffer of packed weights (64-byte aligned; prefaulted when big; zero when fresh).
using PackedFloats = std::vector<float, PrefaultedAllocator<float>>;

}  // namespace onnxtool::cpu
