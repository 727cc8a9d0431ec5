// `conv` stage: options, registration, CPU/CUDA dispatch. Reference and kernel builders:
// cpu/conv.cpp; CUDA kernels: cuda/conv.cu.
#include "stages/conv.hpp"

#include "cpu/conv.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/registry.hpp"
#include "stages/builtin.hpp"
#include "stages/planar.hpp"
#if VFPIPE_HAVE_CUDA
#include "cuda/conv.hpp"
#endif

namespace vfp {
// ------------------------------------------------------------------ the stage
namespace {

class ConvStage final : public Stage {
 public:
  ConvStage(ConvParams p, bool use_separable) : p_(std::move(p)), separable_(use_separable) {}

  FrameSpec configure(const FrameSpec& in) override {
    return check_planar_input("conv", in, p_.planes, /*high_depth=*/true);
  }
  int constant_banks_per_slot() const override { return 1; }
#if VFPIPE_HAVE_CUDA
  void prepare(Backend b, int slots) override {
    gpu_.reset();  // release this stage's banks before reserving again (re-prepared chain)
    if (b == Backend::CUDA) gpu_ = std::make_unique<cuda::ConvTaps>(slots);
  }
#endif

  void run_cpu(const ImageView& in, const ImageView& out, const StageContext&) override {
    const bool deep = is_16bit(in.format);
    const ConvParams p = deep ? p_.at_16_bits() : p_;
    for_each_plane_cpu(in, out, p_.planes, [&](const uint8_t* s, int sp, uint8_t* d, int dp, int w, int h, int pl) {
      with_samples(deep, s, d, [&](auto src, auto dst) {
        if (separable_)
          conv_plane_separable_cpu(src, sp, dst, dp, w, h, p, &scratch_[static_cast<size_t>(pl)]);
        else
          conv_plane_cpu(src, sp, dst, dp, w, h, p);
      });
    });
  }
#if VFPIPE_HAVE_CUDA
  void run_cuda(const ImageView& in, const ImageView& out, const StageContext& ctx) override {
    gpu_->use(p_, separable_, version_, ctx.slot, ctx.stream);  // stream-ordered, per slot
    const bool deep = is_16bit(in.format);
    for_each_plane_cuda(
        in, out, p_.planes, ctx.stream, [&](const uint8_t* s, int sp, uint8_t* d, int dp, int w, int h) {
          with_samples(deep, s, d,
                       [&](auto src, auto dst) { gpu_->run(src, sp, dst, dp, w, h, ctx.slot, ctx.stream); });
        });
  }
#endif
  void update(const Options& o) override {
    bool sep = false;
    ConvParams p = conv_params_from_options(o, &sep);
    set_params(std::move(p), sep);
    set_options(o);
  }
  // Live change between frames (applied to the frames submitted after the call).
  void set_params(ConvParams p, bool use_separable) {
    p_ = std::move(p);
    separable_ = use_separable;
    ++version_;
  }
  std::string label() const override { return "conv(" + p_.kernel.name + (separable_ ? ", separable" : "") + ")"; }

