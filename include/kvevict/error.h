// Error reporting for the whole library (FlashInfer exception.h style).
// Library code never prints and never exits: it throws kvevict::Error, and the CLI turns that into
// a message and exit code 2.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace kvevict {

class Error : public std::runtime_error {
 public:
  Error(const char* file, int line, const std::string& message)
      : std::runtime_error(message), file_(file), line_(line) {}
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  const char* file_;
  int line_;
};

namespace detail {
inline void stream_all(std::ostringstream&) {}
template <class T, class... Rest>
void stream_all(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  stream_all(os, rest...);
}
template <class... Args>
[[noreturn]] void throw_error(const char* file, int line, const Args&... args) {
  std::ostringstream os;
  stream_all(os, args...);
  throw Error(file, line, os.str());
}
}  // namespace detail

}  // namespace kvevict

// KVEVICT_CHECK(cond, "budget ", b, " is out of range; expected 0 < budget <= n") throws with that
// text.
#define KVEVICT_CHECK(cond, ...)                                                  \
  do {                                                                            \
    if (!(cond)) ::kvevict::detail::throw_error(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

#define KVEVICT_FAIL(...) ::kvevict::detail::throw_error(__FILE__, __LINE__, __VA_ARGS__)
