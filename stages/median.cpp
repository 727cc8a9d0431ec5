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

class MedianStage final : public Stage {
 public:
  MedianStage(MedianParams p, std::string algo) : p_(p), algo_(std::move(algo)) {}

  FrameSpec configure(const FrameSpec& in) override { return check_planar_input("median", in, p_.planes); }
  bool has_cuda() const override { return true; }

  void run_cpu(const ImageView& in, const ImageView& out, const StageContext&) override {
    for_each_plane_cpu(in, out, p_.planes, [&](const uint8_t* s, int sp, uint8_t* d, int dp, int w, int h, int) {
      median_plane_cpu(s, sp, d, dp, w, h, p_);
    });
  }
#if VFPIPE_HAVE_CUDA
  void run_cuda(const ImageView& in, const ImageView& out, const StageContext& ctx) override {
    cuda::MedianAlgo algo = algo_ == "select"      ? cuda::MedianAlgo::Select
                            : algo_ == "histogram" ? cuda::MedianAlgo::Histogram
                                                   : cuda::MedianAlgo::Auto;
    for_each_plane_cuda(in, out, p_.planes, ctx.stream,
                        [&](const uint8_t* s, int sp, uint8_t* d, int dp, int w, int h) {
                          cuda::median_plane_async(s, sp, d, dp, w, h, p_, algo, ctx.stream);
                        });
  }
#endif
  // Parameters travel by value to each launch, so a change needs no GPU state.
  void update(const Options& o) override {
    p_ = params_from(o);
    algo_ = o.str("algo");
    set_options(o);
  }
  static MedianParams params_from(const Options& o) {
    MedianParams p;
    p.radius = static_cast<int>(o.integer("radius"));
    p.radiusV = static_cast<int>(o.integer("radiusV"));
    p.percentile = o.number("percentile");
    p.planes = static_cast<int>(o.integer("planes"));
    parse_border(o.str("border"), &p.border);
    p.value = static_cast<int>(o.integer("value"));
    if (p.planes == 0) throw OptionError("planes", "median: planes=0 filters nothing");
    return p;
  }
  std::string label() const override {
    std::string l = log::format("median(%dx%d", 2 * p_.rx() + 1, 2 * p_.ry() + 1);
    if (p_.percentile != 0.5) l += log::format(",p=%g", p_.percentile);
    return l + ")";
  }

 private:
  MedianParams p_;
  std::string algo_;
};

}  // namespace

void register_median_stage(Registry& reg) {
  using T = OptionSpec::Type;
  StageInfo s;
  s.name = "median";
  s.summary = "median / percentile filter, any window up to 255x255 (FFmpeg-compatible)";
  s.description =
      "Replaces each sample by the value at rank floor(percentile*(n-1)+0.5) of its "
      "(2*radius+1)x(2*radiusV+1) window (n samples; the median by default). With "
      "border=replicate and percentile=0.5 the output equals FFmpeg's -vf median bit for bit. "
      "GPU: forgetful selection on packed pairs for windows up to 7x7, a sliding 256-bin "
      "histogram per column strip above (docs/median.md).";
  s.options = {
      {"radius", T::Int, "1", "horizontal radius (window width 2*radius+1)", 1, 127, {}, {"r"}},
      {"radiusV", T::Int, "0", "vertical radius, 0 = same as radius", 0, 127, {}, {"rv"}},
      {"percentile", T::Float, "0.5", "rank as a fraction: 0.5 median, 0 min, 1 max", 0, 1, {}, {"p"}},
      {"planes", T::Int, "15", "bit mask of planes to filter (others are copied)", 0, 15, {}, {}},
      {"border", T::Choice, "replicate", "samples outside the frame", 0, 0,
       {"replicate", "reflect101", "reflect", "constant"}, {}},
      {"value", T::Int, "0", "sample value outside the frame for border=constant", 0, 255, {}, {}},
      {"algo", T::Choice, "auto", "GPU algorithm (for benchmarks): auto, select, histogram", 0, 0,
       {"auto", "select", "histogram"}, {}},
  };
  s.formats = {PixelFormat::GRAY8, PixelFormat::YUV420P, PixelFormat::YUV444P};
  s.cuda = true;
  s.examples = {"median", "median=radius=2", "median=3:2", "median=radius=5:percentile=0.25:border=reflect101",
                "median=radius=1:planes=1"};
  s.create = [](const Options& o) {
    return std::make_unique<MedianStage>(MedianStage::params_from(o), o.str("algo"));
  };
  reg.add(std::move(s));
}

}  // namespace vfp
