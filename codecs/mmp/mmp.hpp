// MMP (Multidimensional Multiscale Parser) intra coding of one 8-bit plane —
// the exact CPU codec (docs/mmp.md defines the bitstream).
//
// Per B x B block (B = 16, or 8 / 32 by option), raster order: a prediction tree
// (the block is predicted whole, or split into four quadrants, each predicted whole
// or split again, down to 4x4, Z order); every prediction unit has an H.264-style
// intra mode (none, DC, V, H, plane and six diagonal modes, from already decoded
// neighbours) and its residue is approximated by a binary segmentation tree
// whose leaves are elements of multiscale dictionaries (scales 2^lw x 2^lh,
// lw, lh in 0..log2 B: 25 for B = 16). The prediction tree, modes and segmentation are chosen
// together by J = SSE + lambda * bits (bits from the current adaptive models).
// After each block every internal node of its segmentation trees (the
// concatenation of two coded siblings) becomes a new element of its scale and,
// resized, of every other scale, unless an equal element is there already; a full
// scale replaces its least used learnt element (codecs/mmp/dictionary.hpp). The
// decoder repeats the same updates, so the decoded plane equals the encoder's
// reconstruction bit for bit.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace vfp::mmp {

class LeafSearch;

constexpr int kModes = 11;                         // prediction modes, in bitstream order (docs/mmp.md)
constexpr int kMinBlockLog = 3, kMaxBlockLog = 5;  // block sizes 8, 16, 32
// log2 of a block size of 8, 16 or 32; -1 for any other size.
// The fewest payload bytes a w x h plane can be coded in: each block codes at least its
// prediction mode with the adaptive models, and an adaptive bit costs at least
// -log2(2017/2048) = 0.022 bits (11-bit probabilities adapted by 1/32 saturate at 2017).
// Half of that bound is used, so no valid stream falls below it; a header that claims a
// frame its data cannot hold is rejected before anything frame-sized is allocated.
size_t min_plane_bytes(int w, int h, int block_log);
inline int block_log_of_size(long long size) { return size == 8 ? 3 : size == 16 ? 4 : size == 32 ? 5 : -1; }
const char* mode_name(int mode);

// How the tiles of a tiled plane share what the codec learns (docs/mmp.md, "Tiles"). Each
// tile has its own range-coded stream and predicts only from its own decoded samples.
enum class TileMode : uint8_t {
  // Own dictionaries and models per tile: tiles are coded and decoded wholly in parallel.
  Independent = 0,
  // One set of dictionaries per plane, updated in rounds: in round k every tile codes its
  // k-th block against the dictionaries as they stood at the round's start, then the
  // round's new elements are added in tile order. Models adapt per tile.
  SyncDictionaries = 1,
  // As SyncDictionaries, and one set of models per plane too: a round codes with the models
  // as they stood at its start (frozen), then they adapt to the round's bits in tile order.
  SyncAll = 2,
};
const char* tile_mode_name(TileMode m);
// "independent", "sync-dict", "sync"; false for anything else.
bool parse_tile_mode(const std::string& s, TileMode* out);

// The order of the rounds of synchronized tiles (docs/mmp.md, "Wavefront rounds").
enum class TileScan : uint8_t {
  // Round k codes block k (raster order) of every tile: as many rounds as a tile has blocks.
  Raster = 0,
  // Round r codes every block (x, y) (in blocks) with x + 2y = r of every tile, whose left,
  // top and top-right neighbours were decoded in earlier rounds: a 32x32-block tile takes
  // 94 rounds instead of 1024. Every block of a round codes against the dictionaries and
  // models as they stood at the round's start; then the round's learning is merged in tile,
  // then block order.
  Wavefront = 1,
};
const char* tile_scan_name(TileScan s);
// "raster", "wavefront"; false for anything else.
bool parse_tile_scan(const std::string& s, TileScan* out);

