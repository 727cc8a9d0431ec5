// The screenshot writer: 8-bit RGB through vfpipe's PNG encoder (codecs/deflate/png.hpp, our
// own DEFLATE; no dependencies, so screenshots work where libpng and OpenCV are missing).
// The tests decode its output with OpenCV/libpng. Throws vfp::Error (Output) when the file
// cannot be written.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vfp {

// `rgb`: height rows of width*3 bytes, top row first.
void write_png_rgb(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb);

}  // namespace vfp
