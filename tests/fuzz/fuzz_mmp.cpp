// MMP container reader and plane decoder: any bytes give frames or a vfp::Error.
#include "codecs/mmp/container.hpp"
#include "codecs/mmp/mmp.hpp"
#include "core/frame.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vfp;
  if (size == 0) return 0;
  if (data[0] & 1) {
    // A whole .mmp file.
    fuzz::TempFile file(data + 1, size - 1, ".mmp");
    fuzz::expect_clean([&] {
      mmp::Reader r(file.path());
      const FrameSpec spec = r.spec();
      if (static_cast<size_t>(spec.width) * spec.height > (1u << 20)) return;
      HostFrame f(spec, false);
      for (int i = 0; i < 3 && r.read(f); ++i) {
      }
    });
  } else {
    // One plane's payload straight into the decoder, at a size from the next two bytes.
    if (size < 3) return 0;
    const int w = 1 + data[1] % 64, h = 1 + data[2] % 64;
    mmp::Params p;
    p.block_log = 3 + (data[0] >> 1) % 3;
    fuzz::expect_clean([&] { mmp::decode_plane(data + 3, size - 3, w, h, p, nullptr); });
  }
  return 0;
}
