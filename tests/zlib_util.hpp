// zlib as the outside reference that reads our DEFLATE streams back (tests built with zlib).
#pragma once
#if VFPIPE_HAVE_ZLIB
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <vector>

namespace vfp::test {

// Inflates with zlib: window_bits -15 raw, 15 zlib, 31 gzip. Fails the test on any error or
// on bytes left after the end of the stream.
inline std::vector<uint8_t> inflate_all(const std::vector<uint8_t>& z, int window_bits, size_t expect) {
  z_stream s{};
  EXPECT_EQ(inflateInit2(&s, window_bits), Z_OK);
  std::vector<uint8_t> out(expect + 64);
  s.next_in = const_cast<Bytef*>(z.data());
  s.avail_in = static_cast<uInt>(z.size());
  s.next_out = out.data();
  s.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&s, Z_FINISH);
  EXPECT_EQ(rc, Z_STREAM_END) << (s.msg ? s.msg : "");
  EXPECT_EQ(s.avail_in, 0u) << "bytes left after the end of the stream";
  out.resize(s.total_out);
  inflateEnd(&s);
  return out;
}

}  // namespace vfp::test
#endif
