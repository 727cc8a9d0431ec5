// Convolution (correlation, as FFmpeg's `convolution` and OpenCV's filter2D: the kernel is
// not flipped) with FFmpeg-style normalisation.
//
// Arithmetic (the CPU reference defines it; float32, fused multiply-add, fixed order):
//   acc = 0; for ky in 0..H-1: for kx in 0..W-1: acc = fmaf(k[ky][kx], s(x+kx-W/2, y+ky-H/2), acc)
//   out = clamp(floor(fmaf(acc, rdiv, bias + 0.5)), 0, 255)   (round half up, one rounding;
//         0..65535 for 16-bit samples;
//         bias + 0.5 is rounded to float first; NaN gives 0)
// Separable kernels (k = col * row, found by rank-1 factorisation or built that way) run
// as two passes with a float intermediate, each in the same fixed order:
//   t(x, y) = sum over kx of fmaf(row[kx], s(x+kx-W/2, y), .)   for every row y needed
//   acc     = sum over ky of fmaf(col[ky], t(x, y+ky-H/2), .)
// which differs from the 2-D sum only by float rounding: at most 1 level after rounding.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/frame.hpp"
#include "cpu/border.hpp"

namespace vfp {

constexpr int kConvMaxSize = 31;  // largest kernel width or height

struct ConvKernel {
  int w = 1, h = 1;
  std::vector<float> taps;  // h rows of w, row-major
  bool separable = false;
  std::vector<float> row, col;  // when separable: taps[y][x] ~= col[y] * row[x]
  std::string name;             // "gauss 7x7 sigma 1.4", "inline 3x3", ...
  double sum() const;
};

struct ConvParams {
  ConvKernel kernel;
  float rdiv = 1.f;
  float bias = 0.f;
  int planes = 0xF;
  Border border = Border::Reflect101;
  int value = 0;
  // bias + 0.5 rounded to float: the addend of the reference's one-rounding finish,
  // floor(fmaf(acc, rdiv, rounding_bias())), on the CPU and in the CUDA kernels alike.
  float rounding_bias() const { return bias + 0.5f; }
  // For 16-bit samples (the 8-bit scale x 257): `bias` and the constant border's `value`
  // are given on the 8-bit scale, so they are scaled; the taps and rdiv are ratios.
  ConvParams at_16_bits() const {
    ConvParams q = *this;
    q.bias = bias * 257.f;
    q.value = value * 257;
    return q;
  }
};

// The preset table: one row per named kernel. `make` builds it for the arguments; sizes
// w, h = 0 take the preset's default. Builders throw vfp::OptionError naming the option at fault.
struct ConvPresetArgs {
  int w = 0, h = 0;
  double sigma = 0;       // gauss/unsharp; 0 = from the size
  double amount = 1;      // sharpen/unsharp strength
  std::string dir = "x";  // sobel/scharr direction
};
struct ConvPreset {
  const char* name;
  const char* alias;  // "" for none
  ConvKernel (*make)(ConvPresetArgs args);
};
const std::vector<ConvPreset>& conv_presets();
std::string conv_preset_names(const char* sep);  // the names in table order

// Kernel builders.
ConvKernel conv_preset(const std::string& name, int w, int h, double sigma, double amount, const std::string& dir);
ConvKernel conv_parse_taps(const std::string& text, int w, int h);  // w,h = 0: square from count
ConvKernel conv_load_file(const std::string& path);
// Throws OptionError(option) unless w and h are odd and at most kConvMaxSize.
void conv_check_size(int w, int h, const char* option);
// Sets `separable`, `row`, `col` when the taps are rank 1 (exactly, up to float rounding).
void conv_detect_separable(ConvKernel& k);

// One plane (pitches in bytes), the 2-D definition above / the two-pass separable path.
// 16-bit samples: the same arithmetic, clamped to 0..65535; give them p.at_16_bits().
void conv_plane_cpu(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const ConvParams& p);
void conv_plane_cpu(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h, const ConvParams& p);
// `scratch`: the intermediate rows' buffer, reused across calls when given.
void conv_plane_separable_cpu(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h,
                              const ConvParams& p, std::vector<float>* scratch = nullptr);
void conv_plane_separable_cpu(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h,
                              const ConvParams& p, std::vector<float>* scratch = nullptr);

}  // namespace vfp
