// Convolution kernels (presets, inline taps, files) and the CPU reference (cpu/conv.hpp).
#include "cpu/conv.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/parallel.hpp"

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

void conv_check_size(int w, int h, const char* option) {
  if (w < 1 || h < 1 || w % 2 == 0 || h % 2 == 0)
    throw OptionError(option, log::format("conv: kernel size %dx%d must be odd in both directions "
                                          "(1, 3, 5, ...)",
                                          w, h));
  if (w > kConvMaxSize || h > kConvMaxSize)
    throw OptionError(
        option, log::format("conv: kernel size %dx%d exceeds the maximum %dx%d", w, h, kConvMaxSize, kConvMaxSize));
}

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

namespace {
// Sizes: w, h = 0 take the preset's default size.
void default_size(ConvPresetArgs& a, int n) {
  if (a.w == 0) a.w = a.h = n;
  conv_check_size(a.w, a.h, "size");
}
void fixed3(const ConvPresetArgs& a, const char* name) {
  if ((a.w != 0 && a.w != 3) || (a.h != 0 && a.h != 3))
    throw OptionError("size", std::string("conv: preset '") + name + "' is 3x3 only");
}
ConvKernel derivative(const ConvPresetArgs& a, std::vector<float> smooth, const char* name) {
  fixed3(a, name);
  std::vector<float> deriv{-1, 0, 1};
  ConvKernel k = a.dir == "y" ? from_factors(deriv, smooth, "") : from_factors(smooth, deriv, "");
  k.name = std::string(name) + " " + a.dir;
  return k;
}
}  // namespace

const std::vector<ConvPreset>& conv_presets() {
  static const std::vector<ConvPreset> table = {
      {"identity", "",
       [](ConvPresetArgs a) {
         default_size(a, 3);
         std::vector<float> t(static_cast<size_t>(a.w) * a.h, 0.f);
         t[static_cast<size_t>(a.h / 2) * a.w + a.w / 2] = 1.f;
         return from_taps(a.w, a.h, t, log::format("identity %dx%d", a.w, a.h));
       }},
      {"box", "",
       [](ConvPresetArgs a) {
         default_size(a, 3);
         return from_factors(std::vector<float>(static_cast<size_t>(a.h), 1.f),
                             std::vector<float>(static_cast<size_t>(a.w), 1.f), log::format("box %dx%d", a.w, a.h));
       }},
      {"gauss", "gaussian",
       [](ConvPresetArgs a) {
         default_size(a, 5);
         return from_factors(
             gauss1d(a.h, a.sigma), gauss1d(a.w, a.sigma),
             log::format("gauss %dx%d sigma %s", a.w, a.h, a.sigma > 0 ? log::format("%g", a.sigma).c_str() : "auto"));
       }},
      {"sharpen", "",
       [](ConvPresetArgs a) {
         fixed3(a, "sharpen");
         const float m = static_cast<float>(a.amount);
         return from_taps(3, 3, {0, -m, 0, -m, 1 + 4 * m, -m, 0, -m, 0}, log::format("sharpen %g", a.amount));
       }},
      {"unsharp", "",
       [](ConvPresetArgs a) {
         default_size(a, 5);
         const float m = static_cast<float>(a.amount);
         ConvKernel g = from_factors(gauss1d(a.h, a.sigma), gauss1d(a.w, a.sigma), "");
         std::vector<float> t(g.taps.size());
         for (size_t i = 0; i < t.size(); ++i) t[i] = -m * g.taps[i];
         t[static_cast<size_t>(a.h / 2) * a.w + a.w / 2] += 1 + m;
         return from_taps(a.w, a.h, t, log::format("unsharp %dx%d amount %g", a.w, a.h, a.amount));
       }},
      {"sobel", "",
       [](ConvPresetArgs a) {
         return derivative(a, {1, 2, 1}, "sobel");
       }},
      {"scharr", "",
       [](ConvPresetArgs a) {
         return derivative(a, {3, 10, 3}, "scharr");
       }},
      {"laplacian", "",
       [](ConvPresetArgs a) {
         fixed3(a, "laplacian");
         return from_taps(3, 3, {0, 1, 0, 1, -4, 1, 0, 1, 0}, "laplacian");
       }},
      {"emboss", "",
       [](ConvPresetArgs a) {
         fixed3(a, "emboss");
         return from_taps(3, 3, {-2, -1, 0, -1, 1, 1, 0, 1, 2}, "emboss");
       }},
      {"edge", "",
       [](ConvPresetArgs a) {
         fixed3(a, "edge");
         return from_taps(3, 3, {-1, -1, -1, -1, 8, -1, -1, -1, -1}, "edge");
       }},
  };
  return table;
}

std::string conv_preset_names(const char* sep) {
  std::string r;
  for (const ConvPreset& p : conv_presets()) r += (r.empty() ? "" : sep) + std::string(p.name);
  return r;
}

