// The wavelet filter table, the CPU reference transform and shrinkage (cpu/wavelet.hpp).
#include "cpu/wavelet.hpp"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/parallel.hpp"

namespace vfp {

namespace {
const WaveletFilter kFilters[] = {
#include "cpu/wavelet_filters.inc"
};
constexpr int kWaveletStripeRows = 8;  // rows per task on the CPU pool

// n floats from `v` (grown, never shrunk), or from `own` when there is no scratch.
float* buffer(std::vector<float>* v, std::vector<float>& own, size_t n) {
  std::vector<float>& b = v ? *v : own;
  if (b.size() < n) b.resize(n);
  return b.data();
}
}  // namespace

const WaveletFilter* find_wavelet(const std::string& name) {
  const std::string n = name == "db1" ? "haar" : name == "bior4.4" ? "cdf97" : name;
  for (const auto& f : kFilters)
    if (n == f.name) return &f;
  return nullptr;
}

std::vector<std::string> wavelet_names() {
  std::vector<std::string> v;
  for (const auto& f : kFilters) v.emplace_back(f.name);
  return v;
}

int dwt_max_level(int n, int taps) {
  if (taps <= 1 || n < taps - 1) return 0;
  int level = 0;  // floor(log2(n / (taps - 1))) without floating point
  while ((static_cast<long long>(taps - 1) << (level + 1)) <= n) ++level;
  return level;
}

WaveletParams::WaveletParams() : wavelet(find_wavelet("db4")) {}

int WaveletParams::levels_for(int w, int h) const {
  const int max_level = std::min(dwt_max_level(w, wavelet->taps), dwt_max_level(h, wavelet->taps));
  if (levels == 0) return std::max(max_level - 3, 1);
  if (levels > std::max(max_level, 1))
    throw OptionError("levels", log::format("wavelet: levels=%d is more than a %dx%d plane allows with %s "
                                            "(%d taps): at most %d",
                                            levels, w, h, wavelet->name, wavelet->taps, std::max(max_level, 1)));
  return levels;
}

void dwt2_level_cpu(const float* in, int w, int h, int pitch, const WaveletFilter& f, WaveletBoundary b, float* aa,
                    float* da, float* ad, float* dd, WaveletScratch* scratch) {
  const int F = f.taps, s = dwt_analysis_shift(F, b);
  const int cw = dwt_length(w, F, b), ch = dwt_length(h, F, b);
  float lo[kWaveletMaxTaps], hi[kWaveletMaxTaps];
  for (int j = 0; j < F; ++j) {
    lo[j] = static_cast<float>(f.dec_lo[j]);
    hi[j] = static_cast<float>(f.dec_hi[j]);
  }
  // Rows: horizontal low / high pass with decimation.
  std::vector<float> ownL, ownH;
  float* L = buffer(scratch ? &scratch->L : nullptr, ownL, static_cast<size_t>(h) * cw);
  float* H = buffer(scratch ? &scratch->H : nullptr, ownH, static_cast<size_t>(h) * cw);
  std::vector<int> xmap(static_cast<size_t>(cw) * F);
  for (int c = 0; c < cw; ++c)
    for (int j = 0; j < F; ++j) xmap[static_cast<size_t>(c) * F + j] = dwt_sample_index(2 * c + s - j, w, b);
  // Every output row (and column-pass row) depends only on the pass's input: stripes of
  // rows run in parallel on the CPU pool and give the same floats as one loop.
  parallel_rows(h, kWaveletStripeRows, [&](int y0, int y1) {
    for (int y = y0; y < y1; ++y) {
      const float* row = in + static_cast<size_t>(y) * pitch;
      for (int c = 0; c < cw; ++c) {
        float l = 0.f, hh = 0.f;
        for (int j = 0; j < F; ++j) {
          const float v = row[xmap[static_cast<size_t>(c) * F + j]];
          l = mul_add(lo[j], v, l);
          hh = mul_add(hi[j], v, hh);
        }
        L[static_cast<size_t>(y) * cw + c] = l;
        H[static_cast<size_t>(y) * cw + c] = hh;
      }
    }
  });
  // Columns.
  parallel_rows(ch, kWaveletStripeRows, [&](int r0, int r1) {
    for (int r = r0; r < r1; ++r) {
      for (int c = 0; c < cw; ++c) {
        float a0 = 0.f, d0 = 0.f, a1 = 0.f, d1 = 0.f;
        for (int j = 0; j < F; ++j) {
          const size_t i = static_cast<size_t>(dwt_sample_index(2 * r + s - j, h, b)) * cw + c;
          a0 = mul_add(lo[j], L[i], a0);
          d0 = mul_add(hi[j], L[i], d0);
          a1 = mul_add(lo[j], H[i], a1);
          d1 = mul_add(hi[j], H[i], d1);
        }
        const size_t o = static_cast<size_t>(r) * cw + c;
        aa[o] = a0;
        da[o] = d0;
        ad[o] = a1;
        dd[o] = d1;
      }
    }
  });
}

void idwt2_level_cpu(const float* aa, const float* da, const float* ad, const float* dd, int cw, int ch,
                     const WaveletFilter& f, WaveletBoundary b, float* out, int w, int h, WaveletScratch* scratch) {
  const int F = f.taps, s2 = dwt_synthesis_shift(F, b);
  float lo[kWaveletMaxTaps], hi[kWaveletMaxTaps];
  for (int j = 0; j < F; ++j) {
    lo[j] = static_cast<float>(f.rec_lo[j]);
    hi[j] = static_cast<float>(f.rec_hi[j]);
  }
  // Columns: ch coefficient rows -> h rows of horizontal-low (L) and horizontal-high (H).
  std::vector<float> ownL, ownH;
  float* L = buffer(scratch ? &scratch->L : nullptr, ownL, static_cast<size_t>(h) * cw);
  float* H = buffer(scratch ? &scratch->H : nullptr, ownH, static_cast<size_t>(h) * cw);
  parallel_rows(h, kWaveletStripeRows, [&](int y0, int y1) {
    for (int y = y0; y < y1; ++y) {
      for (int c = 0; c < cw; ++c) {
        float l = 0.f, hh = 0.f;
        for (int m = (y + s2) & 1; m < F; m += 2) {
          const int k = idwt_coeff_index((y + s2 - m) / 2, ch, b);
          if (k < 0) continue;
          const size_t i = static_cast<size_t>(k) * cw + c;
          l = mul_add(aa[i], lo[m], l);
          l = mul_add(da[i], hi[m], l);
          hh = mul_add(ad[i], lo[m], hh);
          hh = mul_add(dd[i], hi[m], hh);
        }
        L[static_cast<size_t>(y) * cw + c] = l;
        H[static_cast<size_t>(y) * cw + c] = hh;
      }
    }
  });
  // Rows.
  parallel_rows(h, kWaveletStripeRows, [&](int y0, int y1) {
    for (int y = y0; y < y1; ++y) {
      const float* Lr = &L[static_cast<size_t>(y) * cw];
      const float* Hr = &H[static_cast<size_t>(y) * cw];
      for (int x = 0; x < w; ++x) {
        float v = 0.f;
        for (int m = (x + s2) & 1; m < F; m += 2) {
          const int k = idwt_coeff_index((x + s2 - m) / 2, cw, b);
          if (k < 0) continue;
          v = mul_add(Lr[k], lo[m], v);
          v = mul_add(Hr[k], hi[m], v);
        }
        out[static_cast<size_t>(y) * w + x] = v;
      }
    }
  });
}

void wavedec2_cpu(const float* img, int w, int h, int pitch, const WaveletFilter& f, WaveletBoundary b, int levels,
                  WaveletCoeffs& c, WaveletScratch* scratch) {
  c.geom = dwt_geometry(w, h, f.taps, b, levels);
  const size_t L = c.geom.size();
  c.da.resize(L);
  c.ad.resize(L);
  c.dd.resize(L);
  std::vector<float> own[2];
  const float* in = img;
  int ipitch = pitch;
  for (size_t l = 0; l < L; ++l) {
    const DwtLevel& g = c.geom[l];
    const size_t n = static_cast<size_t>(g.cw) * g.ch;
    c.da[l].resize(n);
    c.ad[l].resize(n);
    c.dd[l].resize(n);
    // The approximation of an inner level goes to alternating temporaries, the last one
    // to c.approx.
    float* aa;
    if (l + 1 == L) {
      c.approx.resize(n);
      aa = c.approx.data();
    } else {
      aa = buffer(scratch ? (l % 2 ? &scratch->pong : &scratch->ping) : nullptr, own[l % 2], n);
    }
    dwt2_level_cpu(in, g.w, g.h, ipitch, f, b, aa, c.da[l].data(), c.ad[l].data(), c.dd[l].data(), scratch);
    in = aa;
    ipitch = g.cw;
  }
}

WaveletCoeffs wavedec2_cpu(const float* img, int w, int h, int pitch, const WaveletFilter& f, WaveletBoundary b,
                           int levels) {
  WaveletCoeffs c;
  wavedec2_cpu(img, w, h, pitch, f, b, levels, c, nullptr);
  return c;
}

void waverec2_cpu(const WaveletCoeffs& c, const WaveletFilter& f, WaveletBoundary b, float* out,
                  WaveletScratch* scratch) {
  if (c.geom.empty()) {
    std::memcpy(out, c.approx.data(), c.approx.size() * sizeof(float));
    return;
  }
  std::vector<float> own[2];
  const float* a = c.approx.data();
  for (int l = static_cast<int>(c.geom.size()) - 1; l >= 0; --l) {
    const DwtLevel& g = c.geom[static_cast<size_t>(l)];
    // Inner levels into alternating temporaries, the finest straight into `out`.
    float* next = l == 0 ? out
                         : buffer(scratch ? (l % 2 ? &scratch->pong : &scratch->ping) : nullptr, own[l % 2],
                                  static_cast<size_t>(g.w) * g.h);
    idwt2_level_cpu(a, c.da[static_cast<size_t>(l)].data(), c.ad[static_cast<size_t>(l)].data(),
                    c.dd[static_cast<size_t>(l)].data(), g.cw, g.ch, f, b, next, g.w, g.h, scratch);
    a = next;
  }
}

namespace {
// The k-th smallest (from 0) of |d[i]|: the value std::nth_element would place at k.
// Non-negative floats order as their bit patterns, so a radix select over the bits (11, 11
// and 10 at a time) finds it exactly in three passes; each pass counts its histogram in
// parallel on the CPU pool (chunks add their counts into one table).
float kth_smallest_abs(const float* d, size_t n, size_t k) {
  static constexpr int kShift[3] = {21, 10, 0}, kBits[3] = {11, 11, 10};
  constexpr size_t kChunk = 1 << 16;
  const int chunks = static_cast<int>((n + kChunk - 1) / kChunk);
  uint32_t prefix = 0, mask = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const uint32_t bins = 1u << kBits[pass], sh = static_cast<uint32_t>(kShift[pass]);
    std::vector<std::atomic<size_t>> hist(bins);
    parallel_rows(chunks, 1, [&](int c0, int c1) {
      std::vector<size_t> local(bins, 0);
      const size_t end = std::min(n, static_cast<size_t>(c1) * kChunk);
      for (size_t i = static_cast<size_t>(c0) * kChunk; i < end; ++i) {
        uint32_t u;
        std::memcpy(&u, &d[i], 4);
        u &= 0x7fffffffu;  // |x|
        if ((u & mask) == prefix) ++local[(u >> sh) & (bins - 1)];
      }
      for (uint32_t b = 0; b < bins; ++b)
        if (local[b]) hist[b].fetch_add(local[b], std::memory_order_relaxed);
    });
    uint32_t b = 0;
    for (size_t seen = 0;; ++b) {
      const size_t c = hist[b].load(std::memory_order_relaxed);
      if (seen + c > k) {
        k -= seen;
        break;
      }
      seen += c;
    }
    prefix |= b << sh;
    mask |= (bins - 1) << sh;
  }
  float v;
  std::memcpy(&v, &prefix, 4);
  return v;
}
}  // namespace

