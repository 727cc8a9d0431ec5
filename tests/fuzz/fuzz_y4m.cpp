// Y4M reader, plain and gzip: any bytes give frames or a vfp::Error, never a crash.
#include "core/frame.hpp"
#include "fuzz_util.hpp"
#include "io/y4m.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vfp;
  // The first byte picks plain or gzip, so one corpus covers both readers.
  if (size == 0) return 0;
  const bool gz = data[0] & 1;
  fuzz::TempFile file(data + 1, size - 1, gz ? ".y4m.gz" : ".y4m");
  fuzz::expect_clean([&] {
    Y4mSource src(file.path());
    const FrameSpec spec = src.spec();
    if (static_cast<size_t>(spec.width) * spec.height > (1u << 22)) return;  // the reader checked it; skip huge frames
    HostFrame f(spec, false);
    for (int i = 0; i < 4 && src.read(f); ++i) {
    }
  });
  return 0;
}
