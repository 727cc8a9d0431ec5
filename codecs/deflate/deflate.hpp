// DEFLATE (RFC 1951) encoder, CPU reference of the segment-parallel algorithm the GPU
// encoder (cuda/deflate.cu) reproduces byte for byte. Standard streams: any inflate reads them.
//
// Algorithm (docs/deflate.md; shared definitions in deflate_core.hpp):
//   * The input is cut into segments of `segment_bytes` (64 KiB by default, a multiple of
//     4 KiB), each encoded on its own: LZ77 with a 3-byte hash and, for every position, the
//     previous position of the segment with the same hash (window 32 KiB); the longest match
//     along that chain (first found wins ties; depth and "nice" length set by the level).
//   * The parse (greedy, or lazy from level 4: a literal when the next position matches
//     longer) runs through the segment; matches run to the segment's end at most.
//   * Consecutive segments share a dynamic-Huffman block until it holds ~16 Ki tokens
//     (core::block_of); optimal length-limited code lengths (15 bits; 7 for the code-length
//     code), canonical codes. Blocks follow each other at exact bit offsets (the GPU packs
//     them in parallel from prefix sums).
//   * Every batch (256 MiB) ends byte-aligned by an empty stored block (zlib's sync flush).
//   * Deterministic: the same input and level give the same bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "codecs/deflate/deflate_core.hpp"

namespace vfp::deflate {

struct Options {
  int level = 6;                           // 1 (fast) .. 9 (best); 0 = stored blocks of 65535 bytes
  size_t segment_bytes = 1 << 16;          // independent segments (the GPU's unit of work)
  bool filtered = false;                   // matches shorter than 6 not used (PNG rows; zlib's Z_FILTERED)
  size_t batch_bytes = size_t(256) << 20;  // the stream is byte-aligned (sync flush) every batch
};

// Segment size actually used: opt.segment_bytes clamped to 4..64 KiB, rounded down to 4 KiB.
size_t segment_size(const Options& opt);
// Batch size actually used: a multiple of the segment size (at least one segment).
size_t batch_size(const Options& opt);
// Which segments of a batch open a block, from each segment's token count (core::block_of).
std::vector<uint8_t> block_starts(const std::vector<uint64_t>& tokens);

// Code lengths, codes and header of a segment's block from its histogram (286 literal/length
// symbols with hist[256] = 1, then 30 distance symbols). The GPU encoder builds the same.
void build_block_code(const uint32_t* hist, bool final, core::BlockCode& bc);

// Raw DEFLATE stream.
std::vector<uint8_t> compress(const uint8_t* data, size_t n, const Options& opt = {});
// zlib (RFC 1950: CMF/FLG header, DEFLATE, Adler-32) and gzip (RFC 1952: header, DEFLATE,
// CRC-32, size) containers.
std::vector<uint8_t> compress_zlib(const uint8_t* data, size_t n, const Options& opt = {});
std::vector<uint8_t> compress_gzip(const uint8_t* data, size_t n, const Options& opt = {});

uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler = 1);
uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0);

// Code lengths for `freq` (0 = unused symbol), at most `max_bits`, by package-merge.
// A single used symbol gets length 1.
std::vector<uint8_t> limited_code_lengths(const std::vector<uint32_t>& freq, int max_bits);

}  // namespace vfp::deflate
