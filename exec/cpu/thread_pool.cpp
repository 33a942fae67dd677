// thread_pool.cpp: see thread_pool.h. The job protocol: the caller takes `busy_`, writes the job,
// opens it (`open_`), bumps `generation_` and wakes sleepers, then claims chunks itself. A worker
// that sees a new generation registers in `inJob_` and, if the job is still open, claims chunks
// from `next_` until none is left. The caller waits until every element is done (`remaining_`),
// closes the job and waits for `inJob_` to drain, so no worker reads a job while the next one is
// written; it never waits for a worker that is still asleep or descheduled and took no chunk.
#include "exec/cpu/thread_pool.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace onnxtool::cpu {

namespace {

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

/// How long an idle worker spins before it sleeps: long enough to bridge the gap between two
/// nodes of a plan, short enough not to steal a core for long from other work.
constexpr auto kSpin = std::chrono::microseconds(200);

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { workerLoop(); });
}

ThreadPool::~ThreadPool() {
  stop_ = true;
  publish();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::runChunks() {
  for (;;) {
    int64_t b = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (b >= n_) return;
    int64_t e = std::min(n_, b + chunk_);
    call_(ctx_, b, e);
    remaining_.fetch_sub(e - b, std::memory_order_release);
  }
}

void ThreadPool::workerLoop() {
  uint32_t seen = 0;  // the generation at construction: a job may be published before this thread runs
  for (;;) {
    auto deadline = std::chrono::steady_clock::now() + kSpin;
    uint32_t g;
    for (unsigned i = 1;; ++i) {
      g = generation_.load(std::memory_order_acquire);
      if (g != seen) break;
      if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) {
        // sleepers_ then generation_, both seq_cst, against publish()'s generation_ then
        // sleepers_: either publish() sees this sleeper or this sees the new generation.
        std::unique_lock lock(sleepMutex_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] { return generation_.load() != seen; });
        sleepers_.fetch_sub(1);
        deadline = std::chrono::steady_clock::now() + kSpin;
      }
      cpuRelax();
    }
    seen = g;
    if (stop_) return;
    // inJob_ then open_, both seq_cst, against the caller's open_ = false then inJob_: either
    // the caller waits for this worker or this worker sees the job closed.
    inJob_.fetch_add(1);
    if (open_.load()) runChunks();
    inJob_.fetch_sub(1, std::memory_order_release);
  }
}

void ThreadPool::publish() {
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) {
    std::lock_guard lock(sleepMutex_);  // a worker between its check and its wait holds it
    wake_.notify_all();
  }
}

void ThreadPool::dispatch(int64_t n, int64_t grain, Trampoline call, void* ctx) {
  bool expected = false;
  if (!busy_.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
    call(ctx, 0, n);  // another run holds the pool, or a nested call: inline
    return;
  }
  int64_t t = threads();
  call_ = call;
  ctx_ = ctx;
  n_ = n;
  // Two chunks per thread: a worker that comes late (or loses its core) leaves its share to
  // the others instead of holding everyone up.
  chunk_ = std::max(grain, (n + 2 * t - 1) / (2 * t));
  next_.store(0, std::memory_order_relaxed);
  remaining_.store(n, std::memory_order_relaxed);
  open_.store(true);
  publish();
  runChunks();
  while (remaining_.load(std::memory_order_acquire) > 0) cpuRelax();
  open_.store(false);
  while (inJob_.load(std::memory_order_acquire) != 0) cpuRelax();
  busy_.store(false, std::memory_order_release);
}

}  // namespace onnxtool::cpu
