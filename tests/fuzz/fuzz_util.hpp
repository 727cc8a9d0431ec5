// Shared by the libFuzzer targets: the input bytes as a temporary file (the readers under
// test take paths), and the rule that vfpipe's own errors are the expected outcome of bad
// input while anything else (a crash, a sanitizer report, another exception) is a finding.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/error.hpp"

namespace vfp::fuzz {

// A file holding the data, removed when it goes out of scope. `suffix` selects the reader's
// mode (".y4m.gz" reads gzip).
class TempFile {
 public:
  TempFile(const uint8_t* data, size_t size, const std::string& suffix) {
    path_ = "/tmp/vfpipe-fuzz-" + std::to_string(::getpid()) + suffix;
    FILE* f = std::fopen(path_.c_str(), "wb");
    // Failing here means the code under test leaked descriptors (or the disk is full).
    if (!f) {
      std::perror(("fuzz harness: cannot create " + path_).c_str());
      std::abort();
    }
    if (size && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs fn; vfp::Error (bad input, reported cleanly) is fine, anything else escapes and
// aborts the fuzzer.
template <typename Fn>
void expect_clean(Fn&& fn) {
  try {
    fn();
  } catch (const Error&) {
  }
}

}  // namespace vfp::fuzz