struct Params {
  double lambda = 32;  // Lagrangian multiplier of J = SSE + lambda * bits
  int block_log = 4;   // block size 2^block_log: 8, 16 (default) or 32; in the container
  // Elements per scale, 64..4096 (indices are 12-bit), in the container. 512 that replace
  // their least used code as well as 4096 that stop when full, and search 2x faster on the
  // GPU (docs/mmp.md, "Dictionary size").
  int max_dict = 512;
  // In the container: a full scale replaces its least used learnt element with each new one
  // (codecs/mmp/dictionary.hpp); false: a full scale takes no more.
  bool replace_least_used = true;
  // Encoder only (not in the bitstream): how many of the 11 modes, ranked by
  // the SSE of their prediction, get the full segmentation search in each
  // prediction unit (1..11).
  int mode_candidates = 4;
  // Encoder only: the smallest prediction unit the encoder tries, 4, 8 or 16 samples a side
  // (at most the block). The bitstream still codes every area's split flag; larger units
  // mean fewer units that predict from each other's reconstruction.
  int min_unit = 4;
  // Encoder only: search every dictionary element instead of pruning by the sum
  // bound (same decisions, much slower; the tests check that both agree).
  bool exhaustive = false;
  // Container (.mmp) option: each plane's dictionaries and models carry over
  // from one frame to the next instead of starting fresh (frames are then
  // decodable only in order).
  bool carry = false;
  // Container (.mmp) option: the second chroma plane (Cr) continues the dictionaries and
  // models the first (Cb) left, instead of starting fresh; with `carry`, the two chroma
  // planes keep one state across frames. The planes of a colour frame are then coded as
  // luma in parallel with Cb-then-Cr. Cr costs 13-25% fewer bytes at lower error on the
  // test photographs (docs/mmp.md).
  bool shared_chroma = true;
  // Container (.mmp) option: each plane's stream ends with a restoration post-filter
  // (codecs/mmp/postfilter.hpp) that the decoder applies to the decoded plane; the
  // encoder designs it by least squares against the original.
  bool post_filter = true;
  // Tiles of the plane (samples; multiples of the block size), 0 x 0 = untiled. In the
  // container the grid is given in luma samples and a chroma plane's tiles are scaled by
  // its subsampling (plane_tile_size()).
  int tile_w = 0, tile_h = 0;
  TileMode tile_mode = TileMode::SyncAll;
  // In the container (with the tile mode): the order of the rounds of synchronized tiles.
  TileScan tile_scan = TileScan::Raster;
  bool tiled() const { return tile_w > 0 && tile_h > 0; }
  // Encoder only: where the leaf search runs (codecs/mmp/search.hpp); null: this CPU. The
  // bytes are the same either way.
  std::shared_ptr<LeafSearch> search;
  // Encoder only: where the search also adds its device time (ns) for this encode, so that
  // frames encoded at once each get their own; null: none.
  std::atomic<int64_t>* device_ns = nullptr;
  // Encoder only: counts the blocks coded (every plane's, as they are coded), so that a
  // caller can follow an encode's progress; null: none.
  std::atomic<int64_t>* blocks_coded = nullptr;
};

// A plane's tile size from the frame's (luma) tile size: shifted by the plane's
// subsampling, rounded up to whole blocks.
int plane_tile_size(int luma_tile, int shift, int block_log);
// Throws vfp::Error (`kind`) when a w x h plane would have more tiles than p.tile_mode
// allows (1024 with per-tile state, 16384 for sync).
void check_tile_count(int w, int h, const Params& p, ErrorKind kind);
// Reads a tile size, "WxH" or "N" (N x N) or "0" / "off" (untiled), into p.tile_w and
// p.tile_h; throws vfp::Error (Usage) naming the text otherwise. check_tiles() checks it
// against the block size.
void parse_tile_size(const std::string& text, Params* p);
// Throws vfp::Error (Usage) when a tile size is not 0 x 0 or positive multiples of the
// block size up to 16384, or a wavefront scan is asked of planes without synchronized tiles.
void check_tiles(const Params& p);

// Returns p.block_log; throws vfp::Error (Usage) when it is not 3, 4 or 5.
int checked_block_log(const Params& p);
// Throws vfp::Error (Usage) when p.lambda is NaN, infinite or negative.
void check_lambda(const Params& p);

// Dictionaries and adaptive models of one plane. Passing the same state to
// consecutive encode_plane (decode_plane) calls keeps what earlier frames
// learned; the decoder must be given the same sequence of planes.
class PlaneState {
 public:
  explicit PlaneState(const Params& p);  // p.max_dict and p.lambda shape the dictionaries
  ~PlaneState();
  PlaneState(const PlaneState&) = delete;
  PlaneState& operator=(const PlaneState&) = delete;
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

struct PlaneResult {
  std::vector<uint8_t> bytes;  // range-coded payload of the plane
  std::vector<uint8_t> recon;  // the decoder's output, w*h
  double sse = 0;
  int64_t blocks = 0, leaves = 0, dict_elements = 0;
  int64_t modes[kModes] = {};    // prediction units per mode
  int64_t unit_sizes[4] = {};    // prediction units of 32x32, 16x16, 8x8, 4x4
  int64_t splits[2] = {0, 0};    // segment splits into left|right, top/bottom
  int post_filter_classes = 0;   // activity classes the post-filter changes (0..4)
  int tiles = 1;                 // tiles of the plane (1 untiled)
  bool device_learning = false;  // its dictionaries learnt on the search's device (LeafSearch::learns_rounds())
  // Where the encoder's time went, in seconds summed over threads: the blocks' search (on
  // Params::search's backend), their range coding with the model updates, the dictionary
  // updates, the post-filter's design and application.
  double search_s = 0, coding_s = 0, learning_s = 0, post_filter_s = 0;
};

// `state` null: fresh dictionaries and models (an independent plane). Tiles are coded on
// the process-wide CPU pool; the bytes do not depend on the number of threads.
PlaneResult encode_plane(const uint8_t* img, int w, int h, const Params& p, PlaneState* state = nullptr);
// Throws vfp::Error (Input) for corrupt or truncated data.
std::vector<uint8_t> decode_plane(const uint8_t* data, size_t n, int w, int h, const Params& p,
                                  PlaneState* state = nullptr);

// The separable scale transform between element sizes (exposed for tests):
// shrinking by k averages k samples, rounded half up (floor((2*sum + k) /
// (2k))); enlarging repeats samples.
std::vector<int16_t> resize_element(const std::vector<int16_t>& e, int lw1, int lh1, int lw2, int lh2);

// The N x N prediction (N = 4, 8, 16, 32) of `mode` for the block at (x, y) of a W
// x H plane `rec`, whose decoded pixels are marked in `done` (exposed for
// tests).
void predict_block(const uint8_t* rec, const uint8_t* done, int W, int H, int x, int y, int N, int mode, int* pred);

}  // namespace vfp::mmp