ConvKernel conv_preset(const std::string& name, int w, int h, double sigma, double amount, const std::string& dir) {
  for (const ConvPreset& p : conv_presets())
    if (name == p.name || name == p.alias) return p.make({w, h, sigma, amount, dir});
  throw OptionError("kernel", "conv: unknown kernel preset '" + name + "' (presets: " + conv_preset_names(", ") +
                                  "; or inline taps such as '1 2 1 2 4 2 1 2 1', or file=PATH)");
}

ConvKernel conv_parse_taps(const std::string& text, int w, int h) {
  std::vector<std::string> tok = split_taps(text);
  std::vector<float> taps;
  for (size_t i = 0; i < tok.size(); ++i) {
    float v;
    if (!parse_float(tok[i], &v))
      throw OptionError("kernel",
                        log::format("conv: tap %zu ('%s') is not a number within +-1e9", i + 1, tok[i].c_str()));
    taps.push_back(v);
  }
  const int n = static_cast<int>(taps.size());
  if (w == 0) {
    int side = static_cast<int>(std::lround(std::sqrt(static_cast<double>(n))));
    if (side * side != n)
      throw OptionError("kernel", log::format("conv: %d taps do not make a square kernel; give size=WxH", n));
    w = h = side;
  }
  conv_check_size(w, h, "kernel");
  if (n != w * h)
    throw OptionError("kernel", log::format("conv: a %dx%d kernel needs %d taps, got %d", w, h, w * h, n));
  return from_taps(w, h, taps, log::format("inline %dx%d", w, h));
}

ConvKernel conv_load_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw OptionError("file", "conv: cannot open kernel file '" + path + "': " + std::strerror(errno));
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw OptionError("file", "conv: kernel file '" + path + "' is a directory");
  // Read with a cap: a device (/dev/zero) or a wrong file must not be read whole.
  std::string text(kMaxKernelFileBytes + 1, '\0');
  f.read(&text[0], static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  if (text.size() > kMaxKernelFileBytes)
    throw OptionError("file",
                      log::format("conv: kernel file '%s' is larger than %zu KiB (a 31x31 kernel needs ~20 KiB)",
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
      throw OptionError(
          "file", log::format("conv: %s:%d: %zu taps, but the first row has %d", path.c_str(), lineno, tok.size(), w));
    ++h;
  }
  if (h == 0) throw OptionError("file", "conv: kernel file '" + path + "' has no taps");
  conv_check_size(w, h, "file");
  return from_taps(w, h, taps, log::format("file %s %dx%d", path.c_str(), w, h));
}

// ------------------------------------------------------------------ CPU reference
namespace {

template <typename T>
struct PlaneRef {
  const T* src;
  int spitch, w, h;  // spitch in bytes
};

// Border-resolved row pointers (nullptr: constant) and column indices (-1: constant).
template <typename T>
struct BorderMaps {
  std::vector<const T*> rows;  // index y + ay, for y in [-ay, h + ay)
  std::vector<int> cols;       // index x + ax
};

template <typename T>
BorderMaps<T> make_maps(const PlaneRef<T>& p, int ax, int ay, Border b) {
  BorderMaps<T> m;
  for (int y = -ay; y < p.h + ay; ++y) {
    const int gy = border_index(y, p.h, b);
    m.rows.push_back(gy < 0 ? nullptr
                            : reinterpret_cast<const T*>(reinterpret_cast<const uint8_t*>(p.src) +
                                                         static_cast<size_t>(gy) * p.spitch));
  }
  for (int x = -ax; x < p.w + ax; ++x) m.cols.push_back(border_index(x, p.w, b));
  return m;
}

template <typename T>
T* out_row(T* dst, int dpitch, int y) {
  return reinterpret_cast<T*>(reinterpret_cast<uint8_t*>(dst) + static_cast<size_t>(y) * dpitch);
}

// Round half up with one rounding: floor(fmaf(acc, rdiv, bias + 0.5)), where bias + 0.5 is
// rounded to float first; clamped to the samples' range, NaN (overflowing taps) to 0.
template <typename T>
inline T finish(float acc, const ConvParams& p) {
  constexpr float kMax = sizeof(T) == 1 ? 255.f : 65535.f;
  const float v = std::floor(__builtin_fmaf(acc, p.rdiv, p.rounding_bias()));
  return static_cast<T>(v >= 0.f ? (v > kMax ? kMax : v) : 0.f);
}

template <typename T>
inline float px(const BorderMaps<T>& m, int row, int col, int value) {
  const T* r = m.rows[static_cast<size_t>(row)];
  const int c = m.cols[static_cast<size_t>(col)];
  return (r && c >= 0) ? static_cast<float>(r[c]) : static_cast<float>(value);
}

// The loops over a range of rows, written once; compiled twice below (with and without FMA
// instructions) — __builtin_fmaf is a correctly rounded fused multiply-add either way. Every
// output row depends only on the input, so stripes of rows run in parallel on the CPU pool
// and give the same bytes as one loop.
template <typename T>
inline __attribute__((always_inline)) void conv2d_rows(const BorderMaps<T>& m, const PlaneRef<T>& pl, T* dst,
                                                       int dpitch, const ConvParams& p, int y0, int y1) {
  const ConvKernel& k = p.kernel;
  for (int y = y0; y < y1; ++y)
    for (int x = 0; x < pl.w; ++x) {
      float acc = 0.f;
      for (int ky = 0; ky < k.h; ++ky)
        for (int kx = 0; kx < k.w; ++kx)
          acc = __builtin_fmaf(k.taps[static_cast<size_t>(ky) * k.w + kx], px(m, y + ky, x + kx, p.value), acc);
      out_row(dst, dpitch, y)[x] = finish<T>(acc, p);
    }
}

// Separable, horizontal pass: rows [r0, r1) of the (border-resolved) rows the vertical pass
// reads into t.
template <typename T>
inline __attribute__((always_inline)) void sep_rows_h(const BorderMaps<T>& m, const PlaneRef<T>& pl, float* t,
                                                      const ConvParams& p, int r0, int r1) {
  const ConvKernel& k = p.kernel;
  for (int r = r0; r < r1; ++r)
    for (int x = 0; x < pl.w; ++x) {
      float acc = 0.f;
      for (int kx = 0; kx < k.w; ++kx)
        acc = __builtin_fmaf(k.row[static_cast<size_t>(kx)], px(m, r, x + kx, p.value), acc);
      t[static_cast<size_t>(r) * pl.w + x] = acc;
    }
}

// Separable, vertical pass: output rows [y0, y1) from t.
template <typename T>
inline __attribute__((always_inline)) void sep_rows_v(const float* t, int w, T* dst, int dpitch, const ConvParams& p,
                                                      int y0, int y1) {
  const ConvKernel& k = p.kernel;
  for (int y = y0; y < y1; ++y)
    for (int x = 0; x < w; ++x) {
      float acc = 0.f;
      for (int ky = 0; ky < k.h; ++ky)
        acc = __builtin_fmaf(k.col[static_cast<size_t>(ky)], t[static_cast<size_t>(y + ky) * w + x], acc);
      out_row(dst, dpitch, y)[x] = finish<T>(acc, p);
    }
}

#define VFP_CONV_VARIANTS(name, params, args)             \
  template <typename T>                                   \
  __attribute__((target("fma"))) void name##_fma params { \
    name args;                                            \
  }                                                       \
  template <typename T>                                   \
  void name##_plain params {                              \
    name args;                                            \
  }
