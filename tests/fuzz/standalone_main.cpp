// standalone_main.cpp: a driver for the fuzz targets without libFuzzer (any compiler; the ASan
// build links it, CTest runs it as a smoke test). It replays every file of the corpus paths
// given (folders recursively), then runs seeded random mutations of them (bit flips, interesting
// bytes, insertions, erasures, duplications, truncations, splices) until -runs or
// -max_total_time is reached. Same seed, same mutants. Real fuzzing (coverage-guided, hours) is
// scripts/fuzz, which links the same targets with libFuzzer.
//   usage: fuzz_TARGET [-runs=N] [-max_total_time=S] [-seed=N] [-max_len=BYTES] [-artifact=FILE] PATH...
// A crash or an escaping exception writes the input to FILE (default fuzz-crash.bin) first.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <exception>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// Sanitizer runtimes call this back before they exit with a report (weak: absent without one).
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace {

// The input being run, written out when the process dies so the finding can be reproduced.
const std::vector<uint8_t>* current = nullptr;
std::string crashPath = "fuzz-crash.bin";

void saveCurrent() {
  if (!current) return;
  if (FILE* f = std::fopen(crashPath.c_str(), "wb")) {
    std::fwrite(current->data(), 1, current->size(), f);
    std::fclose(f);
    std::fprintf(stderr, "the input that failed is in %s (%zu bytes)\n", crashPath.c_str(), current->size());
  }
}

void onSignal(int sig) {
  saveCurrent();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void onTerminate() {
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      std::fprintf(stderr, "uncaught exception (not onnxtool::Error): %s\n", x.what());
    } catch (...) {
      std::fprintf(stderr, "uncaught exception of an unknown type\n");
    }
  }
  saveCurrent();
  std::signal(SIGABRT, SIG_DFL);
  std::abort();
}

void run(const std::string& s) {
  // a copy in its own allocation, so ASan sees reads past the end of the input
  std::vector<uint8_t> buf(s.begin(), s.end());
  current = &buf;
  LLVMFuzzerTestOneInput(buf.data(), buf.size());
  current = nullptr;
}

std::string mutate(std::string s, const std::vector<std::string>& corpus, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
  int steps = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < steps; ++k) {
    switch (rng() % 8) {
      case 0:  // flip a bit
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1: {  // an interesting byte
        static const unsigned char v[] = {0, 1, 0x7f, 0x80, 0xff, 0xfe, 0x40, 0x20};
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(v[rng() % sizeof v]);
        break;
      }
      case 2: {  // insert random bytes
        std::string ins(1 + pick(8), '\0');
        for (char& c : ins) c = static_cast<char>(rng());
        s.insert(pick(s.size() + 1), ins);
        break;
      }
      case 3:  // erase a range
        if (!s.empty()) {
          size_t at = pick(s.size());
          s.erase(at, 1 + pick(std::min<size_t>(64, s.size() - at)));
        }
        break;
      case 4:  // duplicate a range
        if (!s.empty()) {
          size_t at = pick(s.size()), n = 1 + pick(std::min<size_t>(64, s.size() - at));
          s.insert(pick(s.size() + 1), s.substr(at, n));
        }
        break;
      case 5:  // truncate
        s.resize(pick(s.size() + 1));
        break;
      case 6: {  // splice with another input
        const std::string& o = corpus[pick(corpus.size())];
        size_t cut = pick(s.size() + 1), from = pick(o.size() + 1);
        s = s.substr(0, cut) + o.substr(from);
        break;
      }
      default: {  // a varint-sized field: overwrite 4 bytes with a large little-endian number
        if (s.size() >= 4) {
          uint32_t v = static_cast<uint32_t>(rng()) | 0x80808080u;
          size_t at = pick(s.size() - 3);
          for (int b = 0; b < 4; ++b) s[at + b] = static_cast<char>(v >> (8 * b));
        }
        break;
      }
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  long long runs = 1000;
  double maxTime = 0;
  unsigned long long seed = 1;
  size_t maxLen = 1 << 20;
  std::vector<std::filesystem::path> paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("-runs=", 0) == 0) runs = std::atoll(a.c_str() + 6);
    else if (a.rfind("-max_total_time=", 0) == 0) maxTime = std::atof(a.c_str() + 16);
    else if (a.rfind("-seed=", 0) == 0) seed = std::strtoull(a.c_str() + 6, nullptr, 10);
    else if (a.rfind("-max_len=", 0) == 0) maxLen = std::strtoull(a.c_str() + 9, nullptr, 10);
    else if (a.rfind("-artifact=", 0) == 0) crashPath = a.substr(10);
    else if (!a.empty() && a[0] == '-') std::fprintf(stderr, "ignoring unknown option %s\n", a.c_str());
    else paths.emplace_back(a);
  }
  std::set_terminate(onTerminate);
  for (int sig : {SIGSEGV, SIGABRT, SIGFPE, SIGBUS, SIGILL}) std::signal(sig, onSignal);
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(saveCurrent);
  std::vector<std::string> corpus;
  auto add = [&](const std::filesystem::path& p) {
    std::error_code ec;
    if (std::filesystem::file_size(p, ec) > maxLen || ec) return;
    std::ifstream f(p, std::ios::binary);
    corpus.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  };
  for (const auto& p : paths) {
    if (std::filesystem::is_directory(p)) {
      std::vector<std::filesystem::path> files;
      for (const auto& e : std::filesystem::recursive_directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());  // a stable order: the same seed gives the same mutants
      for (const auto& f : files) add(f);
    } else if (std::filesystem::exists(p)) {
      add(p);
    } else {
      std::fprintf(stderr, "no such corpus path: %s\n", p.string().c_str());
      return 2;
    }
  }
  if (corpus.empty()) corpus.emplace_back();
  auto start = std::chrono::steady_clock::now();
  for (const auto& s : corpus) run(s);
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  double replay = elapsed();
  std::mt19937_64 rng(seed);
  long long done = 0;
  for (; done < runs && (maxTime <= 0 || elapsed() < maxTime); ++done)
    run(mutate(corpus[static_cast<size_t>(rng() % corpus.size())], corpus, rng));
  std::printf("%s: replayed %zu inputs in %.1f s, then %lld mutants (seed %llu) in %.1f s: no crash\n", argv[0],
              corpus.size(), replay, done, seed, elapsed() - replay);
  return 0;
}
