// The MMP encoder's leaf search on the GPU (codecs/mmp/search.hpp): for each residue of a
// unit, each scale and each segment, every dictionary element is tried (no pruning: the
// device has the arithmetic to spare) and the least J = double(SSE) + lambda * (index bits
// + leaf bits) wins, ties to the lower index: the table the CPU's pruned search gives, bit
// for bit (rounded products and sums, never fused).
//
// The dictionaries live in device memory, mirrored as they grow: each search uploads only
// the elements added since the last one (elements are appended, never changed). The index
// costs are uploaded when their id changes. One thread block per group of up to 8 segments
// of one scale (across the residues): the segments sit in shared memory, the threads stride
// over the scale's elements (two at a time), read each element once for all the group's
// segments, compute SSE = |x|^2 + |d|^2 - 2 x.d (exact integers, the squared norms computed
// once), and reduce (J, index) lexicographically per segment. A group of large segments
// has its elements dealt to several blocks (about one per 32 of its samples), whose minima
// a second kernel combines: otherwise the few blocks of the largest scales run long after
// the rest. Each calling thread has a lane of its own (stream, costs, buffers): the tiles of
// a round, coded on several threads, search at once.
#pragma once
#include <memory>

#include "codecs/mmp/search.hpp"

namespace vfp::cuda {

// How the encoder uses the GPU: whole blocks, one CUDA graph a round of synchronized tiles
// (each kernel launched once for the round's blocks; a block alone is a round of one: the
// default); whole blocks, the same kernels launched one by one; or one leaf search per
// prediction unit, the rest of the block's work on the CPU. The bytes are the same; the
// first is fastest (docs/perf.md).
enum class MmpGpuSearch { Blocks, BlocksUngraphed, Units };

// A search on the calling thread's current device. Throws vfp::Error (Gpu) without one.
std::shared_ptr<mmp::LeafSearch> make_mmp_leaf_search(MmpGpuSearch how = MmpGpuSearch::Blocks);

}  // namespace vfp::cuda
