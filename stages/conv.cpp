// `conv` stage: kernels (inline, file, presets), the CPU reference, registration.
// CUDA kernels: cuda/conv.cu.
#include "stages/conv.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "pipeline/error.hpp"
#include "pipeline/log.hpp"
#include "pipeline/parallel.hpp"
#include "pipeline/registry.hpp"
#include "stages/builtin.hpp"
#include "stages/planar.hpp"
#if VFPIPE_HAVE_CUDA
#include "cuda/conv.hpp"
#endif

namespace vfp {

double ConvKernel::sum() const {
  double s = 0;
  for (float t : taps) s += t;
  return s;
}

namespace {

ConvKernel from_factors(std::vector<float> col, std::vector<float> row, std::string name) {
  ConvKernel k;
  k.w = static_cast<int>(row.size());
  k.h = static_cast<int>(col.size());
  k.taps.resize(static_cast<size_t>(k.w) * k.h);
  for (int y = 0; y < k.h; ++y)
    for (int x = 0; x < k.w; ++x) k.taps[static_cast<size_t>(y) * k.w + x] = col[y] * row[x];
  k.separable = true;
  k.row = std::move(row);
  k.col = std::move(col);
  k.name = std::move(name);
  return k;
}

ConvKernel from_taps(int w, int h, std::vector<float> taps, std::string name) {
  ConvKernel k;
  k.w = w;
  k.h = h;
  k.taps = std::move(taps);
  k.name = std::move(name);
  conv_detect_separable(k);
  return k;
}

std::vector<float> gauss1d(int n, double sigma) {
  if (sigma <= 0) sigma = 0.3 * ((n - 1) * 0.5 - 1) + 0.8;  // OpenCV's default for a size
  std::vector<double> g(static_cast<size_t>(n));
  double s = 0;
  for (int i = 0; i < n; ++i) {
    const double d = i - (n - 1) / 2.0;
    g[static_cast<size_t>(i)] = std::exp(-d * d / (2 * sigma * sigma));
    s += g[static_cast<size_t>(i)];
  }
  std::vector<float> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<float>(g[static_cast<size_t>(i)] / s);
  return out;
}

void check_size(int w, int h, const char* option) {
  if (w < 1 || h < 1 || w % 2 == 0 || h % 2 == 0)
    throw OptionError(option, log::format("conv: kernel size %dx%d must be odd in both directions "
                                          "(1, 3, 5, ...)", w, h));
  if (w > kConvMaxSize || h > kConvMaxSize)
    throw OptionError(option, log::format("conv: kernel size %dx%d exceeds the maximum %dx%d", w, h,
                                          kConvMaxSize, kConvMaxSize));
}

constexpr double kMaxTap = 1e9;
constexpr size_t kMaxKernelFileBytes = 64 * 1024;  // a 31x31 kernel in text is ~20 KiB

bool parse_float(const std::string& s, float* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  // Beyond 1e9 a tap only overflows the float sums (1e308 became inf, then zeros).
  if (*end != '\0' || errno == ERANGE || !std::isfinite(v) || std::fabs(v) > kMaxTap) return false;
  *out = static_cast<float>(v);
  return true;
}

std::vector<std::string> split_taps(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == ',' || c == ';') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

}  // namespace

void conv_detect_separable(ConvKernel& k) {
  // Rank 1 <=> every tap equals col[y] * row[x] with row/col taken through the largest tap.
  size_t piv = 0;
  for (size_t i = 0; i < k.taps.size(); ++i)
    if (std::fabs(k.taps[i]) > std::fabs(k.taps[piv])) piv = i;
  const float pv = k.taps[piv];
  k.separable = false;
  if (pv == 0.f || (k.w == 1 && k.h == 1)) return;
  const int py = static_cast<int>(piv) / k.w, px = static_cast<int>(piv) % k.w;
  std::vector<float> row(static_cast<size_t>(k.w)), col(static_cast<size_t>(k.h));
  for (int x = 0; x < k.w; ++x) row[static_cast<size_t>(x)] = k.taps[static_cast<size_t>(py) * k.w + x] / pv;
  for (int y = 0; y < k.h; ++y) col[static_cast<size_t>(y)] = k.taps[static_cast<size_t>(y) * k.w + px];
  const float tol = 1e-6f * std::fabs(pv);
  for (int y = 0; y < k.h; ++y)
    for (int x = 0; x < k.w; ++x)
      if (std::fabs(col[static_cast<size_t>(y)] * row[static_cast<size_t>(x)] -
                    k.taps[static_cast<size_t>(y) * k.w + x]) > tol)
        return;
  k.separable = true;
  k.row = std::move(row);
  k.col = std::move(col);
}

ConvKernel conv_preset(const std::string& name, int w, int h, double sigma, double amount,
                       const std::string& dir) {
  auto fixed3 = [&](const char* n) {
    if ((w != 0 && w != 3) || (h != 0 && h != 3))
      throw OptionError("size", std::string("conv: preset '") + n + "' is 3x3 only");
  };
  const float a = static_cast<float>(amount);
  if (name == "identity") {
    if (w == 0) w = h = 3;
    check_size(w, h, "size");
    std::vector<float> t(static_cast<size_t>(w) * h, 0.f);
    t[static_cast<size_t>(h / 2) * w + w / 2] = 1.f;
    return from_taps(w, h, t, log::format("identity %dx%d", w, h));
  }
  if (name == "box") {
    if (w == 0) w = h = 3;
    check_size(w, h, "size");
    return from_factors(std::vector<float>(static_cast<size_t>(h), 1.f),
                        std::vector<float>(static_cast<size_t>(w), 1.f), log::format("box %dx%d", w, h));
  }
  if (name == "gauss" || name == "gaussian") {
    if (w == 0) w = h = 5;
    check_size(w, h, "size");
    return from_factors(gauss1d(h, sigma), gauss1d(w, sigma),
                        log::format("gauss %dx%d sigma %s", w, h, sigma > 0 ? log::format("%g", sigma).c_str() : "auto"));
  }
  if (name == "sharpen") {
    fixed3("sharpen");
    return from_taps(3, 3, {0, -a, 0, -a, 1 + 4 * a, -a, 0, -a, 0}, log::format("sharpen %g", amount));
  }
  if (name == "unsharp") {
    if (w == 0) w = h = 5;
    check_size(w, h, "size");
    ConvKernel g = from_factors(gauss1d(h, sigma), gauss1d(w, sigma), "");
    std::vector<float> t(g.taps.size());
    for (size_t i = 0; i < t.size(); ++i) t[i] = -a * g.taps[i];
    t[static_cast<size_t>(h / 2) * w + w / 2] += 1 + a;
    return from_taps(w, h, t, log::format("unsharp %dx%d amount %g", w, h, amount));
  }
  if (name == "sobel" || name == "scharr") {
    fixed3(name.c_str());
    std::vector<float> smooth = name == "sobel" ? std::vector<float>{1, 2, 1} : std::vector<float>{3, 10, 3};
    std::vector<float> deriv{-1, 0, 1};
    ConvKernel k = dir == "y" ? from_factors(deriv, smooth, "") : from_factors(smooth, deriv, "");
    k.name = name + " " + dir;
    return k;
  }
  if (name == "laplacian") {
    fixed3("laplacian");
    return from_taps(3, 3, {0, 1, 0, 1, -4, 1, 0, 1, 0}, "laplacian");
  }
  if (name == "emboss") {
    fixed3("emboss");
    return from_taps(3, 3, {-2, -1, 0, -1, 1, 1, 0, 1, 2}, "emboss");
  }
  if (name == "edge") {
    fixed3("edge");
    return from_taps(3, 3, {-1, -1, -1, -1, 8, -1, -1, -1, -1}, "edge");
  }
  throw OptionError("kernel", "conv: unknown kernel preset '" + name +
                                  "' (presets: identity, box, gauss, sharpen, unsharp, sobel, "
                                  "scharr, laplacian, emboss, edge; or inline taps such as "
                                  "'1 2 1 2 4 2 1 2 1', or file=PATH)");
}

ConvKernel conv_parse_taps(const std::string& text, int w, int h) {
  std::vector<std::string> tok = split_taps(text);
  std::vector<float> taps;
  for (size_t i = 0; i < tok.size(); ++i) {
    float v;
    if (!parse_float(tok[i], &v))
      throw OptionError("kernel", log::format("conv: tap %zu ('%s') is not a number within +-1e9", i + 1, tok[i].c_str()));
    taps.push_back(v);
  }
  const int n = static_cast<int>(taps.size());
  if (w == 0) {
    int side = static_cast<int>(std::lround(std::sqrt(static_cast<double>(n))));
    if (side * side != n)
      throw OptionError("kernel", log::format("conv: %d taps do not make a square kernel; give size=WxH", n));
    w = h = side;
  }
  check_size(w, h, "kernel");
  if (n != w * h)
    throw OptionError("kernel", log::format("conv: a %dx%d kernel needs %d taps, got %d", w, h, w * h, n));
  return from_taps(w, h, taps, log::format("inline %dx%d", w, h));
}

ConvKernel conv_load_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw OptionError("file", "conv: cannot open kernel file '" + path + "': " + std::strerror(errno));
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw OptionError("file", "conv: kernel file '" + path + "' is a directory");
  // Read with a cap: a device (/dev/zero) or a wrong file must not be read whole.
  std::string text(kMaxKernelFileBytes + 1, '\0');
  f.read(&text[0], static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  if (text.size() > kMaxKernelFileBytes)
    throw OptionError("file", log::format("conv: kernel file '%s' is larger than %zu KiB (a 31x31 kernel needs ~20 KiB)",
                                          path.c_str(), kMaxKernelFileBytes / 1024));
  std::istringstream in(text);
  std::vector<float> taps;
  int w = -1, h = 0, lineno = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++lineno;
    size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::vector<std::string> tok = split_taps(line);
    if (tok.empty()) continue;
    for (const auto& t : tok) {
      float v;
      if (!parse_float(t, &v))
        throw OptionError("file", log::format("conv: %s:%d: '%s' is not a number within +-1e9", path.c_str(), lineno,
                                              t.substr(0, 40).c_str()));
      taps.push_back(v);
    }
    if (w < 0) w = static_cast<int>(tok.size());
    if (static_cast<int>(tok.size()) != w)
      throw OptionError("file", log::format("conv: %s:%d: %zu taps, but the first row has %d", path.c_str(),
                                            lineno, tok.size(), w));
    ++h;
  }
  if (h == 0) throw OptionError("file", "conv: kernel file '" + path + "' has no taps");
  check_size(w, h, "file");
  return from_taps(w, h, taps, log::format("file %s %dx%d", path.c_str(), w, h));
}

