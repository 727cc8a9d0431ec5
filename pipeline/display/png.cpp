#include "pipeline/display/png.hpp"

#include <array>
#include <fstream>

#include "pipeline/deflate/deflate.hpp"
#include "pipeline/error.hpp"

namespace vfp {

namespace {
void put32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<uint8_t>(x >> s));
}

void chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
  put32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put32(out, deflate::crc32(out.data() + start, out.size() - start));
}
}  // namespace

void write_png_rgb(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb) {
  // Raw scanlines, each with filter byte 0 (None).
  std::vector<uint8_t> raw;
  raw.reserve(static_cast<size_t>(height) * (width * 3 + 1));
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), rgb.begin() + static_cast<long>(y) * width * 3,
               rgb.begin() + static_cast<long>(y + 1) * width * 3);
  }
  // zlib stream by vfpipe's DEFLATE encoder (pipeline/deflate/).
  deflate::Options o;
  o.level = 6;
  const std::vector<uint8_t> z = deflate::compress_zlib(raw.data(), raw.size(), o);
  std::vector<uint8_t> out{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put32(ihdr, static_cast<uint32_t>(width));
  put32(ihdr, static_cast<uint32_t>(height));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit, RGB, deflate, no filter method, no interlace
  chunk(out, "IHDR", ihdr);
  chunk(out, "IDAT", z);
  chunk(out, "IEND", {});
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
  f.close();
  if (!f) throw Error(ErrorKind::Output, "cannot write screenshot '" + path + "'");
}

}  // namespace vfp
