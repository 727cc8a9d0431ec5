// `conv` stage: options, registration, CPU/CUDA dispatch. Reference and kernel builders:
// cpu/conv.cpp; CUDA kernels: cuda/conv.cu.
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

  FrameSpec configure(const FrameSpec& in) override { return check_planar_input("conv", in, p_.planes); }
  bool has_cuda() const override { return true; }
#if VFPIPE_HAVE_CUDA
  void prepare(Backend b, int slots) override {
    gpu_.reset();  // release this stage's banks before reserving again (re-prepared chain)
    if (b == Backend::CUDA) gpu_ = std::make_unique<cuda::ConvTaps>(slots);
  }
#endif

  void run_cpu(const ImageView& in, const ImageView& out, const StageContext&) override {
    for_each_plane_cpu(in, out, p_.planes, [&](const uint8_t* s, int sp, uint8_t* d, int dp, int w, int h, int pl) {
      if (separable_)
        conv_plane_separable_cpu(s, sp, d, dp, w, h, p_, &scratch_[static_cast<size_t>(pl)]);
      else
        conv_plane_cpu(s, sp, d, dp, w, h, p_);
    });
  }
#if VFPIPE_HAVE_CUDA
  void run_cuda(const ImageView& in, const ImageView& out, const StageContext& ctx) override {
    gpu_->use(p_, separable_, version_, ctx.slot, ctx.stream);  // stream-ordered, per slot
    for_each_plane_cuda(in, out, p_.planes, ctx.stream,
                        [&](const uint8_t* s, int sp, uint8_t* d, int dp, int w, int h) {
                          gpu_->run(s, sp, d, dp, w, h, ctx.slot, ctx.stream);
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
  std::string label() const override {
    return "conv(" + p_.kernel.name + (separable_ ? ", separable" : "") + ")";
  }

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

// Builds parameters from validated options (shared by the factory and live changes).
ConvParams conv_params_from_options(const Options& o, bool* use_separable) {
  ConvParams p;
  int w = 0, h = 0;
  const std::string size = o.str("size");
  if (!size.empty()) {
    char extra = 0;
    if (std::sscanf(size.c_str(), "%dx%d%c", &w, &h, &extra) != 2) {
      if (std::sscanf(size.c_str(), "%d%c", &w, &extra) != 1)
        throw OptionError("size", "conv: size must be N or WxH, got '" + size + "'");
      h = w;
    }
    conv_check_size(w, h, "size");
  }
  const std::string kern = o.str("kernel"), file = o.str("file");
  bool user_taps = false;
  if (!file.empty()) {
    if (o.is_explicit("kernel"))
      throw OptionError("file", "conv: give either kernel= or file=, not both");
    p.kernel = conv_load_file(file);
    user_taps = true;
  } else if (!kern.empty() && (std::isdigit(static_cast<unsigned char>(kern[0])) || kern[0] == '-' ||
                               kern[0] == '+' || kern[0] == '.')) {
    p.kernel = conv_parse_taps(kern, w, h);
    user_taps = true;
  } else {
    p.kernel = conv_preset(kern, w, h, o.number("sigma"), o.number("amount"), o.str("dir"));
  }
  const double sum = p.kernel.sum();
  const double rdiv = o.number("rdiv");
  if (rdiv != 0) {
    p.rdiv = static_cast<float>(rdiv);
  } else if (std::fabs(sum) > 1e-6) {
    p.rdiv = static_cast<float>(1.0 / sum);
  } else if (user_taps) {
    throw OptionError(file.empty() ? "kernel" : "file",
                      "conv: the kernel's taps sum to 0, so the default rdiv (1/sum) is undefined; "
                      "set rdiv (e.g. rdiv=1) and perhaps bias=128");
  } else {
    p.rdiv = 1.f;  // zero-sum presets (sobel, laplacian, edge): plain sum
  }
  p.bias = static_cast<float>(o.number("bias"));
  p.planes = static_cast<int>(o.integer("planes"));
  parse_border(o.str("border"), &p.border);
  p.value = static_cast<int>(o.integer("value"));
  const std::string sep = o.str("separable");
  if (sep == "on" && !p.kernel.separable)
    throw OptionError("separable", "conv: separable=on, but the " + p.kernel.name + " kernel is not rank 1");
  // Two passes pay off once the 2-D taps outnumber the two 1-D passes by enough
  // (docs/perf.md#convolution has the crossover); small kernels stay 2-D (bit-exact).
  *use_separable = p.kernel.separable && sep != "off" && (sep == "on" || p.kernel.w * p.kernel.h >= 49);
  if (p.planes == 0) throw OptionError("planes", "conv: planes=0 filters nothing");
  return p;
}

const std::vector<OptionSpec>& conv_options() {
  using T = OptionSpec::Type;
  static const std::vector<OptionSpec> opts = {
      {"kernel", T::String, "identity",
       "preset (identity box gauss sharpen unsharp sobel scharr laplacian emboss edge) or inline taps '1 2 1 2 4 2 1 2 1'",
       0, 0, {}, {"k", "preset"}, {"file"}},
      {"size", T::String, "", "kernel size N or WxH (odd, up to 31); presets default 3 (gauss/unsharp 5)", 0, 0, {}, {"s"}},
      {"sigma", T::Float, "0", "gauss/unsharp standard deviation; 0 = from the size", 0, 100, {}, {}},
      {"amount", T::Float, "1", "sharpen/unsharp strength", -100, 100, {}, {}},
      {"dir", T::Choice, "x", "sobel/scharr direction", 0, 0, {"x", "y"}, {}},
      {"file", T::String, "", "text file with one kernel row per line", 0, 0, {}, {}, {"kernel"}},
      {"rdiv", T::Float, "0", "multiply the sum by this; 0 = 1/sum of taps (1 for zero-sum presets)", -1e9, 1e9, {}, {}},
      {"bias", T::Float, "0", "add after rdiv (128 shows signed edges)", -1e9, 1e9, {}, {}},
      {"planes", T::Int, "15", "bit mask of planes to filter (others are copied)", 0, 15, {}, {}},
      {"border", T::Choice, "reflect101", "samples outside the frame", 0, 0,
       {"reflect101", "replicate", "reflect", "constant", "wrap"}, {}},
      {"value", T::Int, "0", "sample value outside the frame for border=constant", 0, 255, {}, {}},
      {"separable", T::Choice, "auto", "two 1-D passes: auto (rank-1 kernels of 7x7 and up), on, off", 0, 0,
       {"auto", "on", "off"}, {}},
  };
  return opts;
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
      "memory, one bank per frame in flight (docs/conv.md).";
  s.options = conv_options();
  s.formats = {PixelFormat::GRAY8, PixelFormat::YUV420P, PixelFormat::YUV444P};
  s.cuda = true;
  s.examples = {"conv=gauss:size=7", "conv=kernel=1 2 1 2 4 2 1 2 1", "conv=sobel:dir=y:bias=128",
                "conv=sharpen:amount=0.5:planes=1", "conv=file=kernel.txt:border=replicate",
                "conv=box:size=31x9"};
  s.create = [](const Options& o) {
    bool sep = false;
    ConvParams p = conv_params_from_options(o, &sep);
    return std::make_unique<ConvStage>(std::move(p), sep);
  };
  reg.add(std::move(s));
}

}  // namespace vfp
