// conv kernel files: any bytes give a kernel or an Error.
#include "cpu/conv.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vfp;
  fuzz::TempFile file(data, size, ".kernel");
  fuzz::expect_clean([&] { conv_load_file(file.path()); });
  return 0;
}
