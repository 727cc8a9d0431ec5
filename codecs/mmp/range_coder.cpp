#include "codecs/mmp/range_coder.hpp"

#include <array>
#include <cmath>

namespace vfp::mmp {

namespace {
constexpr uint32_t kTop = 1u << 24;

const std::array<double, kProbOne + 1>& log_table() {  // -log2(p / 2048)
  static const std::array<double, kProbOne + 1> t = [] {
    std::array<double, kProbOne + 1> v{};
    v[0] = 24;  // never reached: probabilities stay inside (0, 2048)
    for (uint32_t p = 1; p <= kProbOne; ++p) v[p] = -std::log2(static_cast<double>(p) / kProbOne);
    return v;
  }();
  return t;
}
}  // namespace

double bit_cost(const Prob& p, int bit) { return log_table()[bit ? kProbOne - p.p : p.p]; }

double tree_cost(const Prob* tree, int nbits, uint32_t value) {
  double c = 0;
  uint32_t node = 1;
  for (int i = nbits - 1; i >= 0; --i) {
    const int bit = static_cast<int>((value >> i) & 1u);
    c += bit_cost(tree[node], bit);
    node = (node << 1) | static_cast<uint32_t>(bit);
  }
  return c;
}

void RangeEncoder::shift_low() {
  if (static_cast<uint32_t>(low_) < 0xFF000000u || (low_ >> 32) != 0) {
    const uint8_t carry = static_cast<uint8_t>(low_ >> 32);
    uint8_t temp = cache_;
    do {
      out_.push_back(static_cast<uint8_t>(temp + carry));
      temp = 0xFF;
    } while (--cache_size_ != 0);
    cache_ = static_cast<uint8_t>(low_ >> 24);
  }
  ++cache_size_;
  low_ = (low_ & 0x00FFFFFFu) << 8;
}

void RangeEncoder::normalize() {
  while (range_ < kTop) {
    range_ <<= 8;
    shift_low();
  }
}

void RangeEncoder::encode(Prob& p, int bit) {
  const uint32_t bound = (range_ >> kProbBits) * p.p;
  if (bit) {
    low_ += bound;
    range_ -= bound;
  } else {
    range_ = bound;
  }
  p.update(bit);
  normalize();
}

void RangeEncoder::encode_direct(uint32_t value, int nbits) {
  for (int i = nbits - 1; i >= 0; --i) {
    range_ >>= 1;
    if ((value >> i) & 1u) low_ += range_;
    normalize();
  }
}

void RangeEncoder::encode_tree(Prob* tree, int nbits, uint32_t value) {
  uint32_t node = 1;
  for (int i = nbits - 1; i >= 0; --i) {
    const int bit = static_cast<int>((value >> i) & 1u);
    encode(tree[node], bit);
    node = (node << 1) | static_cast<uint32_t>(bit);
  }
}

std::vector<uint8_t> RangeEncoder::finish(bool drop_first_byte) {
  for (int i = 0; i < 5; ++i) shift_low();
  // The first byte is the initial cache (0), which no carry reaches: low stays below 2^32
  // until the first byte is out.
  if (drop_first_byte && !out_.empty()) out_.erase(out_.begin());
  return std::move(out_);
}

RangeDecoder::RangeDecoder(const uint8_t* data, size_t n, bool first_byte_implicit) : data_(data), n_(n) {
  for (int i = first_byte_implicit ? 1 : 0; i < 5; ++i) code_ = (code_ << 8) | next();  // the first byte is always 0
}

uint8_t RangeDecoder::next() {
  if (pos_ < n_) return data_[pos_++];
  overrun_ = true;
  return 0;
}

void RangeDecoder::normalize() {
  while (range_ < kTop) {
    range_ <<= 8;
    code_ = (code_ << 8) | next();
  }
}

int RangeDecoder::decode(Prob& p) {
  const uint32_t bound = (range_ >> kProbBits) * p.p;
  int bit;
  if (code_ < bound) {
    range_ = bound;
    bit = 0;
  } else {
    code_ -= bound;
    range_ -= bound;
    bit = 1;
  }
  p.update(bit);
  normalize();
  return bit;
}

uint32_t RangeDecoder::decode_direct(int nbits) {
  uint32_t v = 0;
  for (int i = 0; i < nbits; ++i) {
    range_ >>= 1;
    uint32_t bit = 0;
    if (code_ >= range_) {
      code_ -= range_;
      bit = 1;
    }
    v = (v << 1) | bit;
    normalize();
  }
  return v;
}

uint32_t RangeDecoder::decode_tree(Prob* tree, int nbits) {
  uint32_t node = 1;
  for (int i = 0; i < nbits; ++i) node = (node << 1) | static_cast<uint32_t>(decode(tree[node]));
  return node - (1u << nbits);
}

}  // namespace vfp::mmp
