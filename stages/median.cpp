// `median` stage: options, registration, CPU/CUDA dispatch. Reference: cpu/median.cpp;
// CUDA kernels: cuda/median.cu.
#include "cpu/median.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/registry.hpp"
#include "stages/builtin.hpp"
#include "stages/planar.hpp"
#if VFPIPE_HAVE_CUDA
#include "cuda/median.hpp"
#endif

namespace vfp {
namespace {

// The kernel's parameters plus the GPU algorithm choice.
struct MedianSettings : MedianParams {
  std::string algo = "auto";
};

const OptionTable<MedianSettings>& median_options() {
  using S = MedianSettings;
  static const OptionTable<S> table = [] {
    OptionTable<S> t(Live::Yes);
    t.integer("radius", &S::radius, 1, 1, 127, "horizontal radius (window width 2*radius+1)").aliases({"r"});
    t.integer("radiusV", &S::radiusV, 0, 0, 127, "vertical radius, 0 = same as radius").aliases({"rv"});
    t.number("percentile", &S::percentile, 0.5, 0, 1, "rank as a fraction: 0.5 median, 0 min, 1 max").aliases({"p"});
    declare_planes_and_border(t, Border::Replicate,
                              {Border::Replicate, Border::Reflect101, Border::Reflect, Border::Constant});
    t.choice("algo", &S::algo, "auto", {"auto", "select", "histogram"},
             "GPU algorithm (for benchmarks): auto, select, histogram");
    return t;
  }();
  return table;
}

MedianSettings median_settings(const Options& o) {
  MedianSettings s = median_options().bind(o);
  if (s.planes == 0) throw OptionError("planes", "median: planes=0 filters nothing");
  return s;
}

class MedianStage final : public Stage {
 public:
  explicit MedianStage(MedianSettings s) : s_(std::move(s)) {}

  FrameSpec configure(const FrameSpec& in) override {
    return check_planar_input("median", in, s_.planes, /*high_depth=*/true);
  }

  void run_cpu(const ImageView& in, const ImageView& out, const StageContext&) override {
    const bool deep = is_16bit(in.format);
    const MedianParams p = on_scale(deep);
    for_each_plane_cpu(in, out, s_.planes, [&](const uint8_t* s, int sp, uint8_t* d, int dp, int w, int h, int) {
      with_samples(deep, s, d, [&](auto src, auto dst) { median_plane_cpu(src, sp, dst, dp, w, h, p); });
    });
  }
#if VFPIPE_HAVE_CUDA
  void run_cuda(const ImageView& in, const ImageView& out, const StageContext& ctx) override {
    cuda::MedianAlgo algo = s_.algo == "select"      ? cuda::MedianAlgo::Select
                            : s_.algo == "histogram" ? cuda::MedianAlgo::Histogram
                                                     : cuda::MedianAlgo::Auto;
    const bool deep = is_16bit(in.format);
    const MedianParams p = on_scale(deep);
    for_each_plane_cuda(in, out, s_.planes, ctx.stream,
                        [&](const uint8_t* s, int sp, uint8_t* d, int dp, int w, int h) {
                          with_samples(deep, s, d, [&](auto src, auto dst) {
                            cuda::median_plane_async(src, sp, dst, dp, w, h, p, algo, ctx.stream);
                          });
                        });
  }
#endif
  // Parameters travel by value to each launch, so a change needs no GPU state.
  void update(const Options& o) override {
    s_ = median_settings(o);
    set_options(o);
  }
  std::string label() const override {
    std::string l = log::format("median(%dx%d", 2 * s_.rx() + 1, 2 * s_.ry() + 1);
    if (s_.percentile != 0.5) l += log::format(",p=%g", s_.percentile);
    return l + ")";
  }

 private:
  // The parameters for the frames' samples: the constant border's value is given on the
  // 8-bit scale, which 16-bit samples hold times 257.
  MedianParams on_scale(bool deep) const {
    MedianParams p = s_;
    if (deep) p.value *= 257;
    return p;
  }

  MedianSettings s_;
};

}  // namespace

void register_median_stage(Registry& reg) {
  StageInfo s;
  s.name = "median";
  s.summary = "median / percentile filter, any window up to 255x255 (FFmpeg-compatible)";
  s.description =
      "Replaces each sample by the value at rank floor(percentile*(n-1)+0.5) of its "
      "(2*radius+1)x(2*radiusV+1) window (n samples; the median by default). With "
      "border=replicate and percentile=0.5 the output equals FFmpeg's -vf median bit for bit. "
      "GPU: forgetful selection on packed pairs for windows up to 7x7, a sliding 256-bin "
      "histogram per column strip above (docs/median.md). 16-bit frames (10-bit video) are "
      "filtered at 16 bits; the constant border's value stays on the 8-bit scale.";
  s.options = median_options().specs();
  s.formats = {PixelFormat::GRAY8,  PixelFormat::YUV420P,   PixelFormat::YUV444P,
               PixelFormat::GRAY16, PixelFormat::YUV420P16, PixelFormat::YUV444P16};
  s.cuda = true;
  s.live.option = "radius";
  s.live.step = LiveParam::Step::Add;
  s.live.min = 1;
  s.live.max = 127;
  s.examples = {"median", "median=radius=2", "median=3:2", "median=radius=5:percentile=0.25:border=reflect101",
                "median=radius=1:planes=1"};
  s.create = [](const Options& o) { return std::make_unique<MedianStage>(median_settings(o)); };
  reg.add(std::move(s));
}

}  // namespace vfp
