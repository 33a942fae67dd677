// error.h: the one exception type the library throws, with the CLI exit-code category it maps to.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace onnxtool {

/// What kind of failure an Error is; the CLI maps it to an exit code (see apps/common.h).
enum class ErrorKind {
  InvalidInput,  ///< unreadable, malformed or inconsistent input (exit 2)
  Unsupported,   ///< valid input this build cannot handle: op, opset, device (exit 3)
  Io,            ///< the operating system refused a read or write (exit 2)
  Internal,      ///< a broken invariant of our own
  /// The reader of standard output went away (`| head`): the command ends quietly with exit 0.
  OutputClosed,
};

/// Library error: a one-line message naming the file, node or field concerned.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message) : std::runtime_error(std::move(message)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(kind, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace onnxtool