VFP_CONV_VARIANTS(conv2d_rows,
                  (const BorderMaps<T>& m, const PlaneRef<T>& pl, T* d, int dp, const ConvParams& p, int y0, int y1),
                  (m, pl, d, dp, p, y0, y1))
VFP_CONV_VARIANTS(sep_rows_h,
                  (const BorderMaps<T>& m, const PlaneRef<T>& pl, float* t, const ConvParams& p, int r0, int r1),
                  (m, pl, t, p, r0, r1))
VFP_CONV_VARIANTS(sep_rows_v, (const float* t, int w, T* d, int dp, const ConvParams& p, int y0, int y1),
                  (t, w, d, dp, p, y0, y1))
#undef VFP_CONV_VARIANTS

bool cpu_has_fma() {
  static const bool has = __builtin_cpu_supports("fma");
  return has;
}

constexpr int kConvStripeRows = 8;

template <typename T>
void conv_plane(const T* src, int spitch, T* dst, int dpitch, int w, int h, const ConvParams& p) {
  const PlaneRef<T> pl{src, spitch, w, h};
  const BorderMaps<T> m = make_maps(pl, p.kernel.w / 2, p.kernel.h / 2, p.border);
  const bool fma = cpu_has_fma();
  parallel_rows(h, kConvStripeRows, [&](int y0, int y1) {
    if (fma)
      conv2d_rows_fma(m, pl, dst, dpitch, p, y0, y1);
    else
      conv2d_rows_plain(m, pl, dst, dpitch, p, y0, y1);
  });
}

template <typename T>
void conv_plane_separable(const T* src, int spitch, T* dst, int dpitch, int w, int h, const ConvParams& p,
                          std::vector<float>* scratch) {
  if (!p.kernel.separable) throw Error(ErrorKind::Internal, "conv: kernel is not separable");
  const PlaneRef<T> pl{src, spitch, w, h};
  const int ay = p.kernel.h / 2;
  const BorderMaps<T> m = make_maps(pl, p.kernel.w / 2, ay, p.border);
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

}  // namespace

void conv_plane_cpu(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const ConvParams& p) {
  conv_plane(src, spitch, dst, dpitch, w, h, p);
}
void conv_plane_cpu(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h, const ConvParams& p) {
  conv_plane(src, spitch, dst, dpitch, w, h, p);
}
void conv_plane_separable_cpu(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h,
                              const ConvParams& p, std::vector<float>* scratch) {
  conv_plane_separable(src, spitch, dst, dpitch, w, h, p, scratch);
}
void conv_plane_separable_cpu(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h,
                              const ConvParams& p, std::vector<float>* scratch) {
  conv_plane_separable(src, spitch, dst, dpitch, w, h, p, scratch);
}

}  // namespace vfp
