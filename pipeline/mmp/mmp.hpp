// MMP (Multidimensional Multiscale Parser) intra coding of one 8-bit plane — the exact CPU
// codec of issue 8, in progress (docs/mmp.md says what is built and what is not).
//
// Per 16x16 block, raster order: an intra prediction mode (none/DC/vertical/horizontal, from
// already decoded neighbours); the residue is approximated by a binary segmentation tree whose
// leaves are elements of multiscale dictionaries (25 scales 2^lw x 2^lh, lw, lh in 0..4),
// the tree and the elements chosen bottom-up by J = SSE + lambda * bits (bits from the current
// adaptive models); after each block every internal node of its tree (the concatenation of
// its two children) becomes a new element of its scale and, resized, of every other scale,
// unless an equal element is there already. The decoder repeats the same updates, so the
// decoded plane equals the encoder's reconstruction bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vfp::mmp {

struct Params {
  double lambda = 32;  // Lagrangian multiplier of J = SSE + lambda * bits
  int max_dict = 4096; // elements per scale (indices are 12-bit); when full, no more are added
};

struct PlaneResult {
  std::vector<uint8_t> bytes;  // range-coded payload of the plane
  std::vector<uint8_t> recon;  // the decoder's output, w*h
  double sse = 0;
  int64_t blocks = 0, leaves = 0, dict_elements = 0;
  int64_t modes[4] = {0, 0, 0, 0};  // blocks per prediction mode: none, DC, vertical, horizontal
  int64_t splits[2] = {0, 0};       // splits into left|right, top/bottom
};

PlaneResult encode_plane(const uint8_t* img, int w, int h, const Params& p);
// Throws vfp::Error (Input) for corrupt or truncated data.
std::vector<uint8_t> decode_plane(const uint8_t* data, size_t n, int w, int h, const Params& p);

// The separable scale transform between element sizes (exposed for tests): shrinking by k
// averages k samples, rounded half up (floor((2*sum + k) / (2k))); enlarging repeats samples.
std::vector<int16_t> resize_element(const std::vector<int16_t>& e, int lw1, int lh1, int lw2, int lh2);

}  // namespace vfp::mmp