 private:
  ConvParams p_;
  bool separable_;
  uint64_t version_ = 1;
  std::vector<float> scratch_[kMaxPlanes];  // the separable CPU path's rows, per plane, reused
#if VFPIPE_HAVE_CUDA
  std::unique_ptr<cuda::ConvTaps> gpu_;
#endif
};

}  // namespace

// The options as declared; conv_params_from_options() turns them into the kernel's parameters.
struct ConvSettings {
  std::string kernel, size;
  double sigma = 0, amount = 1;
  std::string dir, file;
  double rdiv = 0, bias = 0;
  int planes = 15;
  Border border = Border::Reflect101;
  int value = 0;
  std::string separable;
};

const OptionTable<ConvSettings>& conv_table() {
  using S = ConvSettings;
  static const OptionTable<S> table = [] {
    OptionTable<S> t(Live::Yes);
    t.text("kernel", &S::kernel, "identity",
           "preset (" + conv_preset_names(" ") + ") or inline taps '1 2 1 2 4 2 1 2 1'")
        .aliases({"k", "preset"})
        .excludes({"file"});
    t.text("size", &S::size, "", "kernel size N or WxH (odd, up to 31); presets default 3 (gauss/unsharp 5)")
        .aliases({"s"});
    t.number("sigma", &S::sigma, 0, 0, 100, "gauss/unsharp standard deviation; 0 = from the size");
    t.number("amount", &S::amount, 1, -100, 100, "sharpen/unsharp strength");
    t.choice("dir", &S::dir, "x", {"x", "y"}, "sobel/scharr direction");
    t.text("file", &S::file, "", "text file with one kernel row per line").excludes({"kernel"});
    t.number("rdiv", &S::rdiv, 0, -1e9, 1e9, "multiply the sum by this; 0 = 1/sum of taps (1 for zero-sum presets)");
    t.number("bias", &S::bias, 0, -1e9, 1e9, "add after rdiv (128 shows signed edges)");
    declare_planes_and_border(t, Border::Reflect101,
                              {Border::Reflect101, Border::Replicate, Border::Reflect, Border::Constant, Border::Wrap});
    t.choice("separable", &S::separable, "auto", {"auto", "on", "off"},
             "two 1-D passes: auto (rank-1 kernels of 7x7 and up), on, off");
    return t;
  }();
  return table;
}

const std::vector<OptionSpec>& conv_options() { return conv_table().specs(); }

// Builds parameters from validated options (shared by the factory and live changes).
ConvParams conv_params_from_options(const Options& o, bool* use_separable) {
  const ConvSettings s = conv_table().bind(o);
  ConvParams p;
  int w = 0, h = 0;
  if (!s.size.empty()) {
    char extra = 0;
    if (std::sscanf(s.size.c_str(), "%dx%d%c", &w, &h, &extra) != 2) {
      if (std::sscanf(s.size.c_str(), "%d%c", &w, &extra) != 1)
        throw OptionError("size", "conv: size must be N or WxH, got '" + s.size + "'");
      h = w;
    }
    conv_check_size(w, h, "size");
  }
  const std::string& kern = s.kernel;
  bool user_taps = false;
  if (!s.file.empty()) {
    if (o.is_explicit("kernel")) throw OptionError("file", "conv: give either kernel= or file=, not both");
    p.kernel = conv_load_file(s.file);
    user_taps = true;
  } else if (!kern.empty() && (std::isdigit(static_cast<unsigned char>(kern[0])) || kern[0] == '-' || kern[0] == '+' ||
                               kern[0] == '.')) {
    p.kernel = conv_parse_taps(kern, w, h);
    user_taps = true;
  } else {
    p.kernel = conv_preset(kern, w, h, s.sigma, s.amount, s.dir);
  }
  const double sum = p.kernel.sum();
  if (s.rdiv != 0) {
    p.rdiv = static_cast<float>(s.rdiv);
  } else if (std::fabs(sum) > 1e-6) {
    p.rdiv = static_cast<float>(1.0 / sum);
  } else if (user_taps) {
    throw OptionError(s.file.empty() ? "kernel" : "file",
                      "conv: the kernel's taps sum to 0, so the default rdiv (1/sum) is undefined; "
                      "set rdiv (e.g. rdiv=1) and perhaps bias=128");
  } else {
    p.rdiv = 1.f;  // zero-sum presets (sobel, laplacian, edge): plain sum
  }
  p.bias = static_cast<float>(s.bias);
  p.planes = s.planes;
  p.border = s.border;
  p.value = s.value;
  if (s.separable == "on" && !p.kernel.separable)
    throw OptionError("separable", "conv: separable=on, but the " + p.kernel.name + " kernel is not rank 1");
  // Two passes pay off once the 2-D taps outnumber the two 1-D passes by enough
  // (docs/perf.md#convolution has the crossover); small kernels stay 2-D (bit-exact).
  *use_separable = p.kernel.separable && s.separable != "off" && (s.separable == "on" || p.kernel.w * p.kernel.h >= 49);
  if (p.planes == 0) throw OptionError("planes", "conv: planes=0 filters nothing");
  return p;
}

void register_conv_stage(Registry& reg) {
  StageInfo s;
  s.name = "conv";
  s.aliases = {"convolution"};
  s.summary = "convolution with the kernel in constant memory: presets, inline, file; up to 31x31";
  s.description =
      "Correlates each selected plane with a kernel (not flipped, as FFmpeg and OpenCV), "
      "multiplies by rdiv, adds bias, rounds half up and clamps to 0..255. float32 fused "
      "multiply-add in a fixed order, identical on CPU and GPU; rank-1 kernels of 7x7 and up "
      "run as two 1-D passes (within 1 level of the 2-D result). Taps live in CUDA constant "
      "memory, one bank per frame in flight (docs/conv.md). 16-bit frames (10-bit video) are "
      "filtered at 16 bits and clamped to 0..65535; bias and value stay on the 8-bit scale.";
  s.options = conv_options();
  s.formats = {PixelFormat::GRAY8,  PixelFormat::YUV420P,   PixelFormat::YUV444P,
               PixelFormat::GRAY16, PixelFormat::YUV420P16, PixelFormat::YUV444P16};
  s.cuda = true;
  // The display's keys step through the preset table; the preset's own size, sigma, amount,
  // direction, file, rdiv, bias and separability go back to their defaults.
  s.live.option = "kernel";
  s.live.step = LiveParam::Step::Cycle;
  for (const ConvPreset& p : conv_presets()) s.live.values.push_back(p.name);
  s.live.resets = {"size", "sigma", "amount", "dir", "file", "rdiv", "bias", "separable"};
  s.examples = {"conv=gauss:size=7",
                "conv=kernel=1 2 1 2 4 2 1 2 1",
                "conv=sobel:dir=y:bias=128",
                "conv=sharpen:amount=0.5:planes=1",
                "conv=file=kernel.txt:border=replicate",
                "conv=box:size=31x9"};
  s.create = [](const Options& o) {
    bool sep = false;
    ConvParams p = conv_params_from_options(o, &sep);
    return std::make_unique<ConvStage>(std::move(p), sep);
  };
  reg.add(std::move(s));
}

}  // namespace vfp
