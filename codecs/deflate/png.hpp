// PNG encoder (8-bit gray, RGB, RGBA), the CPU reference of DeflateEncoder::encode_png:
// each row gets the filter (None, Sub, Up, Average, Paeth) whose output has the smallest sum
// of |byte as signed| (libpng's heuristic; the lowest type wins ties), then the rows are
// compressed into one IDAT by vfpipe's DEFLATE (codecs/deflate/). The GPU produces the
// same bytes. Readers: libpng, OpenCV, any browser.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vfp {

// Signature and IHDR chunk (33 bytes) of a width x height image with 1, 3 or 4 channels.
std::vector<uint8_t> png_head(int width, int height, int channels);

// Records the pixels' aspect (width:height = num:den, not 1:1) in a pHYs chunk after `png`'s
// IHDR, as an aspect ratio without a physical unit; `png` is a whole file from this header.
void png_add_pixel_aspect(std::vector<uint8_t>& png, int num, int den);

// Filtered rows: height x (1 + width * channels) bytes, each led by its filter type.
// swap_rb: the pixels are BGR / BGRA (written as RGB / RGBA).
std::vector<uint8_t> png_filter_rows(const uint8_t* img, size_t pitch, int width, int height, int channels,
                                     bool swap_rb);

// A whole PNG file in memory (DEFLATE level 1..9; 6 is libpng's default).
std::vector<uint8_t> encode_png(const uint8_t* img, size_t pitch, int width, int height, int channels, bool swap_rb,
                                int level = 6);
// The same around an IDAT zlib stream made elsewhere (of png_filter_rows' bytes).
std::vector<uint8_t> png_from_zlib(int width, int height, int channels, const std::vector<uint8_t>& zlib);

// Writes `bytes` to `path` through a temporary file in the same directory renamed into place:
// a reader never sees a partial file, and a failed write (disk full) leaves no file behind.
// Throws vfp::Error (Output) naming the path and the system's reason.
void write_file_atomically(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace vfp
