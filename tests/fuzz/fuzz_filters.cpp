// Filter strings (the parser and every stage's option binding and factory) and synthetic
// source specs: any text gives a chain or a ParseError / Error, never a crash.
#include <string>

#include "core/filter_parser.hpp"
#include "fuzz_util.hpp"
#include "io/synthetic.hpp"
#include "pipeline/chain.hpp"
#include "stages/builtin.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vfp;
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Options that name files are exercised by their own targets: here a device path could
  // block (file=/dev/stdin) and mmp's file= would write files wherever the fuzzer runs.
  if (text.find("/dev/") != std::string::npos || text.find("mmp") != std::string::npos) return 0;
  fuzz::expect_clean([&] {
    std::vector<std::unique_ptr<Stage>> stages = build_stages(text);
    Chain::build(std::move(stages), {PixelFormat::YUV420P, 33, 17, {25, 1}}, {});
  });
  fuzz::expect_clean([&] { parse_synthetic(text); });
  return 0;
}
