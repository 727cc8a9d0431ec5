// `wavelet` stage: options, registration, CPU/CUDA dispatch. Reference: cpu/wavelet.cpp;
// CUDA kernels: cuda/wavelet.cu.
#include "cpu/wavelet.hpp"

#include <algorithm>
#include <memory>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/registry.hpp"
#include "stages/builtin.hpp"
#include "stages/planar.hpp"
#if VFPIPE_HAVE_CUDA
#include "cuda/wavelet.hpp"
#endif

namespace vfp {

namespace {

// The options as declared (vaguedenoiser spellings included); wavelet_params_from() resolves
// them into the transform's parameters.
struct WaveletSettings {
  std::string wavelet, method, mode, boundary;
  int levels = 0;
  double threshold = 0, sigma = 0, percent = 100;
  int planes = 15;
};

const OptionTable<WaveletSettings>& wavelet_table() {
  using S = WaveletSettings;
  static const OptionTable<S> table = [] {
    std::vector<std::string> wavelets = wavelet_names();
    wavelets.push_back("db1");
    wavelets.push_back("bior4.4");
    OptionTable<S> t(Live::Yes);
    t.choice("wavelet", &S::wavelet, "db4", wavelets, "wavelet (cdf97 = JPEG 2000 9/7 = pywt bior4.4)")
        .aliases({"wave"});
    t.integer("levels", &S::levels, 0, 0, 16, "decomposition levels, 0 = auto (max for the plane minus 3, at least 1)")
        .aliases({"nsteps"});
    t.choice("method", &S::method, "bayesshrink", {"bayesshrink", "visushrink", "fixed", "soft", "hard", "garrote"},
             "threshold rule: bayesshrink (per subband), visushrink (universal), fixed (threshold=); "
             "soft|hard|garrote are read as mode (vaguedenoiser)");
    t.choice("mode", &S::mode, "soft", {"soft", "hard", "garrote"}, "shrinkage: soft, hard, garrote");
    t.number("threshold", &S::threshold, 0, 0, 1e6, "fixed threshold in 8-bit sample units (implies method=fixed)")
        .aliases({"t"});
    t.number("sigma", &S::sigma, 0, 0, 255, "noise standard deviation in 8-bit sample units, 0 = estimate per plane");
    t.number("percent", &S::percent, 100, 0, 100, "partial shrinkage in percent (vaguedenoiser; 100 = full)");
    t.integer("planes", &S::planes, 15, 0, 15, "bit mask of planes to denoise (others are copied)");
    t.choice("boundary", &S::boundary, "symmetric", {"symmetric", "periodization"},
             "signal extension: symmetric or periodization (pywt modes)")
        .aliases({"extension"});
    return t;
  }();
  return table;
}

WaveletParams wavelet_params_from(const Options& o) {
  const WaveletSettings s = wavelet_table().bind(o);
  WaveletParams p;
  p.wavelet = find_wavelet(s.wavelet);
  if (!p.wavelet) throw OptionError("wavelet", "wavelet: unknown wavelet '" + s.wavelet + "'");
  p.boundary = s.boundary == "periodization" ? WaveletBoundary::Periodization : WaveletBoundary::Symmetric;
  p.levels = s.levels;
  std::string method = s.method, mode = s.mode;
  if (method == "soft" || method == "hard" || method == "garrote") {
    // FFmpeg vaguedenoiser spelling: `method` is the shrinkage rule.
    if (o.is_explicit("mode") && mode != method)
      throw OptionError("method", "wavelet: method=" + method +
                                      " (the vaguedenoiser spelling of mode) "
                                      "contradicts mode=" +
                                      mode);
    mode = method;
    method = o.is_explicit("threshold") ? "fixed" : "bayesshrink";
  } else if (!o.is_explicit("method") && o.is_explicit("threshold")) {
    method = "fixed";
  }
  p.mode = mode == "hard" ? ShrinkMode::Hard : mode == "garrote" ? ShrinkMode::Garrote : ShrinkMode::Soft;
  p.method = method == "fixed"        ? ShrinkMethod::Fixed
             : method == "visushrink" ? ShrinkMethod::VisuShrink
                                      : ShrinkMethod::BayesShrink;
  p.threshold = s.threshold;
  if (p.method == ShrinkMethod::Fixed && !o.is_explicit("threshold"))
    throw OptionError("method", "wavelet: method=fixed needs threshold=T (in 8-bit sample units)");
  if (p.method != ShrinkMethod::Fixed && o.is_explicit("threshold"))
    throw OptionError("threshold", "wavelet: threshold is used with method=fixed only (" + method +
                                       " computes its thresholds from sigma)");
  p.sigma = s.sigma;
  p.percent = s.percent;
  p.planes = s.planes;
  if (p.planes == 0) throw OptionError("planes", "wavelet: planes=0 filters nothing");
  return p;
}

class WaveletStage final : public Stage {
 public:
  explicit WaveletStage(WaveletParams p) : p_(p) {}

