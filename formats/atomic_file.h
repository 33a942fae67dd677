// atomic_file.h: output files that appear whole or not at all: bytes go to a temporary file in
// the target's folder, renamed onto the target only when everything was written.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace onnxtool {

/// A temporary file beside `target`; close() then rename() publish it, the destructor removes it
/// if it was never renamed. Every failure throws Error(Io) naming the target.
class AtomicFile {
 public:
  explicit AtomicFile(std::string target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  /// Pads with zero bytes up to a multiple of `align`.
  void pad(uint64_t align);
  uint64_t written() const { return written_; }
  /// Flushes and closes the temporary file.
  void close();
  /// Renames the (closed) temporary file onto the target.
  void rename();

 private:
  std::string target_, tmp_;
  FILE* file_ = nullptr;
  uint64_t written_ = 0;
  bool committed_ = false;
};

/// Writes to standard output. Throws Error(OutputClosed) when the reader closed the pipe (EPIPE;
/// SIGPIPE is ignored by the CLI), Error(Io) on other failures.
void writeStdout(std::string_view bytes);

/// Refuses (Error(InvalidInput)) before anything is written when two outputs of one command name
/// the same file. Each entry: what the output is ("-o", "--external-data") and its path; "-"
/// (standard output) and empty paths are skipped. Every subcommand checks its outputs with it.
void requireDistinctOutputs(const std::vector<std::pair<std::string, std::string>>& outputs);

/// Whether two paths name one file, also when neither exists yet (compared after resolving
/// symlinks, `.` and `..` of the existing part).
bool samePath(const std::string& a, const std::string& b);

}  // namespace onnxtool
