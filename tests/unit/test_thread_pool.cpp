// test_thread_pool.cpp: the cpu executor's intra-op pool: every index covered exactly once for
// several thread counts, sizes and grains; grain respected; nested and concurrent callers (which
// run inline) still cover everything; a 1-thread pool runs inline on the caller.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "exec/cpu/thread_pool.h"

using onnxtool::cpu::ThreadPool;

namespace {

/// Runs parallelFor(n, grain) and checks that every index was visited once, ranges respect the
/// grain (but the last), and stay inside [0, n).
void checkCover(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<bool> badRange{false};
  pool.parallelFor(n, grain, [&](int64_t b, int64_t e) {
    if (b < 0 || e > n || b >= e || (e - b < grain && e != n)) badRange = true;
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  INFO("n " << n << " grain " << grain << " threads " << pool.threads());
  CHECK_FALSE(badRange);
  int wrong = 0;
  for (auto& h : hits) wrong += h.load() != 1;
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("thread pool covers every index exactly once", "[threadpool]") {
  for (int threads : {1, 2, 3, 4, 8}) {
    ThreadPool pool(threads);
    CHECK(pool.threads() == threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000, 100003})
      for (int64_t grain : {1, 3, 64, 5000}) checkCover(pool, n, grain);
  }
}

TEST_CASE("thread pool uses its workers and the caller", "[threadpool]") {
  ThreadPool pool(2);
  std::atomic<int> fromCaller{0}, fromWorker{0};
  auto self = std::this_thread::get_id();
  // Many jobs of two chunks that each wait a little: the worker must take some.
  for (int rep = 0; rep < 200; ++rep)
    pool.parallelFor(2, 1, [&](int64_t b, int64_t e) {
      (std::this_thread::get_id() == self ? fromCaller : fromWorker) += static_cast<int>(e - b);
      auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
      while (std::chrono::steady_clock::now() < until) {
      }
    });
  CHECK(fromCaller + fromWorker == 400);
  CHECK(fromWorker > 0);
  CHECK(fromCaller > 0);
}

TEST_CASE("a 1-thread pool runs inline on the caller", "[threadpool]") {
  ThreadPool pool(1);
  auto self = std::this_thread::get_id();
  int calls = 0;
  bool sameThread = true;
  pool.parallelFor(1000, 1, [&](int64_t b, int64_t e) {
    ++calls;
    sameThread &= std::this_thread::get_id() == self;
    CHECK(b == 0);
    CHECK(e == 1000);
  });
  CHECK(calls == 1);
  CHECK(sameThread);
}

TEST_CASE("nested parallelFor runs inline and covers everything", "[threadpool]") {
  ThreadPool pool(3);
  const int64_t outer = 37, inner = 101;
  std::vector<std::atomic<int>> hits(static_cast<size_t>(outer * inner));
  for (int rep = 0; rep < 20; ++rep) {
    for (auto& h : hits) h = 0;
    pool.parallelFor(outer, 1, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o)
        pool.parallelFor(inner, 7, [&](int64_t ib, int64_t ie) {
          for (int64_t i = ib; i < ie; ++i) hits[static_cast<size_t>(o * inner + i)].fetch_add(1);
        });
    });
    int wrong = 0;
    for (auto& h : hits) wrong += h.load() != 1;
    CHECK(wrong == 0);
  }
}

TEST_CASE("concurrent callers of one pool each get their whole loop", "[threadpool]") {
  for (int threads : {2, 4}) {
    ThreadPool pool(threads);
    std::atomic<int> failures{0};
    std::vector<std::thread> callers;
    for (int c = 0; c < 4; ++c)
      callers.emplace_back([&, c] {
        for (int rep = 0; rep < 300; ++rep) {
          int64_t n = 1 + (rep * 31 + c * 17) % 2000;
          std::vector<int> hits(static_cast<size_t>(n), 0);  // disjoint ranges: no atomics needed
          pool.parallelFor(n, 16, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
          });
          for (int h : hits)
            if (h != 1) failures++;
        }
      });
    for (auto& t : callers) t.join();
    CHECK(failures == 0);
  }
}

TEST_CASE("a pool whose workers went to sleep wakes for the next job", "[threadpool]") {
  ThreadPool pool(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the spin window
  checkCover(pool, 1000, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  checkCover(pool, 5, 1);
}
