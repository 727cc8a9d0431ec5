// `null`: passes frames through unchanged (as FFmpeg's null filter). On the CUDA backend
// the engine forwards the device buffer, so the stage costs nothing; it exists to measure
// the engine itself (upload, download, overlap) and to exercise the chain.
#include "core/registry.hpp"
#include "cpu/convert.hpp"
#include "stages/builtin.hpp"
#if VFPIPE_HAVE_CUDA
#include "cuda/kernels.hpp"
#endif

namespace vfp {

namespace {
class NullStage final : public Stage {
 public:
  FrameSpec configure(const FrameSpec& in) override { return in; }
  bool passthrough() const override { return true; }
  void run_cpu(const ImageView& in, const ImageView& out, const StageContext&) override { copy_image_cpu(in, out); }
#if VFPIPE_HAVE_CUDA
  void run_cuda(const ImageView& in, const ImageView& out, const StageContext& ctx) override {
    cuda::copy_image_async(in, out, ctx.stream);
  }
#endif
};
}  // namespace

void register_null_stage(Registry& reg) {
  StageInfo s;
  s.name = "null";
  s.aliases = {"passthrough", "copy"};
  s.summary = "pass frames through unchanged";
  s.description =
      "Forwards every frame untouched. Useful to measure the engine alone (upload, "
      "download, copy/compute overlap) or to convert formats with --pix-fmt only.";
  s.formats = all_pixel_formats();
  s.cuda = true;
  s.examples = {"null"};
  s.create = [](const Options&) { return std::make_unique<NullStage>(); };
  reg.add(std::move(s));
}

}  // namespace vfp
