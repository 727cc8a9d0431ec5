// The streaming engine (copy/compute overlap over several CUDA streams, generalised):
//
//   source thread --[bounded queue]--> GPU/CPU worker --[bounded queue]--> sink thread
//
// CUDA backend: an upload, a compute and a download stream, and `depth` slots of device
// buffers and events. Frame N is uploaded (H2D, pinned memory, cudaMemcpyAsync), run
// through every stage and downloaded (D2H), each step on its stream after an event of
// the previous one, so while frame N computes, frame N+1 uploads and frame N-1 downloads.
// A completion thread hands each frame to the sink as soon as its download is done, in
// submission order, so frames come out in order and wait for nothing but their own work.
// A stage with host work inside (Stage::host_async(), the MMP encoder) has up to `depth`
// frames' host parts going at once: a tail thread queues the rest of each frame's chain
// once its host part is done (docs/architecture.md).
// All buffers (pinned host frames, device frames, intermediate stage outputs) are
// allocated once before the first frame.
//
// Policies: Batch blocks the source when the queue is full (back-pressure, nothing
// dropped); Live keeps the newest frame and counts the ones it replaced.
#pragma once
#include <atomic>
#include <exception>
#include <functional>

#include "pipeline/chain.hpp"
#include "pipeline/source.hpp"
#include "pipeline/stats.hpp"

namespace vfp {

enum class Policy { Batch, Live };

// How the CUDA backend learns that a frame's download is done (docs/architecture.md):
// Event: a completion thread blocks in cudaEventSynchronize on the download's event;
// HostFunc: a cudaLaunchHostFunc callback queued after the download wakes that thread.
enum class Completion { Event, HostFunc };

struct EngineConfig {
  Backend backend = Backend::CPU;
  Policy policy = Policy::Batch;
  int depth = 3;  // frames in flight on the GPU (buffer slots), >= 2
  int queue = 4;  // capacity of each inter-thread queue
  Completion completion = Completion::Event;
  int64_t max_frames = -1;  // stop after this many source frames (-1: until the end)
  // > 0: frame n is passed on no earlier than its timestamp after the first frame's
  // (Source::time_of), or n / pace_fps seconds where the source has none, as ffmpeg's -re
  // (a file played at its own rate, for the display or a latency measurement).
  double pace_fps = 0;
  int warmup = 0;               // frames left out of the summary statistics
  size_t max_records = 100000;  // per-frame timing records kept (the newest); 0 = all
  // false: no per-step timing events, no records (frames are only counted). For measuring
  // what the timing itself costs (vfpipe-bench-engine --timing-overhead).
  bool timing = true;
  const std::atomic<int>* stop = nullptr;  // non-zero: finish in-flight frames and stop
  // Called from the sink thread after each written frame.
  std::function<void(int64_t frames_out, int64_t dropped)> progress;
  // Called from the sink thread with each written frame's record (output_ns set), before
  // the report keeps it, and the frames dropped so far: periodic statistics (--stats-every).
  std::function<void(const FrameRecord& rec, int64_t dropped)> on_frame;
  // Called on the worker thread before each frame is submitted (index = source frame
  // number): the place for live parameter changes. Frames already in flight are not
  // affected; stages apply a change to the frames submitted after it.
  std::function<void(int64_t index, Chain& chain)> before_frame;
  // Optional, with before_frame: whether a change is due before frame `index`. Without it
  // every frame may bring one, and where part of a chain is queued after later frames have
  // started (a host_async() stage on the CUDA backend), the engine waits for the earlier
  // frames' parts before each call, which stops their overlap.
  std::function<bool(int64_t index)> change_due;
};

struct RunResult {
  RunReport report;
  std::exception_ptr error;  // first failure (source, stage, sink); frames before it were written
};

// Runs the whole stream. The sink must already be open for chain.output(); the engine
// closes it at the end, also after an error, so the output stays valid.
RunResult run_pipeline(Source& src, Chain& chain, Sink& sink, const EngineConfig& cfg);

}  // namespace vfp
