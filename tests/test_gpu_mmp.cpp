// MMP's encoder search on the GPU (cuda/mmp_search.hpp: whole blocks, or the leaf search of
// each unit) against the CPU's: the encoder writes the same bytes with either, for every
// block size, mode count, lambda, tiling, carry, post-filter setting and pixel format, on
// random, structured, photo-like, flat and graphics planes of odd sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <sstream>

#include "codecs/mmp/container.hpp"
#include "codecs/mmp/mmp.hpp"
#include "codecs/mmp/postfilter.hpp"
#include "codecs/mmp/search.hpp"
#include "core/frame.hpp"
#include "core/parallel.hpp"
#include "gpu_test_util.hpp"
#include "mmp_reference.hpp"
#include "test_util.hpp"
#if VFPIPE_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/gpu.hpp"
#include "cuda/mmp_search.hpp"
#endif

using namespace vfp;

#if VFPIPE_HAVE_CUDA
namespace {

std::vector<uint8_t> test_plane(int kind, int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(static_cast<size_t>(w) * h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      double o = 0;
      if (kind == 0) o = static_cast<double>(rng() & 255u);                       // random
      if (kind == 1) o = ((x / 3 + y / 5) % 4 == 0 || (y % 11) == 3) ? 20 : 235;  // text-like
      if (kind == 2) o = 128 + 60 * std::sin(x / 9.0) * std::cos(y / 7.0) + std::normal_distribution<double>(0, 4)(rng);
      if (kind == 3) o = 77;                                                               // flat
      if (kind == 4) o = (x * 255 / std::max(1, w - 1) + (x / 8 + y / 8) % 2 * 40) & 255;  // graphics: ramp, checks
      v[static_cast<size_t>(y) * w + x] = static_cast<uint8_t>(std::clamp(o, 0.0, 255.0));
    }
  return v;
}

// Every plane of `v` photo-like (test_plane kind 2), plane p from seed `seed` + p.
void fill_photo_like(const ImageView& v, uint32_t seed) {
  for (int pl = 0; pl < plane_count(v.format); ++pl) {
    const auto img = test_plane(2, v.pw[pl], v.ph[pl], seed + static_cast<uint32_t>(pl));
    for (int y = 0; y < v.ph[pl]; ++y)
      std::memcpy(v.row(pl, y), img.data() + static_cast<size_t>(y) * v.pw[pl], static_cast<size_t>(v.pw[pl]));
  }
}

// A made-up query of K residues of 2^L x 2^L and the dictionary and costs it searches:
// random samples with duplicated elements (equal J: the lower index must win) and an
// empty scale, or (`extreme`) samples of +-255 mostly of one sign, the first residue and a
// third of the elements all +255 (dot products up to 256 * 255^2, just below 2^24).
struct MadeUpQuery {
  mmp::LeafQuery q;
  std::vector<int> residues;
  std::vector<std::vector<int16_t>> data = std::vector<std::vector<int16_t>>(mmp::kSearchScales);
  std::vector<std::vector<double>> bits = std::vector<std::vector<double>>(mmp::kSearchScales);

  MadeUpQuery(const MadeUpQuery&) = delete;  // q points into the vectors
  MadeUpQuery& operator=(const MadeUpQuery&) = delete;
  MadeUpQuery(int L, int K, bool extreme, std::mt19937& rng) {
    const auto sample = [&](bool all_plus) {
      if (!extreme) return static_cast<int>(rng() % 511) - 255;
      return all_plus || rng() % 10 ? 255 : -255;
    };
    const int N = 1 << L;
    q.L = L;
    q.K = K;
    q.lambda = 17.25;
    residues.resize(static_cast<size_t>(K) * N * N);
    for (size_t at = 0; at < residues.size(); ++at) residues[at] = sample(at < static_cast<size_t>(N) * N);
    q.residues = residues.data();
    static uint64_t ids = 1000;
    q.dict_id = ++ids;
    q.costs_id = ++ids;
    for (int lh = 0; lh <= L; ++lh)
      for (int lw = 0; lw <= L; ++lw) {
        const int s = lw + 6 * lh, n = 1 << (lw + lh);
        const int count = s == 1 ? 0 : static_cast<int>(1 + rng() % 150);  // scale 2x1: empty
        auto& d = data[static_cast<size_t>(s)];
        d.resize(static_cast<size_t>(count) * n);
        for (int i = 0; i < count; ++i)
          for (int k = 0; k < n; ++k) d[static_cast<size_t>(i) * n + k] = static_cast<int16_t>(sample(i % 3 == 0));
        auto& b = bits[static_cast<size_t>(s)];
        b.resize(static_cast<size_t>(count));
        for (auto& v : b) v = 3 + (rng() % 1000) / 97.0;
        for (int i = 1; i < count; i += 5) {  // duplicates of the element before, same cost
          std::copy_n(d.begin() + (i - 1) * n, n, d.begin() + i * n);
          b[static_cast<size_t>(i)] = b[static_cast<size_t>(i - 1)];
        }
        q.scales[static_cast<size_t>(s)] = {count, n, d.data()};
        q.bits[static_cast<size_t>(s)] = b.data();
        q.leaf_bits[static_cast<size_t>(s)] = lw + lh ? 0.75 : 0;
      }
  }

  // The backend's leaf tables equal the exhaustive search's, entry by entry.
  void expect_search(mmp::LeafSearch& gpu) const {
    const size_t size = static_cast<size_t>(q.K) * mmp::leaf_table_size(q.L);
    std::vector<double> J(size), ref_j(size);
    std::vector<int> I(size), ref_i(size);
    gpu.search(q, J.data(), I.data());
    test::ExhaustiveSearch().search(q, ref_j.data(), ref_i.data());
    for (size_t at = 0; at < size; ++at) {
      ASSERT_EQ(I[at], ref_i[at]) << "L " << q.L << " K " << q.K << " entry " << at;
      ASSERT_EQ(J[at], ref_j[at]) << "L " << q.L << " K " << q.K << " entry " << at;
    }
  }
};

}  // namespace