double estimate_sigma_mad(const float* d, size_t n) {
  if (n == 0) return 0.0;
  const size_t lo = (n - 1) / 2;
  double med = kth_smallest_abs(d, n, lo);
  if (n % 2 == 0) med = (med + kth_smallest_abs(d, n, lo + 1)) / 2.0;
  return med / kMadToSigma;
}

WaveletThresholds wavelet_thresholds_cpu(const WaveletCoeffs& c, const WaveletParams& p, int w, int h) {
  WaveletThresholds r;
  r.sigma = p.sigma > 0 ? p.sigma : estimate_sigma_mad(c.dd[0].data(), c.dd[0].size());
  const double var = r.sigma * r.sigma;
  // One threshold per band; the bands run in parallel, each band's sum in its own order.
  r.t.assign(c.geom.size() * 3, 0.f);
  parallel_rows(static_cast<int>(r.t.size()), 1, [&](int b0, int b1) {
    for (int bi = b0; bi < b1; ++bi) {
      const size_t l = static_cast<size_t>(bi / 3);
      const std::vector<float>* band = bi % 3 == 0 ? &c.da[l] : bi % 3 == 1 ? &c.ad[l] : &c.dd[l];
      double t = 0;
      switch (p.method) {
        case ShrinkMethod::Fixed:
          t = p.threshold;
          break;
        case ShrinkMethod::VisuShrink:
          t = r.sigma * std::sqrt(2.0 * std::log(static_cast<double>(w) * h));
          break;
        case ShrinkMethod::BayesShrink: {
          double sum = 0;
          for (float x : *band) sum += static_cast<double>(x) * x;
          const double dvar = sum / static_cast<double>(band->size());
          t = var / std::sqrt(std::max(dvar - var, static_cast<double>(FLT_EPSILON)));
          break;
        }
      }
      r.t[static_cast<size_t>(bi)] = static_cast<float>(std::min(t, static_cast<double>(FLT_MAX)));
    }
  });
  return r;
}

