// thread_pool.h: the intra-op thread pool of the cpu executor. One pool per prepared plan
// (`--threads N`: N - 1 persistent workers plus the thread that calls parallelFor). A dispatch
// publishes one job; workers spin briefly after each job (consecutive nodes of a plan follow
// within microseconds) and then sleep on a condition variable, so an idle plan costs no CPU
// (std::atomic::wait of GCC 12's libstdc++ can lose wakeups). A 1-thread pool has no workers and runs every parallelFor inline.
//
// Concurrency: runs of one plan may go on in several threads at once, and a kernel may call
// parallelFor from inside a parallelFor body. The pool serves one job at a time; a caller that
// finds it busy (another run, or a nested call) runs its loop inline instead of waiting. Results
// never depend on which thread ran a chunk.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace onnxtool::cpu {

class ThreadPool {
 public:
  /// A pool of `threads` threads in all (the caller included); threads <= 1 spawns none.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Threads that may run one parallelFor (the caller included).
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  /// Calls fn(begin, end) on disjoint ranges covering [0, n), each at least `grain` long (the
  /// last may be shorter), from up to threads() threads; returns when every range is done.
  /// fn must not throw. n <= grain, a 1-thread pool, or a busy pool: one inline call fn(0, n).
  template <typename F>
  void parallelFor(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    if (workers_.empty() || n <= grain) {
      fn(int64_t{0}, n);
      return;
    }
    using Fn = std::remove_reference_t<F>;
    dispatch(n, grain, [](void* ctx, int64_t b, int64_t e) { (*static_cast<Fn*>(ctx))(b, e); }, &fn);
  }

 private:
  using Trampoline = void (*)(void* ctx, int64_t begin, int64_t end);
  void dispatch(int64_t n, int64_t grain, Trampoline call, void* ctx);
  void workerLoop();
  void runChunks();
  void publish();  ///< bumps generation_ and wakes sleeping workers

  std::vector<std::thread> workers_;
  std::atomic<bool> busy_{false};  ///< a job is being served (held by its caller)
  std::atomic<uint32_t> generation_{0};  ///< bumped to publish a job (and to stop)
  std::atomic<bool> open_{false};   ///< the current job still takes workers
  std::atomic<int> inJob_{0};       ///< workers looking at the current job
  std::atomic<int64_t> remaining_{0};  ///< elements of the current job not yet done
  std::atomic<int> sleepers_{0};    ///< workers asleep (or about to be) on wake_
  std::mutex sleepMutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  // The current job, written by the caller before it bumps generation_.
  Trampoline call_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0, chunk_ = 0;
  alignas(64) std::atomic<int64_t> next_{0};  ///< first index of the next unclaimed chunk
};

/// The stride between the per-thread slices of one buffer (a kernel's workspace, slice `part` at
/// part * stride) for slices of `floats` / `bytes`: 64-byte aligned and a 4 KiB page apart.
/// Slices side by side (in one page, or in adjacent lines) let one core's hardware prefetchers
/// pull lines that the other core keeps writing, and the two cores then trade those lines all
/// through a job: MobileNetV2's depthwise kernel (a 1.4 KB row ring per thread, side by side)
/// ran no faster on two threads than on one (70 -> 69 us); a page apart, 38 us.
inline int64_t threadSliceFloats(int64_t floats) { return (floats + 15) / 16 * 16 + 1024; }
inline int64_t threadSliceBytes(int64_t bytes) { return (bytes + 63) / 64 * 64 + 4096; }

/// pool->parallelFor, or one inline call when pool is null.
template <typename F>
void parallelFor(ThreadPool* pool, int64_t n, int64_t grain, F&& fn) {
  if (pool) pool->parallelFor(n, grain, std::forward<F>(fn));
  else if (n > 0) fn(int64_t{0}, n);
}

}  // namespace onnxtool::cpu