// The kernel alone, on made-up queries (above), every unit size and residue count; J and
// index exactly as search.hpp defines them, the extreme samples too (which the
// tensor-core form must keep exact). Few launches: also run under the sanitizers.
TEST(Gpu, MmpLeafSearchKernelMatchesItsDefinition) {
  REQUIRE_GPU();
  auto gpu = cuda::make_mmp_leaf_search();
  for (bool extreme : {false, true}) {
    std::mt19937 rng(3);
    for (int L = 2; L <= 5; ++L)
      for (int K : {1, 4, 11}) {
        SCOPED_TRACE(testing::Message() << "extreme samples " << extreme);
        MadeUpQuery(L, K, extreme, rng).expect_search(*gpu);
        if (HasFatalFailure()) return;
      }
  }
}

// The unit search's new buffers are ready before its kernels run, whatever the legacy
// default stream is doing: here that stream is busy with a large memset while a new
// search's first queries grow its buffers, in device memory last filled with ones. A chunk
// counter read before it was zeroed would leave a task's minima uncombined, in that search
// and every later one on its lane.
TEST(Gpu, MmpUnitSearchBuffersAreReadyWhileTheLegacyStreamIsBusy) {
  REQUIRE_GPU();
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  {
    cuda::DeviceBuffer ones(std::min(free_bytes / 4, size_t{4} << 30), "a test buffer");
    ASSERT_EQ(cudaMemset(ones.get(), 0xFF, ones.size()), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  auto gpu = cuda::make_mmp_leaf_search(cuda::MmpGpuSearch::Units);
  cuda::DeviceBuffer busy(std::min(free_bytes / 4, size_t{8} << 30), "a test buffer");
  std::mt19937 rng(11);
  for (int L = 2; L <= 5; ++L)
    for (int K : {4, 11}) {
      ASSERT_EQ(cudaMemsetAsync(busy.get(), 0, busy.size(), cudaStreamLegacy), cudaSuccess);
      MadeUpQuery(L, K, false, rng).expect_search(*gpu);
      if (HasFatalFailure()) return;
    }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The block search with answer tables and rate order (and sum order, unless `sum` is "0")
// in every round, a block alone too ("all"), or in none ("0"); the backend reads the
// switches when it is made.
static std::shared_ptr<mmp::LeafSearch> blocks_search_with(const char* tables_and_order, const char* sum = nullptr) {
  setenv("VFP_MMP_ANSWERS", tables_and_order, 1);
  setenv("VFP_MMP_RATE_ORDER", tables_and_order, 1);
  setenv("VFP_MMP_CHAIN_ORDER", tables_and_order, 1);
  setenv("VFP_MMP_SUM_ORDER", sum ? sum : tables_and_order, 1);
  auto search = cuda::make_mmp_leaf_search(cuda::MmpGpuSearch::Blocks);
  unsetenv("VFP_MMP_ANSWERS");
  unsetenv("VFP_MMP_RATE_ORDER");
  unsetenv("VFP_MMP_CHAIN_ORDER");
  unsetenv("VFP_MMP_SUM_ORDER");
  return search;
}

// Every way of using the GPU (whole blocks as graphs, whole blocks launched kernel by
// kernel, a leaf search per unit) writes the CPU encoder's bytes and reconstruction.
TEST(Gpu, MmpSearchOnTheGpuGivesTheCpuBytes) {
  REQUIRE_GPU();
  const std::shared_ptr<mmp::LeafSearch> gpus[] = {cuda::make_mmp_leaf_search(cuda::MmpGpuSearch::Blocks),
                                                   cuda::make_mmp_leaf_search(cuda::MmpGpuSearch::BlocksUngraphed),
                                                   cuda::make_mmp_leaf_search(cuda::MmpGpuSearch::Units)};
  setenv("VFP_MMP_ROUND_BLOCKS", "7", 1);
  const std::shared_ptr<mmp::LeafSearch> small_rounds = cuda::make_mmp_leaf_search(cuda::MmpGpuSearch::Blocks);
  unsetenv("VFP_MMP_ROUND_BLOCKS");
  // Answer tables, rate and sum order (the 4x4 units' too) for every round, a block alone
  // too, the same without sum order, and none of them (by default rounds of 8 or more blocks
  // look their 1- and 2-sample segments up in tables and search their small scales in rate
  // order; sum order only where VFP_MMP_SUM_ORDER asks for it).
  // The 4x4 chain's links in 256 threads and the leaf kernel in 128 registers in every
  // round, and their lean forms in every round, a block alone too (VFP_MMP_LEAN_*; by default
  // the lean forms in rounds of 8 or more blocks).
  const auto lean_search = [](const char* v) {
    setenv("VFP_MMP_LEAN_LINKS", v, 1);
    setenv("VFP_MMP_LEAN_LEAF", v, 1);
    std::shared_ptr<mmp::LeafSearch> s = cuda::make_mmp_leaf_search(cuda::MmpGpuSearch::Blocks);
    unsetenv("VFP_MMP_LEAN_LINKS");
    unsetenv("VFP_MMP_LEAN_LEAF");
    return s;
  };
  const std::shared_ptr<mmp::LeafSearch> wide = lean_search("0"), lean = lean_search("all");
  const std::shared_ptr<mmp::LeafSearch> tables = blocks_search_with("all");
  const std::shared_ptr<mmp::LeafSearch> no_tables = blocks_search_with("0");
  const std::shared_ptr<mmp::LeafSearch> rate_only = blocks_search_with("all", "0");
  EXPECT_EQ(small_rounds->round_capacity(), 7);
  EXPECT_GT(gpus[0]->round_capacity(), 100);
  EXPECT_EQ(gpus[2]->round_capacity(), 0);
  struct Case {
    int w, h, kind, block_log, modes;
    double lambda;
    int tile;
    mmp::TileMode mode;
    bool post;
    // The defaults: full scales replace their least used (the host learns; the mirror follows
    // by the change log). Stop: untiled planes and independent tiles learn on the device
    // (small: the dictionaries fill up, and the device's learning stops as the CPU's).
    int max_dict = mmp::Params{}.max_dict;
    bool replace = mmp::Params{}.replace_least_used;
    mmp::TileScan scan = mmp::TileScan::Raster;
    int min_unit = 4;  // the encoder's smallest prediction unit
  };
  const Case cases[] = {
      {1, 1, 0, 4, 4, 30, 0, mmp::TileMode::SyncAll, true},
      {3, 7, 1, 3, 4, 30, 0, mmp::TileMode::SyncAll, true},
      {37, 29, 2, 4, 4, 5, 0, mmp::TileMode::SyncAll, true},
      {37, 29, 0, 4, 11, 200, 0, mmp::TileMode::SyncAll, false},
      {70, 45, 1, 3, 1, 30, 0, mmp::TileMode::SyncAll, true},
      {70, 45, 2, 5, 4, 60, 0, mmp::TileMode::SyncAll, true},
      {96, 80, 2, 4, 4, 30, 32, mmp::TileMode::SyncAll, true},
      {96, 80, 0, 3, 4, 30, 32, mmp::TileMode::SyncDictionaries, false},
      {96, 80, 1, 4, 2, 30, 32, mmp::TileMode::Independent, true},
      {161, 97, 2, 4, 4, 40, 64, mmp::TileMode::SyncAll, true},
      {64, 64, 3, 4, 4, 30, 0, mmp::TileMode::SyncAll, true},
      {99, 67, 4, 4, 3, 20, 0, mmp::TileMode::SyncAll, true},
      {99, 67, 4, 5, 11, 10, 0, mmp::TileMode::SyncAll, false},
      {130, 70, 0, 3, 4, 0, 64, mmp::TileMode::SyncAll, true},
      {48, 40, 2, 3, 11, 500, 16, mmp::TileMode::Independent, true},
      {120, 90, 0, 3, 4, 30, 0, mmp::TileMode::SyncAll, true, 80, false},
      {100, 64, 2, 4, 4, 20, 32, mmp::TileMode::Independent, false, 100, false},
      {37, 29, 2, 4, 4, 5, 0, mmp::TileMode::SyncAll, true, 4096, false},
      {96, 80, 2, 4, 4, 30, 32, mmp::TileMode::SyncAll, true, 4096, false},
      {96, 80, 1, 4, 2, 30, 32, mmp::TileMode::Independent, true, 4096, false},
      // More tiles than blocks in flight at once (153 of 64): a round in three waves.
      {136, 72, 2, 3, 4, 30, 8, mmp::TileMode::SyncAll, true},
      {136, 72, 1, 3, 4, 30, 8, mmp::TileMode::SyncDictionaries, false},
      // Dictionaries of two tiles of the small-segment search: tasks dealt to 2 chunks.
      {136, 72, 2, 3, 4, 30, 8, mmp::TileMode::SyncAll, true, 300, false},
      // Small replacing dictionaries: untiled, independent and synchronized tiles.
      {120, 90, 0, 3, 4, 30, 0, mmp::TileMode::SyncAll, true, 80, true},
      {100, 64, 2, 4, 4, 20, 32, mmp::TileMode::Independent, false, 100, true},
      {161, 97, 2, 4, 4, 40, 64, mmp::TileMode::SyncAll, true, 72, true},
      {136, 72, 2, 3, 4, 30, 8, mmp::TileMode::SyncAll, true, 300, true},
      {136, 72, 1, 3, 4, 30, 8, mmp::TileMode::SyncDictionaries, false, 90, true},
      // Wavefront rounds: several blocks of a tile in a round (in both sync modes; replacing
      // and stopping dictionaries; rounds of up to 40 blocks).
      {161, 97, 2, 4, 4, 40, 64, mmp::TileMode::SyncAll, true, 512, true, mmp::TileScan::Wavefront},
      {136, 72, 1, 3, 4, 30, 32, mmp::TileMode::SyncAll, true, 90, true, mmp::TileScan::Wavefront},
      {136, 72, 0, 3, 11, 20, 32, mmp::TileMode::SyncAll, false, 300, false, mmp::TileScan::Wavefront},
      {136, 72, 2, 3, 4, 30, 32, mmp::TileMode::SyncDictionaries, true, 90, true, mmp::TileScan::Wavefront},
      {320, 96, 2, 3, 4, 30, 64, mmp::TileMode::SyncAll, true, 512, true, mmp::TileScan::Wavefront},
      {99, 67, 4, 5, 4, 20, 96, mmp::TileMode::SyncAll, true, 512, true, mmp::TileScan::Wavefront},
      // A larger smallest prediction unit: the chain of 8x8 or 16x16 units (untiled, rounds
      // of tiles, a wavefront; blocks of 8, 16 and 32; as large as the block).
      {70, 45, 2, 4, 4, 30, 0, mmp::TileMode::SyncAll, true, 512, true, mmp::TileScan::Raster, 8},
      {161, 97, 2, 4, 4, 40, 64, mmp::TileMode::SyncAll, true, 512, true, mmp::TileScan::Raster, 8},
      {136, 72, 0, 3, 11, 20, 32, mmp::TileMode::SyncAll, false, 300, false, mmp::TileScan::Wavefront, 8},
      {99, 67, 4, 5, 4, 20, 96, mmp::TileMode::SyncAll, true, 512, true, mmp::TileScan::Raster, 8},
      {99, 67, 1, 5, 3, 20, 64, mmp::TileMode::SyncAll, true, 512, true, mmp::TileScan::Raster, 16},
      {96, 80, 2, 4, 4, 30, 32, mmp::TileMode::SyncAll, true, 512, true, mmp::TileScan::Raster, 16},
      {37, 29, 0, 4, 11, 200, 0, mmp::TileMode::SyncAll, false, 512, true, mmp::TileScan::Raster, 16},
  };
  for (const Case& c : cases) {
    const auto img = test_plane(c.kind, c.w, c.h, 7);
    mmp::Params p;
    p.lambda = c.lambda;
    p.block_log = c.block_log;
    p.mode_candidates = c.modes;
    p.tile_w = p.tile_h = c.tile;
    p.tile_mode = c.mode;
    p.post_filter = c.post;
    p.max_dict = c.max_dict;
    p.replace_least_used = c.replace;
    p.tile_scan = c.scan;
    p.min_unit = c.min_unit;
    const mmp::PlaneResult cpu = mmp::encode_plane(img.data(), c.w, c.h, p);
    for (size_t g = 0; g < std::size(gpus); ++g) {
      p.search = gpus[g];
      const mmp::PlaneResult dev = mmp::encode_plane(img.data(), c.w, c.h, p);
      EXPECT_EQ(cpu.bytes, dev.bytes) << "GPU use " << g << ": " << c.w << "x" << c.h << " kind " << c.kind << " block "
                                      << (1 << c.block_log) << " modes " << c.modes << " lambda " << c.lambda
                                      << " tile " << c.tile << " dict " << c.max_dict << " replace " << c.replace
                                      << " scan " << mmp::tile_scan_name(c.scan) << " min unit " << c.min_unit;
      EXPECT_EQ(cpu.recon, dev.recon) << "GPU use " << g;
    }
    for (const auto& v : {wide, lean}) {
      p.search = v;
      const mmp::PlaneResult dev = mmp::encode_plane(img.data(), c.w, c.h, p);
      EXPECT_EQ(cpu.bytes, dev.bytes) << (v == wide ? "wide" : "lean") << " links and leaf kernel: " << c.w << "x"
                                      << c.h << " kind " << c.kind << " block " << (1 << c.block_log) << " min unit "
                                      << c.min_unit;
    }
    for (const auto& t : {tables, no_tables, rate_only}) {
      p.search = t;
      const mmp::PlaneResult dev = mmp::encode_plane(img.data(), c.w, c.h, p);
      EXPECT_EQ(cpu.bytes, dev.bytes) << "answer tables, rate and sum order "
                                      << (t == tables      ? "everywhere"
                                          : t == no_tables ? "nowhere"
                                                           : "but sum order")
                                      << ": " << c.w << "x" << c.h << " kind " << c.kind << " block "
                                      << (1 << c.block_log) << " tile " << c.tile;
    }
    // Synchronized tiles: also a round's blocks one graph each (blocks in flight on lanes),
    // and rounds searched in parts (at most 7 blocks a launch).
    if (c.tile && c.mode == mmp::TileMode::SyncAll) {
      p.search = gpus[0];
      setenv("VFP_MMP_ROUNDS", "0", 1);
      const mmp::PlaneResult flight = mmp::encode_plane(img.data(), c.w, c.h, p);
      unsetenv("VFP_MMP_ROUNDS");
      EXPECT_EQ(cpu.bytes, flight.bytes) << "blocks in flight: " << c.w << "x" << c.h << " tile " << c.tile;
      p.search = small_rounds;
      const mmp::PlaneResult parts = mmp::encode_plane(img.data(), c.w, c.h, p);
      EXPECT_EQ(cpu.bytes, parts.bytes) << "rounds of 7 blocks: " << c.w << "x" << c.h << " tile " << c.tile;
      EXPECT_EQ(cpu.recon, parts.recon);
    }
  }
  for (const auto& g : gpus) std::printf("[ info ] %s\n", g->stats().c_str());
  std::printf("[ info ] rounds of 7: %s\n", small_rounds->stats().c_str());
}

// Every block size, and rounds of one block and of many, on `gpu`.
static void small_planes(const std::shared_ptr<mmp::LeafSearch>& gpu) {
  for (int block_log = 3; block_log <= 5; ++block_log) {
    const int w = 40, h = 1 << block_log;
    const auto img = test_plane(2, w, h, 11);
    mmp::Params p;
    p.lambda = 25;
    p.block_log = block_log;
    const mmp::PlaneResult cpu = mmp::encode_plane(img.data(), w, h, p);
    p.search = gpu;
    const mmp::PlaneResult dev = mmp::encode_plane(img.data(), w, h, p);
    EXPECT_EQ(cpu.bytes, dev.bytes) << "block " << (1 << block_log);
    EXPECT_EQ(cpu.recon, dev.recon) << "block " << (1 << block_log);
  }
  // Rounds of several blocks in one launch (synchronized tiles): 6 tiles of four 8x8 blocks,
  // and 24 and 70 tiles of one block: the three ways a launch deals its tasks (spread():
  // fewer than 8 blocks, fewer than 64, more), each combining the 4x4 units' chunks its way.
  struct Case {
    int tile, w, h;
  };
  for (const Case c : {Case{16, 48, 32}, Case{8, 48, 32}, Case{8, 56, 80}}) {
    const int tile = c.tile, w = c.w, h = c.h;
    const auto img = test_plane(2, w, h, 13);
    mmp::Params p;
    p.lambda = 25;
    p.block_log = 3;
    p.tile_w = p.tile_h = tile;
    const mmp::PlaneResult cpu = mmp::encode_plane(img.data(), w, h, p);
    p.search = gpu;
    const mmp::PlaneResult dev = mmp::encode_plane(img.data(), w, h, p);
    EXPECT_EQ(cpu.bytes, dev.bytes) << "tiles of " << tile << " on " << w << "x" << h;
    EXPECT_EQ(cpu.recon, dev.recon) << "tiles of " << tile << " on " << w << "x" << h;
  }
}

// The block search's kernels on a few small planes (every block size, rounds of one block
// and of many; few launches: also run under memcheck and racecheck).
TEST(Gpu, MmpBlockSearchOnSmallPlanes) {
  REQUIRE_GPU();
  // Answer tables and rate order in every round (a block alone too): the kernels that build
  // and read them run here, under memcheck and racecheck as well.
  for (const auto& gpu : {cuda::make_mmp_leaf_search(cuda::MmpGpuSearch::Blocks), blocks_search_with("all")})
    small_planes(gpu);
}

// Whole frames through the container: gray, yuv420p and yuv444p, shared chroma, and the
// dictionaries carried from frame to frame (the device mirror follows them), also small
// ones that replace their least used elements.
TEST(Gpu, MmpFramesOnTheGpuGiveTheCpuBytes) {
  REQUIRE_GPU();
  auto gpu = cuda::make_mmp_leaf_search();
  for (PixelFormat f : {PixelFormat::GRAY8, PixelFormat::YUV420P, PixelFormat::YUV444P}) {
    for (int variant = 0; variant < 3; ++variant) {
      const bool carry = variant > 0, replace = variant == 2;  // replacing: small dictionaries that fill up
      const FrameSpec spec{f, 67, 45, {25, 1}};
      HostFrame frame(spec, false);
      mmp::Params p;
      p.lambda = 40;
      p.carry = carry;
      p.replace_least_used = replace;
      if (replace) p.max_dict = 90;
      mmp::PlaneStates cpu_states, gpu_states;
      for (int i = 0; i < 3; ++i) {
        const ImageView v = frame.view();
        fill_photo_like(v, static_cast<uint32_t>(10 * i));
        std::vector<std::vector<uint8_t>> a, b;
        p.search = nullptr;
        mmp::encode_frame(v, p, nullptr, &a, carry ? &cpu_states : nullptr);
        p.search = gpu;
        mmp::encode_frame(v, p, nullptr, &b, carry ? &gpu_states : nullptr);
        EXPECT_EQ(a, b) << pix_fmt_name(f) << " carry " << carry << " replace " << replace << " frame " << i;
      }
    }
  }
}
// Rounds of synchronized tiles learning on the device (LeafSearch::learns_rounds(), asked
// for with VFP_MMP_DEVICE_LEARN=1): the GPU keeps a replacing dictionary's elements and judges each round's new ones
// (RoundVerdicts), the plane's Dictionary keeps the counts, uses and ages and places them (add_decided()), and the GPU
// stores them. The bytes, the reconstruction and the element counts are the CPU's and those of the same search learning
// on the host, for every block size, small dictionaries that replace from the first rounds on, rounds of one tile and
// of many, several lambdas and kinds; and across frames with carried dictionaries and shared chroma (Cb's held
// dictionary goes on in Cr and in the next frames). A held dictionary cannot continue on the CPU.
TEST(Gpu, MmpRoundsLearnOnTheDevice) {
  REQUIRE_GPU();
  auto gpu = cuda::make_mmp_leaf_search();
  ASSERT_TRUE(gpu->learns_rounds());
  struct Case {
    int w, h, kind, block_log, tile, max_dict;
    double lambda;
    mmp::TileScan scan = mmp::TileScan::Raster;
  };
  for (const Case c :
       {Case{40, 8, 2, 3, 8, 64, 25}, Case{96, 80, 2, 4, 32, 90, 30}, Case{161, 97, 0, 4, 64, 72, 40},
        Case{136, 72, 1, 3, 8, 100, 10}, Case{99, 67, 4, 5, 32, 130, 20}, Case{128, 128, 2, 4, 128, 80, 5},
        Case{120, 90, 2, 4, 32, 512, 30}, Case{128, 64, 0, 3, 8, 300, 5},  // rounds of 128 blocks, many elements each
        // Wavefront rounds: several blocks of a tile learnt in a round.
        Case{161, 97, 0, 4, 64, 72, 40, mmp::TileScan::Wavefront},
        Case{256, 128, 2, 3, 64, 300, 10, mmp::TileScan::Wavefront}}) {
    const auto img = test_plane(c.kind, c.w, c.h, 21);
    mmp::Params p;
    p.lambda = c.lambda;
    p.block_log = c.block_log;
    p.tile_w = p.tile_h = c.tile;
    p.max_dict = c.max_dict;
    p.tile_scan = c.scan;
    const std::string what = std::to_string(c.w) + "x" + std::to_string(c.h) + " kind " + std::to_string(c.kind) +
                             " block " + std::to_string(1 << c.block_log) + " tile " + std::to_string(c.tile) +
                             " dict " + std::to_string(c.max_dict) + " " + mmp::tile_scan_name(c.scan);
    const mmp::PlaneResult cpu = mmp::encode_plane(img.data(), c.w, c.h, p);
    p.search = gpu;
    const mmp::PlaneResult host = mmp::encode_plane(img.data(), c.w, c.h, p);
    setenv("VFP_MMP_DEVICE_LEARN", "1", 1);
    const mmp::PlaneResult dev = mmp::encode_plane(img.data(), c.w, c.h, p);
    unsetenv("VFP_MMP_DEVICE_LEARN");
    EXPECT_TRUE(dev.device_learning) << what;
    EXPECT_FALSE(host.device_learning) << what;
    EXPECT_FALSE(cpu.device_learning) << what;
    EXPECT_EQ(cpu.bytes, dev.bytes) << what;
    EXPECT_EQ(cpu.recon, dev.recon) << what;
    EXPECT_EQ(cpu.dict_elements, dev.dict_elements) << what;
    EXPECT_EQ(cpu.bytes, host.bytes) << what;
  }
  // Frames: carried dictionaries (held from the first frame on) and shared chroma.
  setenv("VFP_MMP_DEVICE_LEARN", "1", 1);
  for (PixelFormat f : {PixelFormat::GRAY8, PixelFormat::YUV420P}) {
    for (bool carry : {false, true}) {
      const FrameSpec spec{f, 99, 70, {25, 1}};
      HostFrame frame(spec, false);
      mmp::Params p;
      p.lambda = 30;
      p.carry = carry;
      p.max_dict = 96;
      p.tile_w = p.tile_h = 32;
      mmp::PlaneStates cpu_states, gpu_states;
      for (int i = 0; i < 3; ++i) {
        const ImageView v = frame.view();
        fill_photo_like(v, static_cast<uint32_t>(31 * i));
        std::vector<std::vector<uint8_t>> a, b;
        p.search = nullptr;
        mmp::encode_frame(v, p, nullptr, &a, carry ? &cpu_states : nullptr);
        p.search = gpu;
        mmp::encode_frame(v, p, nullptr, &b, carry ? &gpu_states : nullptr);
        EXPECT_EQ(a, b) << pix_fmt_name(f) << " carry " << carry << " frame " << i;
      }
      if (carry) {  // the carried state lives on the device now
        const FrameSpec one{f, 99, 70, {25, 1}};
        HostFrame more(one, false);
        std::vector<std::vector<uint8_t>> c;
        p.search = nullptr;
        try {
          mmp::encode_frame(more.view(), p, nullptr, &c, &gpu_states);
          ADD_FAILURE() << "a held dictionary went on on the CPU";
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::Usage);
          EXPECT_NE(std::string(e.what()).find("GPU"), std::string::npos) << e.what();
        }
      }
    }
  }
  unsetenv("VFP_MMP_DEVICE_LEARN");
}

// The post-filter designed on the device (cuda/mmp_postfilter.hpp) against the CPU's
// design_post_filter(): the same classes on, the same taps, the same filtered plane, on
// reconstructions of every kind (blurred and noisy, flat, exact), odd sizes from 1x1 up to
// 1921x1081, and lambdas that keep every class, some or none. Few launches a plane: also
// run under the sanitizers.
TEST(Gpu, MmpPostFilterOnTheDeviceMatchesTheCpu) {
  REQUIRE_GPU();
  auto gpu = cuda::make_mmp_leaf_search();
  struct Case {
    int w, h, kind;
  };
  int some_on = 0, some_off = 0;
  for (const Case c : {Case{1, 1, 0}, Case{2, 1, 2}, Case{1, 5, 0}, Case{3, 7, 1}, Case{5, 3, 2}, Case{64, 48, 2},
                       Case{97, 61, 0}, Case{97, 61, 1}, Case{80, 80, 3}, Case{120, 66, 4}, Case{1921, 1081, 2}})
    for (int degrade = 0; degrade < 3; ++degrade)
      for (double lambda : {0.0, 20.0, 300.0, 5000.0}) {
        const auto orig = test_plane(c.kind, c.w, c.h, static_cast<uint32_t>(c.w * 31 + c.h + degrade));
        // The reconstruction: a 3-tap blur plus noise (degrade 1), noise alone (2), or exact (0).
        std::vector<uint8_t> rec(orig.size());
        std::mt19937 rng(static_cast<uint32_t>(c.w + 7 * degrade));
        for (int y = 0; y < c.h; ++y)
          for (int x = 0; x < c.w; ++x) {
            const size_t i = static_cast<size_t>(y) * c.w + x;
            int v = orig[i];
            if (degrade == 1) {
              const int l = orig[static_cast<size_t>(y) * c.w + std::max(x - 1, 0)];
              const int r = orig[static_cast<size_t>(y) * c.w + std::min(x + 1, c.w - 1)];
              v = (l + 2 * v + r + 2) / 4 + static_cast<int>(rng() % 7) - 3;
            } else if (degrade == 2) {
              v += static_cast<int>(rng() % 13) - 6;
            }
            rec[i] = static_cast<uint8_t>(std::clamp(v, 0, 255));
          }
        std::vector<uint8_t> want(orig.size()), got(orig.size(), 0xA5);
        const mmp::PostFilter a = mmp::design_post_filter(rec.data(), orig.data(), c.w, c.h, lambda, want.data());
        mmp::PostFilter b;
        ASSERT_TRUE(gpu->design_post_filter(rec.data(), orig.data(), c.w, c.h, lambda, &b, got.data()));
        const std::string what = std::to_string(c.w) + "x" + std::to_string(c.h) + " kind " + std::to_string(c.kind) +
                                 " degrade " + std::to_string(degrade) + " lambda " + std::to_string(lambda);
        for (int k = 0; k < mmp::kPostClasses; ++k) {
          EXPECT_EQ(a.on[k], b.on[k]) << what << " class " << k;
          for (int t = 0; t < mmp::kPostTaps; ++t) EXPECT_EQ(a.taps[k][t], b.taps[k][t]) << what << " class " << k;
          some_on += a.on[k], some_off += !a.on[k];
        }
        ASSERT_TRUE(want == got) << what;
      }
  EXPECT_GT(some_on, 20);  // the cases do exercise both outcomes
  EXPECT_GT(some_off, 20);
}

// Params::blocks_coded (what the stage's staggered frames follow) counts every block of the
// frame on the GPU paths too: untiled, in rounds of synchronized tiles, independent tiles.
TEST(Gpu, MmpCountsTheBlocksItCodes) {
  REQUIRE_GPU();
  auto gpu = cuda::make_mmp_leaf_search();
  const FrameSpec spec{PixelFormat::YUV420P, 67, 45, {25, 1}};
  HostFrame frame(spec, false);
  test::fill_random(frame, 5);
  for (const int tile : {0, 32})
    for (const mmp::TileMode mode : {mmp::TileMode::SyncAll, mmp::TileMode::Independent}) {
      mmp::Params p;
      p.lambda = 40;
      p.search = gpu;
      p.tile_w = p.tile_h = tile;
      p.tile_mode = mode;
      std::atomic<int64_t> blocks{0};
      p.blocks_coded = &blocks;
      mmp::encode_frame(frame.view(), p, nullptr, nullptr, nullptr);
      EXPECT_EQ(blocks.load(), mmp::frame_blocks(spec, p)) << "tile " << tile;
    }
}

// A replacing dictionary the GPU first sees after many changes (its change log has wrapped:
// the mirror takes the whole scales) and then follows by the log: a carried state coded on
// the CPU for a frame, then on the GPU, writes what the CPU alone writes, untiled and with
// synchronized tiles.
TEST(Gpu, MmpMirrorCatchesUpWithAReplacingDictionary) {
  REQUIRE_GPU();
  auto gpu = cuda::make_mmp_leaf_search();
  const int w = 256, h = 192;  // noise: every block teaches new elements (far more than 4096 changes a scale)
  const auto noise = test_plane(0, w, h, 3), photo = test_plane(2, w, h, 4);
  for (int tile : {0, 64}) {
    mmp::Params p;
    p.lambda = 20;
    p.max_dict = 96;
    p.tile_w = p.tile_h = tile;
    mmp::PlaneState cpu(p), mixed(p);
    const mmp::PlaneResult a0 = mmp::encode_plane(noise.data(), w, h, p, &cpu);
    const mmp::PlaneResult b0 = mmp::encode_plane(noise.data(), w, h, p, &mixed);
    EXPECT_EQ(a0.bytes, b0.bytes);
    for (const auto* img : {&photo, &noise}) {
      const mmp::PlaneResult a = mmp::encode_plane(img->data(), w, h, p, &cpu);
      mmp::Params q = p;
      q.search = gpu;
      const mmp::PlaneResult b = mmp::encode_plane(img->data(), w, h, q, &mixed);
      EXPECT_EQ(a.bytes, b.bytes) << "tile " << tile;
      EXPECT_EQ(a.recon, b.recon) << "tile " << tile;
    }
  }
}

// Frames encoded at once on the GPU (rounds of several frames' planes searched together)
// write the file that one frame at a time writes.
TEST(Gpu, MmpFramesInFlightOnTheGpu) {
  REQUIRE_GPU();
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("mmp_in_flight_gpu");
  std::filesystem::create_directories(dir);
  const std::string y4m = dir + "/in.y4m";
  ASSERT_EQ(test::run_cmd(bin + " run -q -i 'synthetic=size=160x96:frames=4:noise=gauss:sigma=5' -o " + y4m).rc, 0);
  for (const std::string tile : {"32", "0", "64 --tile-scan wavefront"}) {
    std::string first;
    for (const char* n : {"1", "4"}) {
      const std::string out = dir + "/t" + tile.substr(0, 2) + "_" + n + ".mmp";
      const auto r = test::run_cmd(bin + " mmp encode " + y4m + " -o " + out + " --lambda 30 --device cuda --tile " +
                                   tile + " --frames-in-flight " + n);
      ASSERT_EQ(r.rc, 0) << r.out;
      if (first.empty()) {  // and the CPU's bytes
        first = test::read_file(out);
        const std::string cpu = dir + "/cpu.mmp";
        ASSERT_EQ(
            test::run_cmd(bin + " mmp encode " + y4m + " -o " + cpu + " -y --lambda 30 --device cpu --tile " + tile).rc,
            0);
        EXPECT_EQ(test::read_file(cpu), first) << "tile " << tile;
      }
      EXPECT_EQ(test::read_file(out), first) << "tile " << tile << ", --frames-in-flight " << n;
    }
  }
}

// The mmp stage between other stages writes one bitstream and passes on the same frames
// whether the chain runs on the CPU backend (search=cpu, or search=cuda: the CPU backend's
// stage searching on the GPU) or on the CUDA backend (frames down to the encoder, its
// search on the GPU, the reconstruction back up; depth 3, so slots are reused).
// The stage through `vfpipe run` on the GPU gives the CPU's bitstream and frames: with
// carry and a bitstream file (frames coded in order), with a file but no carry (frames in
// flight, appended in order) and with neither; frames in flight staggered (the default)
// or started together (VFP_MMP_STAGGER=0).
TEST(Gpu, MmpStageSearchesOnTheGpu) {
  REQUIRE_GPU();
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("mmp_stage_gpu");
  std::filesystem::create_directories(dir);
  struct Run {
    const char *name, *device, *search, *env;
  };
  for (const char* variant : {"carry", "file", "plain"}) {
    const std::string v = variant;
    for (const Run& run : {Run{"cpu", "cpu", ":search=cpu", ""}, Run{"cpu-search-cuda", "cpu", ":search=cuda", ""},
                           Run{"cuda", "cuda", "", ""}, Run{"cuda-unstaggered", "cuda", "", "VFP_MMP_STAGGER=0 "}}) {
      const std::string name = v + "-" + run.name;
      const std::string opts =
          (v == "carry" ? ":carry=1" : "") + (v == "plain" ? std::string() : ":file=" + dir + "/" + name + ".mmp");
      const test::CmdResult r = test::run_cmd(
          run.env + bin +
          " run -i 'synthetic=size=96x64:frames=6:noise=gauss:sigma=3' -f 'median=radius=1,mmp=lambda=30:tile=32" +
          opts + run.search + ",conv=gauss:size=3' --depth 3 --device " + run.device + " -o " + dir + "/" + name +
          ".y4m --profile " + dir + "/" + name);
      ASSERT_EQ(r.rc, 0) << r.out;
      if (std::string(run.name) != "cpu") {  // the search's device time, which cannot be 0
        const size_t at = r.out.find("GPU search time ");
        ASSERT_NE(at, std::string::npos) << r.out;
        EXPECT_GT(std::stod(r.out.substr(at + 16)), 0.0) << r.out;
        const size_t row = r.out.find("mmp GPU search (ms)");
        ASSERT_NE(row, std::string::npos) << r.out;
        std::istringstream fields(r.out.substr(row + 19));
        std::string where;
        int count = 0;
        double min_ms = 0;
        fields >> where >> count >> min_ms;
        EXPECT_EQ(where, "stage");
        EXPECT_GT(count, 0);
        EXPECT_GT(min_ms, 0.0) << r.out;  // each frame's own share, also with frames in flight
      }
    }
    for (const char* other : {"cpu-search-cuda", "cuda", "cuda-unstaggered"}) {
      const std::string a = dir + "/" + v + "-cpu", b = dir + "/" + v + "-" + other;
      if (v != "plain") EXPECT_EQ(test::run_cmd("cmp " + a + ".mmp " + b + ".mmp").rc, 0) << b;
      EXPECT_EQ(test::run_cmd("cmp " + a + ".y4m " + b + ".y4m").rc, 0) << b;
    }
  }
  std::filesystem::remove_all(dir);
}

// gpus=N asks for N of the machine's GPUs: more than it has is a usage error that names the
// option (run on every GPU machine); gpus=1 and all the GPUs there are encode the CPU's frames.
TEST(Gpu, MmpStageGpusAreCountedAgainstTheMachine) {
  REQUIRE_GPU();
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("mmp_gpus_count");
  std::filesystem::create_directories(dir);
  const int n = cuda::device_count();
  const std::string in = "-i 'synthetic=size=96x64:frames=5:noise=gauss:sigma=3' ";
  const auto r = test::run_cmd(bin + " run -q " + in + "-f 'mmp=lambda=30:gpus=" + std::to_string(n + 1) +
                               "' --device cuda -o null");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("gpus=" + std::to_string(n + 1) + ": " + std::to_string(n) + " GPU"), std::string::npos)
      << r.out;
  ASSERT_EQ(test::run_cmd(bin + " run -q " + in + "-f 'mmp=lambda=30:tile=32' --device cpu -o " + dir + "/cpu.y4m").rc,
            0);
  // Two searches on each GPU (a switch for measurements) deal the frames as two GPUs would.
  for (const std::string g : {"1", "all", "all-2"}) {
    const std::string out = dir + "/gpus_" + g + ".y4m";
    const auto run = test::run_cmd((g == "all-2" ? "VFP_MMP_SEARCHES_PER_GPU=2 " : "") + bin + " run " + in +
                                   "-f 'mmp=lambda=30:tile=32:gpus=" + g.substr(0, 3) + "' --device cuda -o " + out);
    ASSERT_EQ(run.rc, 0) << run.out;
    EXPECT_EQ(test::run_cmd("cmp " + dir + "/cpu.y4m " + out).rc, 0) << "gpus=" << g;
    EXPECT_EQ(run.out.find("gpus=all") != std::string::npos, g != "1") << run.out;  // the step's label
    // Frames on several GPUs take two searches a GPU by default.
    if (n > 1 && g != "1")
      EXPECT_NE(run.out.find(" s on " + std::to_string(n) + " GPUs, 2 searches each ("), std::string::npos) << run.out;
    // The pool: the cores the 8 frame threads leave, at least half, at most two a frame.
    const int cores = available_cores(), pool = std::max(1, std::min(std::max(cores / 2, cores - 8), 16));
    if (g == "1")
      EXPECT_NE(run.out.find(", " + std::to_string(pool) + " CPU pool threads"), std::string::npos) << run.out;
  }
  std::filesystem::remove_all(dir);
}

// Frames dealt to several GPUs (skipped on machines with one): the stage with a bitstream
// file and `mmp encode --gpus all` write the CPU's bytes, with every GPU's search used.
TEST(MultiGpu, MmpFramesOnEveryGpuGiveTheCpuBytes) {
  REQUIRE_GPU();
  const int n = cuda::device_count();
  if (n < 2) GTEST_SKIP() << "this machine has " << n << " GPU";
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("mmp_multi_gpu");
  std::filesystem::create_directories(dir);
  const std::string y4m = dir + "/in.y4m";
  ASSERT_EQ(test::run_cmd(bin + " run -q -i 'synthetic=size=161x97:frames=" + std::to_string(4 * n + 1) +
                          ":noise=gauss:sigma=5' -o " + y4m)
                .rc,
            0);
  for (const std::string tile : {"32", "0"}) {
    const std::string cpu = dir + "/cpu" + tile;
    ASSERT_EQ(
        test::run_cmd(bin + " mmp encode " + y4m + " -o " + cpu + ".mmp --lambda 30 --device cpu --tile " + tile).rc,
        0);
    const auto enc = test::run_cmd(bin + " mmp encode " + y4m + " -o " + dir + "/gpus" + tile +
                                   ".mmp --lambda 30 --device cuda --gpus all --tile " + tile);
    ASSERT_EQ(enc.rc, 0) << enc.out;
    EXPECT_EQ(test::read_file(cpu + ".mmp"), test::read_file(dir + "/gpus" + tile + ".mmp")) << "tile " << tile;
    for (int d = 0; d < n; ++d)  // every GPU searched (its line of statistics)
      EXPECT_NE(enc.out.find("search on cuda:" + std::to_string(d) + ": "), std::string::npos) << enc.out;
    const auto stage = [&](const std::string& name, const std::string& opts, const std::string& device) {
      const std::string at = dir + "/" + name + tile;
      const auto run = test::run_cmd(bin + " run -i " + y4m + " -f 'mmp=lambda=30:tile=" + tile + opts + ":file=" + at +
                                     ".mmp' --device " + device + " -o " + at + ".y4m");
      EXPECT_EQ(run.rc, 0) << run.out;
      return run.out;
    };
    stage("stage_cpu", "", "cpu");
    const std::string out = stage("stage_gpus", ":gpus=all", "cuda");
    EXPECT_NE(out.find(" s on " + std::to_string(n) + " GPUs, 2 searches each ("), std::string::npos) << out;
    for (const char* ext : {".mmp", ".y4m"})
      EXPECT_EQ(test::read_file(dir + "/stage_cpu" + tile + ext), test::read_file(dir + "/stage_gpus" + tile + ext))
          << "tile " << tile << ext;
  }
  std::filesystem::remove_all(dir);
}

// Without --depth a file through the mmp stage on the CUDA backend runs 8 frames in flight
// (the stage's frames_in_flight(); 8 a GPU with gpus=all), fewer where conv stages need the
// constant-memory banks, 3 with carried dictionaries, live, or with no such stage; --depth wins.
TEST(Gpu, MmpStageSetsTheDefaultDepth) {
  REQUIRE_GPU();
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("mmp_depth_gpu");
  std::filesystem::create_directories(dir);
  struct Case {
    const char *filters, *extra;
    int depth;
  };
  const int all = std::min(64, 8 * cuda::device_count());  // gpus=all: 8 a GPU
  for (const Case& c : {Case{"mmp=lambda=40:tile=32", "", 8}, Case{"mmp=lambda=40:tile=32", "--depth 4", 4},
                        Case{"mmp=lambda=40:tile=32:gpus=all", "", all}, Case{"mmp=lambda=40:tile=32:carry=1", "", 3},
                        Case{"mmp=lambda=40:tile=32", "--policy live", 3},
                        Case{"conv=gauss:size=3,conv=gauss:size=3,conv=gauss:size=3,mmp=lambda=40:tile=32", "", 5},
                        Case{"median=radius=1", "", 3}}) {
    const std::string report = dir + "/r.json";
    const test::CmdResult r =
        test::run_cmd(bin + " run -q -i 'synthetic=size=64x64:frames=4:noise=gauss:sigma=3' -f '" + c.filters +
                      "' --device cuda -o null --report " + report + " " + c.extra);
    ASSERT_EQ(r.rc, 0) << c.filters << " " << c.extra << ": " << r.out;
    const std::string json = test::read_file(report);
    const size_t at = json.find("\"depth\"");
    ASSERT_NE(at, std::string::npos) << json.substr(0, 300);
    EXPECT_EQ(std::stoi(json.substr(json.find(':', at) + 1)), c.depth) << c.filters << " " << c.extra;
  }
  std::filesystem::remove_all(dir);
}
#endif
