// `format`: converts to a pixel format (FFmpeg's format filter). With a list
// (`format=pix_fmts=yuv420p|gray`) a frame already in one of the listed formats passes
// through, otherwise it is converted to the first. The chain builder also inserts this
// stage automatically before a stage that does not accept its input format.
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/registry.hpp"
#include "cpu/convert.hpp"
#include "stages/builtin.hpp"
#if VFPIPE_HAVE_CUDA
#include "cuda/kernels.hpp"
#endif

namespace vfp {

namespace {
class FormatStage final : public Stage {
 public:
  explicit FormatStage(std::vector<PixelFormat> targets) : targets_(std::move(targets)) {}

  FrameSpec configure(const FrameSpec& in) override {
    in_ = in;
    out_ = in;
    out_.format = targets_.front();
    for (PixelFormat f : targets_)
      if (f == in.format) out_.format = f;
    return out_;
  }
  bool passthrough() const override { return in_.format == out_.format; }
  void run_cpu(const ImageView& in, const ImageView& out, const StageContext&) override {
    convert_cpu(in, out, in_.color);
  }
#if VFPIPE_HAVE_CUDA
  void run_cuda(const ImageView& in, const ImageView& out, const StageContext& ctx) override {
    cuda::convert_async(in, out, ctx.stream, in_.color);
  }
#endif
  std::string label() const override {
    return log::format("format(%s->%s)", pix_fmt_name(in_.format), pix_fmt_name(out_.format));
  }

 private:
  std::vector<PixelFormat> targets_;
  FrameSpec in_, out_;
};

std::vector<PixelFormat> parse_list(const std::string& s) {
  std::vector<PixelFormat> out;
  size_t a = 0;
  while (a <= s.size()) {
    size_t b = s.find('|', a);
    if (b == std::string::npos) b = s.size();
    std::string name = s.substr(a, b - a);
    PixelFormat f;
    if (!parse_pix_fmt(name, &f))
      throw OptionError("pix_fmts",
                        "format: unsupported pixel format '" + name + "' (supported: " + pix_fmt_list() + ")");
    out.push_back(f);
    a = b + 1;
  }
  return out;
}

struct FormatSettings {
  std::string pix_fmts;
};

const OptionTable<FormatSettings>& format_options() {
  static const OptionTable<FormatSettings> table = [] {
    OptionTable<FormatSettings> t;  // a new output format would re-plan the chain: not live
    t.text("pix_fmts", &FormatSettings::pix_fmts, "yuv420p",
           "target format, or a '|'-separated list of acceptable formats")
        .aliases({"pix_fmt", "fmt"});
    return t;
  }();
  return table;
}
}  // namespace

std::unique_ptr<Stage> make_format_stage(PixelFormat target) {
  auto st = std::make_unique<FormatStage>(std::vector<PixelFormat>{target});
  st->set_info(registry().find("format"));
  Options o;
  o.set("pix_fmts", pix_fmt_name(target), true);
  st->set_options(o);
  return st;
}

void register_format_stage(Registry& reg) {
  StageInfo s;
  s.name = "format";
  s.aliases = {"convert"};
  s.summary = "convert to a pixel format (" + pix_fmt_list(8) + ", 16-bit gray/yuv)";
  s.description =
      "Converts frames to the first listed pixel format, unless they already are in one of "
      "the listed formats. BT.601 limited-range YUV, integer arithmetic identical on CPU and "
      "GPU; gray <-> YUV keeps the Y plane unchanged. 16-bit formats (gray16le, yuv420p16le, "
      "yuv444p16le) hold the 8-bit scale times 257 (docs/formats.md).";
  s.options = format_options().specs();
  s.formats = all_pixel_formats();
  s.cuda = true;
  s.examples = {"format=gray", "format=pix_fmts=yuv420p|yuv444p", "format=gray16le,wavelet=db4"};
  s.create = [](const Options& opts) {
    return std::make_unique<FormatStage>(parse_list(format_options().bind(opts).pix_fmts));
  };
  reg.add(std::move(s));
}

}  // namespace vfp
