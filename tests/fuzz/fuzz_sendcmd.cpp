// --sendcmd files: any bytes give commands (checked against a chain) or an Error.
#include <string>

#include "core/filter_parser.hpp"
#include "fuzz_util.hpp"
#include "pipeline/commands.hpp"
#include "stages/builtin.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vfp;
  // A device path in file= could block (file=/dev/stdin); mmp is not in the chain.
  if (std::string(reinterpret_cast<const char*>(data), size).find("/dev/") != std::string::npos) return 0;
  fuzz::TempFile file(data, size, ".cmds");
  fuzz::expect_clean([&] {
    std::vector<Command> cmds = load_commands(file.path());
    Chain chain = Chain::build(build_stages("median,conv=gauss,wavelet=haar:levels=1"),
                               {PixelFormat::YUV420P, 32, 16, {25, 1}}, {});
    validate_commands(cmds, chain);
    for (int64_t f = 0; f < 4; ++f) apply_commands(cmds, f, chain);
  });
  return 0;
}
