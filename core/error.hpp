// Errors that carry what failed and where. Every user-facing failure is a vfp::Error;
// main() prints its message once and exits non-zero.
#pragma once
#include <stdexcept>
#include <string>

namespace vfp {

enum class ErrorKind {
  Usage,        // bad command line / filter string (exit code 2)
  Input,        // missing, unreadable, corrupt or unsupported input
  Output,       // sink cannot be opened or written
  Gpu,          // CUDA failure
  OutOfMemory,  // host or device allocation failed
  Internal,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg) : std::runtime_error(msg), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// A syntax/validation error inside a string the user typed (filter string, source spec).
// `pos`/`len` point at the offending characters so the message can underline them.
class ParseError : public Error {
 public:
  ParseError(const std::string& msg, std::string text, size_t pos, size_t len = 1)
      : Error(ErrorKind::Usage, msg), text_(std::move(text)), pos_(pos), len_(len ? len : 1) {}
  const std::string& text() const { return text_; }
  size_t pos() const { return pos_; }
  size_t len() const { return len_; }
  // "message\n  text\n      ^^^" — ready to print.
  std::string pretty() const;

 private:
  std::string text_;
  size_t pos_, len_;
};

// A stage factory's complaint about one option value (e.g. an unknown pixel format in a
// list); the filter-string builder turns it into a ParseError pointing at that value.
class OptionError : public Error {
 public:
  OptionError(std::string option, const std::string& msg) : Error(ErrorKind::Usage, msg), option_(std::move(option)) {}
  const std::string& option() const { return option_; }

 private:
  std::string option_;
};

}  // namespace vfp
