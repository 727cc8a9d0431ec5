// Adaptive binary range coder for the MMP codec: the entropy coder of its split
// flags, prediction modes and dictionary indices, and the source of the rate R in its
// Lagrangian cost J = D + lambda * R.
//
// The design is the well-known LZMA one: 32-bit range, 64-bit low with carry propagation
// through a cached byte, 11-bit probabilities adapted by 1/32 of the error after every bit.
// Multi-bit values are coded MSB first down a binary tree of probabilities (one per tree
// node), so every value gets its own adaptive context. bit_cost() gives the cost of a bit
// in fractional bits from the current model, which is what the encoder's rate estimate uses.
//
// The decoder never reads out of its buffer: past the end it reads zero bytes and sets
// overrun(), which callers check to reject truncated or corrupted streams.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vfp::mmp {

constexpr int kProbBits = 11;
constexpr uint16_t kProbOne = 1u << kProbBits;  // probabilities are of a 0 bit, in 1/2048
constexpr int kAdaptShift = 5;

struct Prob {
  uint16_t p = kProbOne / 2;
  void update(int bit) {
    if (bit)
      p = static_cast<uint16_t>(p - (p >> kAdaptShift));
    else
      p = static_cast<uint16_t>(p + ((kProbOne - p) >> kAdaptShift));
  }
};

// Cost of coding `bit` with probability model p, in bits (from a table of -log2).
double bit_cost(const Prob& p, int bit);
// Cost of `value` (nbits, MSB first) down the tree `tree` (2^nbits entries; entry 0 unused).
double tree_cost(const Prob* tree, int nbits, uint32_t value);

class RangeEncoder {
 public:
  void encode(Prob& p, int bit);
  void encode_direct(uint32_t value, int nbits);  // equiprobable bits, MSB first (nbits <= 32)
  void encode_tree(Prob* tree, int nbits, uint32_t value);
  // Flushes and returns the stream. The encoder must not be used afterwards. The stream's
  // first byte is always 0; `drop_first_byte` leaves it out (a decoder made with
  // `first_byte_implicit` supplies it).
  std::vector<uint8_t> finish(bool drop_first_byte = false);
  size_t bytes_so_far() const { return out_.size() + cache_size_; }

 private:
  void shift_low();
  void normalize();
  uint64_t low_ = 0;
  uint32_t range_ = 0xFFFFFFFFu;
  uint8_t cache_ = 0;
  uint64_t cache_size_ = 1;
  std::vector<uint8_t> out_;
};

class RangeDecoder {
 public:
  RangeDecoder(const uint8_t* data, size_t n, bool first_byte_implicit = false);
  int decode(Prob& p);
  uint32_t decode_direct(int nbits);
  uint32_t decode_tree(Prob* tree, int nbits);
  // True once the decoder needed bytes past the end of its buffer (truncated/corrupt input).
  bool overrun() const { return overrun_; }
  size_t consumed() const { return pos_; }

 private:
  uint8_t next();
  void normalize();
  const uint8_t* data_;
  size_t n_, pos_ = 0;
  uint32_t range_ = 0xFFFFFFFFu, code_ = 0;
  bool overrun_ = false;
};

}  // namespace vfp::mmp
