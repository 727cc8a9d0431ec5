// NVDEC through NVIDIA's own video parser and decoder API (libnvcuvid, loaded at run time),
// for the streams where it pays: 8-bit 4:2:0 H.264 and HEVC decoded into the CUDA backend's
// GPU frames. libavcodec's NVDEC hwaccel makes a new hardware decoder for every stream and
// the driver serialises that across all GPUs of the machine (about 85 ms a file on an H200,
// docs/perf.md): a batch of short files then runs no faster on two GPUs than on one. Here a
// finished stream's decoder is kept (enable_reuse) and the next stream of the same format
// on the same GPU takes it. libavformat still demuxes and libavcodec's bitstream filters put
// the packets into Annex B; everything else a libav source does (timestamps, damage, -ss/-t)
// stays in io/libav.cpp, which uses this through a small decode/receive interface.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

struct AVCodecParameters;
struct AVPacket;

namespace vfp::nvdec {

// Whether this path takes a stream (codec, pixel format, size) and NVDEC's library loads;
// `why` when not (the caller then uses libavcodec's decoder).
bool supports(const AVCodecParameters* par, std::string* why);

// One decoded picture, mapped in GPU memory until `mapping` is released: NV12, its luma and
// interleaved chroma planes (CUdeviceptr) at the display area's corner, `pitch` bytes a row.
struct Picture {
  uint64_t luma = 0, chroma = 0;
  unsigned pitch = 0;
  int width = 0, height = 0;
  int64_t pts = 0;
  bool has_pts = false;
  std::shared_ptr<void> mapping;  // unmaps the picture when the last holder lets go
};

// One stream's decoding on the CUDA context `cuda_ctx` (a CUcontext); pictures are mapped
// on `stream` (a CUstream), which work that reads them must wait for.
class StreamDecoder {
 public:
  StreamDecoder(const AVCodecParameters* par, void* cuda_ctx, void* stream);  // throws vfp::Error (Input)
  ~StreamDecoder();
  StreamDecoder(const StreamDecoder&) = delete;
  StreamDecoder& operator=(const StreamDecoder&) = delete;
  // A packet of the stream (null: its end). 0, or a negative AVERROR code.
  int send(const AVPacket* packet);
  // The next picture in display order: 0, AVERROR(EAGAIN) (send more) or AVERROR_EOF.
  int receive(Picture* out);
  // Whether this stream's hardware decoder was one a finished stream left (reuse).
  bool reused_decoder() const;

  struct State;

 private:
  std::shared_ptr<State> s_;
};

// Keep up to `max_idle` finished streams' decoders per format and GPU for the next streams
// (0: off, the default; what is kept is then destroyed). For vfpipe batch.
void enable_reuse(int max_idle);
struct Stats {
  int64_t created = 0, reused = 0;  // hardware decoders made, and taken from finished streams
};
Stats stats();

}  // namespace vfp::nvdec
