#include "codecs/deflate/png.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "codecs/deflate/deflate.hpp"
#include "codecs/deflate/png_filter.hpp"
#include "core/error.hpp"

namespace vfp {

namespace {

void put32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<uint8_t>(x >> s));
}

void chunk(std::vector<uint8_t>& out, const char* type, const uint8_t* data, size_t n) {
  put32(out, static_cast<uint32_t>(n));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data, data + n);
  put32(out, deflate::crc32(out.data() + start, out.size() - start));
}

}  // namespace

std::vector<uint8_t> png_head(int width, int height, int channels) {
  if (width <= 0 || height <= 0 || (channels != 1 && channels != 3 && channels != 4))
    throw Error(ErrorKind::Usage, "PNG: unsupported image " + std::to_string(width) + "x" + std::to_string(height) +
                                      " with " + std::to_string(channels) + " channels");
  std::vector<uint8_t> out{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put32(ihdr, static_cast<uint32_t>(width));
  put32(ihdr, static_cast<uint32_t>(height));
  const uint8_t color = channels == 1 ? 0 : channels == 3 ? 2 : 6;
  ihdr.insert(ihdr.end(), {8, color, 0, 0, 0});  // 8-bit, deflate, adaptive filters, no interlace
  chunk(out, "IHDR", ihdr.data(), ihdr.size());
  return out;
}

void png_add_pixel_aspect(std::vector<uint8_t>& png, int num, int den) {
  constexpr size_t kAfterIhdr = 8 + 12 + 13;  // signature, IHDR's length, type, data and CRC
  if (num <= 0 || den <= 0 || png.size() < kAfterIhdr || std::memcmp(png.data() + 12, "IHDR", 4) != 0)
    throw Error(ErrorKind::Internal, "PNG: no pixel aspect to record, or not a PNG from png_head()");
  // Pixels a unit along x and along y: a pixel is (1/x) : (1/y) = y : x wide to tall.
  std::vector<uint8_t> phys, c;
  put32(phys, static_cast<uint32_t>(den));
  put32(phys, static_cast<uint32_t>(num));
  phys.push_back(0);  // unit unknown: the ratio alone
  chunk(c, "pHYs", phys.data(), phys.size());
  png.insert(png.begin() + kAfterIhdr, c.begin(), c.end());
}

std::vector<uint8_t> png_filter_rows(const uint8_t* img, size_t pitch, int width, int height, int ch, bool swap_rb) {
  const size_t rowbytes = static_cast<size_t>(width) * ch;
  std::vector<uint8_t> out((rowbytes + 1) * height);
  std::vector<uint8_t> cur(rowbytes), prev(rowbytes, 0);
  for (int y = 0; y < height; ++y) {
    const uint8_t* row = img + static_cast<size_t>(y) * pitch;
    for (size_t i = 0; i < rowbytes; ++i) {
      const size_t k = i % ch;
      cur[i] = swap_rb && ch >= 3 && k < 3 ? row[i - k + 2 - k] : row[i];
    }
    uint64_t sums[5] = {0, 0, 0, 0, 0};
    auto at = [&](int f, size_t i) {
      const int a = i >= static_cast<size_t>(ch) ? cur[i - ch] : 0, b = prev[i];
      const int c = i >= static_cast<size_t>(ch) ? prev[i - ch] : 0;
      return png::filtered(f, cur[i], a, b, c);
    };
    for (size_t i = 0; i < rowbytes; ++i)
      for (int f = 0; f < 5; ++f) {
        sums[f] += png::signed_magnitude(at(f, i));
      }
    int best = 0;
    for (int f = 1; f < 5; ++f)
      if (sums[f] < sums[best]) best = f;
    uint8_t* o = out.data() + static_cast<size_t>(y) * (rowbytes + 1);
    o[0] = static_cast<uint8_t>(best);
    for (size_t i = 0; i < rowbytes; ++i) o[1 + i] = at(best, i);
    std::swap(cur, prev);
  }
  return out;
}

std::vector<uint8_t> encode_png(const uint8_t* img, size_t pitch, int width, int height, int channels, bool swap_rb,
                                int level) {
  std::vector<uint8_t> out = png_head(width, height, channels);
  const std::vector<uint8_t> rows = png_filter_rows(img, pitch, width, height, channels, swap_rb);
  deflate::Options o;
  o.level = level;
  o.filtered = true;
  const std::vector<uint8_t> z = deflate::compress_zlib(rows.data(), rows.size(), o);
  chunk(out, "IDAT", z.data(), z.size());
  chunk(out, "IEND", nullptr, 0);
  return out;
}

std::vector<uint8_t> png_from_zlib(int width, int height, int channels, const std::vector<uint8_t>& zlib) {
  std::vector<uint8_t> out = png_head(width, height, channels);
  chunk(out, "IDAT", zlib.data(), zlib.size());
  chunk(out, "IEND", nullptr, 0);
  return out;
}

void write_file_atomically(const std::string& path, const std::vector<uint8_t>& bytes) {
  const std::string tmp = path + ".part";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error(ErrorKind::Output, "cannot create '" + path + "': " + std::strerror(errno));
  const size_t put = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  int err = put == bytes.size() ? 0 : errno;
  if (std::fflush(f) != 0 && !err) err = errno;
  if (std::fclose(f) != 0 && !err) err = errno;
  if (err || put != bytes.size()) {
    std::remove(tmp.c_str());
    throw Error(ErrorKind::Output, "cannot write '" + path + "': " + std::strerror(err ? err : EIO));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    std::remove(tmp.c_str());
    throw Error(ErrorKind::Output, "cannot write '" + path + "': " + std::strerror(err));
  }
}

}  // namespace vfp