  FrameSpec configure(const FrameSpec& in) override {
    check_planar_input("wavelet", in, p_.planes, /*high_depth=*/true);
    spec_ = in;
    check_levels(p_);
    return in;
  }

  void run_cpu(const ImageView& in, const ImageView& out, const StageContext&) override {
    const bool deep = is_16bit(in.format);
    for_each_plane_cpu(in, out, p_.planes, [&](const uint8_t* s, int sp, uint8_t* d, int dp, int w, int h, int pl) {
      WaveletScratch* scratch = &scratch_[static_cast<size_t>(pl)];
      with_samples(deep, s, d,
                   [&](auto src, auto dst) { wavelet_denoise_plane_cpu(src, sp, dst, dp, w, h, p_, scratch); });
    });
  }
#if VFPIPE_HAVE_CUDA
  void prepare(Backend backend, int slots) override {
    work_.clear();
    if (backend != Backend::CUDA) return;
    for (int i = 0; i < slots; ++i) work_.push_back(std::make_unique<cuda::WaveletWorkspace>());
  }
  void run_cuda(const ImageView& in, const ImageView& out, const StageContext& ctx) override {
    cuda::WaveletWorkspace& ws = *work_[static_cast<size_t>(ctx.slot) % work_.size()];
    const bool deep = is_16bit(in.format);
    for_each_plane_cuda(in, out, p_.planes, ctx.stream,
                        [&](const uint8_t* s, int sp, uint8_t* d, int dp, int w, int h) {
                          with_samples(deep, s, d, [&](auto src, auto dst) {
                            ws.denoise(src, sp, dst, dp, w, h, p_, p_.levels_for(w, h), ctx.stream);
                          });
                        });
  }
#endif
  // Every option can change live; the workspace grows on the next frame if it must.
  void update(const Options& o) override {
    WaveletParams p = wavelet_params_from(o);
    if (spec_.width > 0) check_levels(p);
    p_ = p;
    set_options(o);
  }
  std::string label() const override {
    static const char* methods[] = {"bayes", "visu", "fixed"};
    static const char* modes[] = {"soft", "hard", "garrote"};
    std::string l = log::format("wavelet(%s,%s,%s", p_.wavelet->name, methods[static_cast<int>(p_.method)],
                                modes[static_cast<int>(p_.mode)]);
    if (p_.levels > 0) l += log::format(",%d levels", p_.levels);
    return l + ")";
  }

 private:
  void check_levels(const WaveletParams& p) const {
    const FrameLayout lay = FrameLayout::of(spec_);
    for (int pl = 0; pl < lay.planes; ++pl)
      if (p.planes & (1 << pl)) p.levels_for(lay.plane[pl].width, lay.plane[pl].height);
  }

  WaveletParams p_;
  FrameSpec spec_{};
  WaveletScratch scratch_[kMaxPlanes];  // the CPU path's buffers per plane, reused from frame to frame
#if VFPIPE_HAVE_CUDA
  std::vector<std::unique_ptr<cuda::WaveletWorkspace>> work_;
#endif
};

}  // namespace

void register_wavelet_stage(Registry& reg) {
  StageInfo s;
  s.name = "wavelet";
  s.aliases = {"wdenoise"};
  s.summary = "wavelet denoising: multi-level 2-D DWT, BayesShrink/VisuShrink/fixed, soft/hard/garrote";
  s.description =
      "Decomposes each selected plane with a separable 2-D DWT (PyWavelets' coefficients for "
      "the same wavelet and boundary), shrinks the detail coefficients and reconstructs. The "
      "noise sigma is estimated per plane from the finest diagonal subband (median absolute "
      "value / 0.6745) unless given, on the GPU as well. FFmpeg vaguedenoiser spellings: "
      "nsteps (levels), method=soft|hard|garrote, threshold, percent (docs/wavelet.md). "
      "16-bit input (format=gray16le or yuv420p16le/yuv444p16le before it) is denoised on the "
      "8-bit scale and written back at 16 bits, so the result is not rounded to 8 bits.";
  s.options = wavelet_table().specs();
  s.formats = {PixelFormat::GRAY8,  PixelFormat::YUV420P,   PixelFormat::YUV444P,
               PixelFormat::GRAY16, PixelFormat::YUV420P16, PixelFormat::YUV444P16};
  s.cuda = true;
  // The display's keys scale a fixed threshold by 1.25; the first press switches to
  // method=fixed at 8 levels.
  s.live.option = "threshold";
  s.live.step = LiveParam::Step::Scale;
  s.live.amount = 1.25;
  s.live.min = 0.25;
  s.live.max = 1000;
  s.live.sets = {{"method", "fixed"}};
  s.live.start = 8;
  s.examples = {"wavelet", "wavelet=db4:levels=3", "wavelet=sym8:method=visushrink:mode=hard",
                "wdenoise=threshold=8:method=garrote:percent=85", "wavelet=cdf97:sigma=20:planes=1"};
  s.create = [](const Options& o) { return std::make_unique<WaveletStage>(wavelet_params_from(o)); };
  reg.add(std::move(s));
}

}  // namespace vfp
