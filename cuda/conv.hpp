// CUDA convolution of 8-bit and 16-bit planes, bit-identical to the CPU reference (cpu/conv.hpp).
//
// Taps live in __constant__ memory: 16 banks of 1024 floats. Each conv stage reserves one
// bank per frame in flight (slot), and uploads a slot's taps with cudaMemcpyToSymbolAsync
// on the stage's stream only when they changed since that bank was last written. A live
// kernel change therefore reaches exactly the frames submitted after it, while frames in
// flight keep reading their own bank.
#pragma once
#include <cstdint>
#include <vector>

#include "core/gpu.hpp"
#include "cpu/conv.hpp"
#include "cuda/kernels.hpp"

namespace vfp::cuda {

constexpr int kConvBanks = 16;

class ConvTaps {
 public:
  explicit ConvTaps(int slots);  // throws vfp::Error when the banks are exhausted
  ~ConvTaps();
  ConvTaps(const ConvTaps&) = delete;
  ConvTaps& operator=(const ConvTaps&) = delete;

  // Makes `slot`'s bank hold these taps (stream-ordered upload if `version` is new to it).
  void use(const ConvParams& p, bool separable, uint64_t version, int slot, StreamHandle s);
  // Filters one plane (pitches in bytes) with the taps last given to use() for this slot.
  // 16-bit samples: the same arithmetic at ConvParams::at_16_bits(), in plainer kernels (a
  // thread an output, no word loads), equal to the CPU's 16-bit reference.
  void run(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, int slot, StreamHandle s) const;
  void run(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h, int slot, StreamHandle s) const;
  int bank(int slot) const { return banks_[static_cast<size_t>(slot) % banks_.size()]; }

 private:
  int device_;  // banks are per device
  std::vector<int> banks_;
  std::vector<uint64_t> versions_;
  std::vector<ConvParams> params_;  // per slot: what its bank holds
  std::vector<char> separable_;
};

// Programmatic dependent launch (on by default, sm_90+, square kernels up to 7x7): a conv
// kernel may be scheduled while the previous kernel on its stream drains, and waits on the
// device for it to finish, hiding the launch gap (~1 us on the H100) in chains of kernels.
// Off: plain stream order (the benchmark measures both).
void conv_set_programmatic_launch(bool on);

// Without the stage machinery (benchmarks, tests): upload to bank 0 and run.
void conv_plane_async(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const ConvParams& p,
                      bool separable, StreamHandle s);
void conv_plane_async(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h, const ConvParams& p,
                      bool separable, StreamHandle s);

}  // namespace vfp::cuda
