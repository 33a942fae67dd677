// atomic_file.cpp: temporary-file-and-rename output.
#include "formats/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "lib/error.h"

namespace onnxtool {

namespace fs = std::filesystem;

AtomicFile::AtomicFile(std::string target) : target_(std::move(target)) {
  fs::path t(target_);
  fs::path dir = t.has_parent_path() ? t.parent_path() : fs::path(".");
  std::string tmpl = (dir / ("." + t.filename().string() + ".tmp.XXXXXX")).string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  int fd = ::mkstemp(buf.data());
  if (fd < 0) fail(ErrorKind::Io, "{}: cannot create a temporary file in '{}': {}", target_, dir.string(), std::strerror(errno));
  ::fchmod(fd, 0644);
  tmp_ = buf.data();
  file_ = ::fdopen(fd, "wb");
  if (!file_) {
    ::close(fd);
    ::unlink(tmp_.c_str());
    fail(ErrorKind::Io, "{}: cannot open a temporary file: {}", target_, std::strerror(errno));
  }
  std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
}

AtomicFile::~AtomicFile() {
  if (file_) std::fclose(file_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  if (n && std::fwrite(data, 1, n, file_) != n) fail(ErrorKind::Io, "{}: write failed: {}", target_, std::strerror(errno));
  written_ += n;
}

void AtomicFile::pad(uint64_t align) {
  static const char zeros[64] = {};
  while (written_ % align) write(zeros, static_cast<size_t>(std::min<uint64_t>(align - written_ % align, sizeof zeros)));
}

void AtomicFile::close() {
  if (std::fflush(file_) != 0 || std::ferror(file_)) fail(ErrorKind::Io, "{}: write failed: {}", target_, std::strerror(errno));
  int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) fail(ErrorKind::Io, "{}: write failed: {}", target_, std::strerror(errno));
}

void AtomicFile::rename() {
  if (::rename(tmp_.c_str(), target_.c_str()) != 0)
    fail(ErrorKind::Io, "{}: cannot rename the temporary file into place: {}", target_, std::strerror(errno));
  committed_ = true;
}

void writeStdout(std::string_view bytes) {
  if ((!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size()) || std::fflush(stdout) != 0) {
    int err = errno;
    std::clearerr(stdout);
    if (err == EPIPE) throw Error(ErrorKind::OutputClosed, "standard output was closed");
    fail(ErrorKind::Io, "writing to standard output failed: {}", std::strerror(err));
  }
}

void requireDistinctOutputs(const std::vector<std::pair<std::string, std::string>>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i)
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      const auto& [whatA, a] = outputs[i];
      const auto& [whatB, b] = outputs[j];
      if (a.empty() || b.empty() || a == "-" || b == "-") continue;
      if (samePath(a, b))
        fail(ErrorKind::InvalidInput, "{} '{}' and {} '{}' are the same file; nothing was written", whatA, a, whatB, b);
    }
}

bool samePath(const std::string& a, const std::string& b) {
  std::error_code ec1, ec2;
  if (fs::equivalent(a, b, ec1)) return true;
  fs::path ca = fs::weakly_canonical(fs::absolute(a, ec1), ec1);
  fs::path cb = fs::weakly_canonical(fs::absolute(b, ec2), ec2);
  return !ec1 && !ec2 && ca == cb;
}

}  // namespace onnxtool