// ------------------------------------------------------------------ CPU reference
namespace {

struct PlaneRef {
  const uint8_t* src;
  int spitch, w, h;
};

// Border-resolved row pointers (nullptr: constant) and column indices (-1: constant).
struct BorderMaps {
  std::vector<const uint8_t*> rows;  // index y + ay, for y in [-ay, h + ay)
  std::vector<int> cols;             // index x + ax
};

BorderMaps make_maps(const PlaneRef& p, int ax, int ay, Border b) {
  BorderMaps m;
  for (int y = -ay; y < p.h + ay; ++y) {
    const int gy = border_index(y, p.h, b);
    m.rows.push_back(gy < 0 ? nullptr : p.src + static_cast<size_t>(gy) * p.spitch);
  }
  for (int x = -ax; x < p.w + ax; ++x) m.cols.push_back(border_index(x, p.w, b));
  return m;
}

// Round half up with one rounding: floor(fmaf(acc, rdiv, bias + 0.5)), where bias + 0.5 is
// rounded to float first; clamped to 0..255, NaN (overflowing taps) to 0.
inline uint8_t finish(float acc, const ConvParams& p) {
  const float v = std::floor(__builtin_fmaf(acc, p.rdiv, p.rounding_bias()));
  return static_cast<uint8_t>(v >= 0.f ? (v > 255.f ? 255.f : v) : 0.f);
}

inline float px(const BorderMaps& m, int row, int col, int value) {
  const uint8_t* r = m.rows[static_cast<size_t>(row)];
  const int c = m.cols[static_cast<size_t>(col)];
  return (r && c >= 0) ? static_cast<float>(r[c]) : static_cast<float>(value);
}

// The loops over a range of rows, written once; compiled twice below (with and without FMA
// instructions) — __builtin_fmaf is a correctly rounded fused multiply-add either way. Every
// output row depends only on the input, so stripes of rows run in parallel on the CPU pool
// and give the same bytes as one loop.
inline __attribute__((always_inline)) void conv2d_rows(const BorderMaps& m, const PlaneRef& pl, uint8_t* dst,
                                                       int dpitch, const ConvParams& p, int y0, int y1) {
  const ConvKernel& k = p.kernel;
  for (int y = y0; y < y1; ++y)
    for (int x = 0; x < pl.w; ++x) {
      float acc = 0.f;
      for (int ky = 0; ky < k.h; ++ky)
        for (int kx = 0; kx < k.w; ++kx)
          acc = __builtin_fmaf(k.taps[static_cast<size_t>(ky) * k.w + kx], px(m, y + ky, x + kx, p.value), acc);
      dst[static_cast<size_t>(y) * dpitch + x] = finish(acc, p);
    }
}

// Separable, horizontal pass: rows [r0, r1) of the (border-resolved) rows the vertical pass
// reads into t.
inline __attribute__((always_inline)) void sep_rows_h(const BorderMaps& m, const PlaneRef& pl, float* t,
                                                      const ConvParams& p, int r0, int r1) {
  const ConvKernel& k = p.kernel;
  for (int r = r0; r < r1; ++r)
    for (int x = 0; x < pl.w; ++x) {
      float acc = 0.f;
      for (int kx = 0; kx < k.w; ++kx) acc = __builtin_fmaf(k.row[static_cast<size_t>(kx)], px(m, r, x + kx, p.value), acc);
      t[static_cast<size_t>(r) * pl.w + x] = acc;
    }
}

// Separable, vertical pass: output rows [y0, y1) from t.
inline __attribute__((always_inline)) void sep_rows_v(const float* t, int w, uint8_t* dst, int dpitch,
                                                      const ConvParams& p, int y0, int y1) {
  const ConvKernel& k = p.kernel;
  for (int y = y0; y < y1; ++y)
    for (int x = 0; x < w; ++x) {
      float acc = 0.f;
      for (int ky = 0; ky < k.h; ++ky)
        acc = __builtin_fmaf(k.col[static_cast<size_t>(ky)], t[static_cast<size_t>(y + ky) * w + x], acc);
      dst[static_cast<size_t>(y) * dpitch + x] = finish(acc, p);
    }
}

#define VFP_CONV_VARIANTS(name, params, args)                        \
  __attribute__((target("fma"))) void name##_fma params { name args; } \
  void name##_plain params { name args; }
VFP_CONV_VARIANTS(conv2d_rows,
                  (const BorderMaps& m, const PlaneRef& pl, uint8_t* d, int dp, const ConvParams& p, int y0, int y1),
                  (m, pl, d, dp, p, y0, y1))
VFP_CONV_VARIANTS(sep_rows_h, (const BorderMaps& m, const PlaneRef& pl, float* t, const ConvParams& p, int r0, int r1),
                  (m, pl, t, p, r0, r1))
VFP_CONV_VARIANTS(sep_rows_v, (const float* t, int w, uint8_t* d, int dp, const ConvParams& p, int y0, int y1),
                  (t, w, d, dp, p, y0, y1))
#undef VFP_CONV_VARIANTS

bool cpu_has_fma() {
  static const bool has = __builtin_cpu_supports("fma");
  return has;
}

constexpr int kConvStripeRows = 8;

}  // namespace