namespace {
float load_sample(uint8_t v) { return v; }
float load_sample(uint16_t v) { return wavelet_load16(v); }
void store_sample(uint8_t* d, float v) { *d = wavelet_quantise(v); }
void store_sample(uint16_t* d, float v) { *d = wavelet_quantise16(v); }

template <typename T>
WaveletThresholds denoise_plane(const T* src, int spitch, T* dst, int dpitch, int w, int h, const WaveletParams& p,
                                WaveletScratch* scratch) {
  spitch /= static_cast<int>(sizeof(T));  // bytes -> samples
  dpitch /= static_cast<int>(sizeof(T));
  const int levels = p.levels_for(w, h);
  std::vector<float> own_img;
  float* img = buffer(scratch ? &scratch->img : nullptr, own_img, static_cast<size_t>(w) * h);
  WaveletCoeffs own_coeffs;
  WaveletCoeffs& c = scratch ? scratch->coeffs : own_coeffs;
  parallel_rows(h, kWaveletStripeRows, [&](int y0, int y1) {
    for (int y = y0; y < y1; ++y)
      for (int x = 0; x < w; ++x)
        img[static_cast<size_t>(y) * w + x] = load_sample(src[static_cast<size_t>(y) * spitch + x]);
  });
  wavedec2_cpu(img, w, h, w, *p.wavelet, p.boundary, levels, c, scratch);
  WaveletThresholds t = wavelet_thresholds_cpu(c, p, w, h);
  const float pct = static_cast<float>(p.percent / 100.0);
  for (size_t l = 0; l < c.geom.size(); ++l) {
    std::vector<float>* bands[3] = {&c.da[l], &c.ad[l], &c.dd[l]};
    const int rows = c.geom[l].ch, cols = c.geom[l].cw;
    for (int bi = 0; bi < 3; ++bi) {
      float* band = bands[bi]->data();
      const float th = t.t[l * 3 + static_cast<size_t>(bi)];
      parallel_rows(rows, kWaveletStripeRows, [&](int r0, int r1) {
        for (size_t i = static_cast<size_t>(r0) * cols; i < static_cast<size_t>(r1) * cols; ++i)
          band[i] = wavelet_shrink(band[i], th, p.mode, pct);
      });
    }
  }
  waverec2_cpu(c, *p.wavelet, p.boundary, img, scratch);
  parallel_rows(h, kWaveletStripeRows, [&](int y0, int y1) {
    for (int y = y0; y < y1; ++y)
      for (int x = 0; x < w; ++x)
        store_sample(&dst[static_cast<size_t>(y) * dpitch + x], img[static_cast<size_t>(y) * w + x]);
  });
  return t;
}
}  // namespace

WaveletThresholds wavelet_denoise_plane_cpu(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h,
                                            const WaveletParams& p, WaveletScratch* scratch) {
  return denoise_plane(src, spitch, dst, dpitch, w, h, p, scratch);
}
WaveletThresholds wavelet_denoise_plane_cpu(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h,
                                            const WaveletParams& p, WaveletScratch* scratch) {
  return denoise_plane(src, spitch, dst, dpitch, w, h, p, scratch);
}

}  // namespace vfp
