// CUDA DEFLATE encoder: the algorithm of codecs/deflate/deflate.hpp, byte-identical to the
// CPU reference (shared definitions in deflate_core.hpp), and the GPU checksums and PNG.
//
// One call runs, on one stream, per batch of up to 256 MiB of input:
//   chains   one warp per segment walks it 32 positions at a time (__match_any_sync finds
//            equal hashes inside the step, a 16 KiB shared head table the earlier ones) and
//            writes each position's distance to the previous one with its hash, then the
//            segment's last position of every hash;
//   parse    one block per segment holds 32 KiB of history, the segment and its chains in
//            shared memory (224 KiB), linking the chains across the segment start with the
//            previous segment's table; each warp parses one 4 KiB chunk speculatively (32
//            positions' longest matches at once, the greedy/lazy path through them by pointer
//            doubling), then one warp re-joins the segment's true parse chunk by chunk
//            (re-parsing from where the previous chunk's parse enters until it meets the
//            speculative path); tokens and the segment's histogram;
//   blocks   segments grouped into DEFLATE blocks of ~16 Ki tokens (one thread);
//   codes    one small thread block per DEFLATE block: its segments' histograms summed,
//            symbols ranked in parallel, Huffman lengths, the block header; its size in bits
//            and each segment's bits follow from the histograms alone;
//   offsets  exclusive scans of block and segment bits (CUB);
//   pack     one block per segment: per-chunk bit totals and offsets, then each warp
//            places 32 tokens' bits at a time (warp scan, shared staging, one global OR per
//            output word); headers, end-of-block codes, the batch's closing sync flush;
//   checks   Adler-32 / CRC-32 from 128-byte pieces combined arithmetically (no order).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codecs/deflate/deflate.hpp"
#include "core/gpu.hpp"

namespace vfp::cuda {

enum class DeflateContainer { Raw, Zlib, Gzip };

struct DeflateTimings {  // milliseconds of the last compress(), by CUDA events
  float chains = 0, parse = 0, codes = 0, pack = 0, checksum = 0, total = 0;
};

class DeflateEncoder {
 public:
  DeflateEncoder();
  ~DeflateEncoder();
  DeflateEncoder(const DeflateEncoder&) = delete;
  DeflateEncoder& operator=(const DeflateEncoder&) = delete;

  // Compresses n bytes of device memory into the encoder's device output buffer, leaving
  // `prefix` bytes free in front of it (for a caller's header); returns the stream's size
  // (without the prefix). Synchronises with `s` once, to read that size.
  size_t compress_device(const uint8_t* d_in, size_t n, const deflate::Options& opt, DeflateContainer c, StreamHandle s,
                         size_t prefix = 0);
  // Device output of the last compress_device (prefix included).
  uint8_t* output() const { return out_.get(); }

  // Host in, host out (uploads, compresses, downloads).
  std::vector<uint8_t> compress(const uint8_t* host, size_t n, const deflate::Options& opt,
                                DeflateContainer c = DeflateContainer::Raw);

  // 8-bit PNG of a device image (channels 1 gray, 3 RGB, 4 RGBA; swap_rb: the pixels are
  // BGR/BGRA). Rows filtered on the GPU (the filter with the smallest sum of |signed bytes|,
  // as libpng), then zlib by this encoder, CRCs on the GPU. Same bytes as vfp::encode_png.
  std::vector<uint8_t> encode_png(const uint8_t* d_img, size_t pitch, int width, int height, int channels, bool swap_rb,
                                  int level, StreamHandle s);
  // The same, into the encoder's pinned host buffer (no extra copy; valid until the next call).
  struct HostBytes {
    const uint8_t* data;
    size_t size;
  };
  HostBytes encode_png_pinned(const uint8_t* d_img, size_t pitch, int width, int height, int channels, bool swap_rb,
                              int level, StreamHandle s);

  const DeflateTimings& timings() const { return timings_; }

 private:
  struct Impl;
  Impl* impl_;
  DeviceBuffer out_;
  DeflateTimings timings_;
};

// Checksums of device memory (standard values, as zlib's adler32/crc32). Synchronous.
uint32_t adler32_device(const uint8_t* d, size_t n, StreamHandle s);
uint32_t crc32_device(const uint8_t* d, size_t n, StreamHandle s);

}  // namespace vfp::cuda