void conv_plane_cpu(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h,
                    const ConvParams& p) {
  const PlaneRef pl{src, spitch, w, h};
  const BorderMaps m = make_maps(pl, p.kernel.w / 2, p.kernel.h / 2, p.border);
  const bool fma = cpu_has_fma();
  parallel_rows(h, kConvStripeRows, [&](int y0, int y1) {
    if (fma)
      conv2d_rows_fma(m, pl, dst, dpitch, p, y0, y1);
    else
      conv2d_rows_plain(m, pl, dst, dpitch, p, y0, y1);
  });
}

void conv_plane_separable_cpu(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w,
                              int h, const ConvParams& p, std::vector<float>* scratch) {
  if (!p.kernel.separable) throw Error(ErrorKind::Internal, "conv: kernel is not separable");
  const PlaneRef pl{src, spitch, w, h};
  const int ay = p.kernel.h / 2;
  const BorderMaps m = make_maps(pl, p.kernel.w / 2, ay, p.border);
  const bool fma = cpu_has_fma();
  // The intermediate rows: in the caller's scratch (kept across frames: a fresh, zeroed
  // plane-sized buffer per frame is serial work) or a local one.
  std::vector<float> own;
  std::vector<float>& t = scratch ? *scratch : own;
  const size_t need = static_cast<size_t>(h + 2 * ay) * w;
  if (t.size() < need) t.resize(need);
  parallel_rows(h + 2 * ay, kConvStripeRows, [&](int r0, int r1) {
    if (fma)
      sep_rows_h_fma(m, pl, t.data(), p, r0, r1);
    else
      sep_rows_h_plain(m, pl, t.data(), p, r0, r1);
  });
  parallel_rows(h, kConvStripeRows, [&](int y0, int y1) {
    if (fma)
      sep_rows_v_fma(t.data(), w, dst, dpitch, p, y0, y1);
    else
      sep_rows_v_plain(t.data(), w, dst, dpitch, p, y0, y1);
  });
}

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
    check_size(w, h, "size");
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
