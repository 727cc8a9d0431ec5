#include "display/png.hpp"

#include "codecs/deflate/png.hpp"

namespace vfp {

void write_png_rgb(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb) {
  write_file_atomically(path, encode_png(rgb.data(), static_cast<size_t>(width) * 3, width, height, 3, false));
}

}  // namespace vfp
