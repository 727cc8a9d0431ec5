// The MMP codec's adaptive range coder (codecs/mmp/range_coder.hpp): round trips of bits,
// direct bits and bit trees, compression close to the entropy, the cost estimate against
// the real size, and truncated / corrupted streams (no crash, overrun reported).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "codecs/mmp/range_coder.hpp"

using namespace vfp::mmp;

namespace {

struct Item {
  int kind;  // 0 bit (context ctx), 1 direct, 2 tree
  int ctx;
  uint32_t value;
  int nbits;
};

std::vector<Item> random_items(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Item> v;
  for (size_t i = 0; i < n; ++i) {
    const int kind = static_cast<int>(rng() % 3);
    const int ctx = static_cast<int>(rng() % 4);
    if (kind == 0) v.push_back({0, ctx, (rng() % 100) < static_cast<uint32_t>(10 + 25 * ctx) ? 1u : 0u, 1});
    if (kind == 1) {
      const int nb = 1 + static_cast<int>(rng() % 32);
      v.push_back(
          {1, 0, nb == 32 ? static_cast<uint32_t>(rng()) : static_cast<uint32_t>(rng()) & ((1u << nb) - 1), nb});
    }
    if (kind == 2)
      v.push_back({2, ctx,
                   static_cast<uint32_t>(
                       std::min<int>(static_cast<int>(std::abs(std::normal_distribution<double>(0, 6)(rng))), 63)),
                   6});
  }
  return v;
}

std::vector<uint8_t> encode_items(const std::vector<Item>& items) {
  std::vector<Prob> bits(4);
  std::vector<std::vector<Prob>> trees(4, std::vector<Prob>(64));
  RangeEncoder e;
  for (const Item& it : items) {
    if (it.kind == 0) e.encode(bits[static_cast<size_t>(it.ctx)], static_cast<int>(it.value));
    if (it.kind == 1) e.encode_direct(it.value, it.nbits);
    if (it.kind == 2) e.encode_tree(trees[static_cast<size_t>(it.ctx)].data(), 6, it.value);
  }
  return e.finish();
}

}  // namespace

TEST(RangeCoder, RoundTripsBitsDirectBitsAndTrees) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const std::vector<Item> items = random_items(20000, seed);
    const std::vector<uint8_t> z = encode_items(items);
    std::vector<Prob> bits(4);
    std::vector<std::vector<Prob>> trees(4, std::vector<Prob>(64));
    RangeDecoder d(z.data(), z.size());
    for (size_t i = 0; i < items.size(); ++i) {
      const Item& it = items[i];
      uint32_t got = 0;
      if (it.kind == 0) got = static_cast<uint32_t>(d.decode(bits[static_cast<size_t>(it.ctx)]));
      if (it.kind == 1) got = d.decode_direct(it.nbits);
      if (it.kind == 2) got = d.decode_tree(trees[static_cast<size_t>(it.ctx)].data(), 6);
      ASSERT_EQ(got, it.value) << "item " << i << " seed " << seed;
    }
    EXPECT_FALSE(d.overrun());
    EXPECT_LE(d.consumed(), z.size());
  }
}

TEST(RangeCoder, EmptyAndTinyStreams) {
  RangeEncoder e;
  const auto z = e.finish();
  EXPECT_EQ(z.size(), 5u);
  RangeEncoder e1;
  Prob p;
  e1.encode(p, 1);
  const auto z1 = e1.finish();
  Prob q;
  RangeDecoder d(z1.data(), z1.size());
  EXPECT_EQ(d.decode(q), 1);
  EXPECT_FALSE(d.overrun());
}

TEST(RangeCoder, CompressesToTheEntropyAndTheCostEstimateAgrees) {
  // A skewed source (P(1) = 0.1): the stream is close to n * H(0.1), and the running cost
  // estimate (bits from the adaptive model before each update) is close to the real size.
  std::mt19937 rng(7);
  const int n = 200000;
  RangeEncoder e;
  Prob p, shadow;
  double estimate = 0;
  for (int i = 0; i < n; ++i) {
    const int bit = (rng() % 1000) < 100 ? 1 : 0;
    estimate += bit_cost(shadow, bit);
    shadow.update(bit);
    e.encode(p, bit);
  }
  const double bytes = static_cast<double>(e.finish().size());
  const double h = -(0.1 * std::log2(0.1) + 0.9 * std::log2(0.9));
  EXPECT_LT(bytes * 8, n * h * 1.03);  // adaptation costs a little
  EXPECT_NEAR(bytes * 8, estimate, 0.002 * estimate + 64);
  // Tree costs are the sum of the node costs.
  std::vector<Prob> tree(16);
  EXPECT_DOUBLE_EQ(tree_cost(tree.data(), 4, 9), 4.0);  // fresh model: one bit per level
}

TEST(RangeCoder, TruncatedOrCorruptStreamsAreSafe) {
  const std::vector<Item> items = random_items(5000, 11);
  const std::vector<uint8_t> z = encode_items(items);
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint8_t> bad = z;
    if (trial % 2) {
      bad.resize(rng() % z.size());
    } else {
      for (int k = 0; k < 4; ++k) bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    }
    std::vector<Prob> bits(4);
    std::vector<std::vector<Prob>> trees(4, std::vector<Prob>(64));
    RangeDecoder d(bad.data(), bad.size());
    for (const Item& it : items) {  // decodes something, never reads past the buffer
      if (it.kind == 0) d.decode(bits[static_cast<size_t>(it.ctx)]);
      if (it.kind == 1) d.decode_direct(it.nbits);
      if (it.kind == 2) d.decode_tree(trees[static_cast<size_t>(it.ctx)].data(), 6);
    }
    EXPECT_LE(d.consumed(), bad.size());
    if (trial % 2 && bad.size() + 4 < z.size()) EXPECT_TRUE(d.overrun()) << "truncated to " << bad.size();
  }
}
