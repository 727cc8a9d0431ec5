// The stage interface. A stage is one settings struct with its option declaration
// (core/options.hpp), one CPU reference implementation (cpu/) and, optionally, one CUDA
// implementation (cuda/). The engine knows stages only through this interface and the registry.
#pragma once
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/frame.hpp"
#include "core/options.hpp"

struct CUstream_st;

namespace vfp {

enum class Backend { CPU, CUDA };
const char* backend_name(Backend b);

// What a stage's process call gets besides the images.
struct StageContext {
  Backend backend = Backend::CPU;
  CUstream_st* stream = nullptr;  // the slot's CUDA stream (CUDA backend)
  int slot = 0;                   // in-flight slot index, for per-slot resources
  int64_t frame_index = 0;
  // A short line about this frame that the stage may set (bits and quality of a codec, say):
  // the live display's HUD shows it under the step times. Null when nobody reads it.
  std::string* note = nullptr;
  // Named numbers about this frame that the stage may add, each name with its unit and the
  // stage's name, e.g. {"mmp GPU search (ms)", 412.5}: the profile summarizes each over the
  // frames (vfpipe profile, run --profile). Null when nobody reads them.
  std::vector<std::pair<std::string, double>>* metrics = nullptr;
};

struct StageInfo;

class Stage {
 public:
  virtual ~Stage() = default;

  // Checks the input and returns the output spec. Throws vfp::Error (Input) if the input
  // format or size is not supported. Called once before streaming.
  virtual FrameSpec configure(const FrameSpec& in) = 0;
  // Allocates backend resources for `slots` frames in flight. Called after configure.
  virtual void prepare(Backend backend, int slots) {
    (void)backend;
    (void)slots;
  }
  // True when the output equals the input: the engine then forwards the buffer untouched.
  virtual bool passthrough() const { return false; }
  // Whether the declaration (StageInfo::cuda) has a CUDA implementation.
  bool has_cuda() const;

  // in and out never alias. Images are in host memory (CPU) or device memory (CUDA).
  virtual void run_cpu(const ImageView& in, const ImageView& out, const StageContext& ctx) = 0;
  virtual void run_cuda(const ImageView& in, const ImageView& out, const StageContext& ctx);

  // Stages whose CUDA work has host work in the middle (a CPU codec: the frame comes down,
  // the host codes it, the result goes up) can let the CUDA engine keep several frames'
  // host work going at once instead of blocking in run_cuda(). start_cuda() queues the
  // first part on ctx.stream, starts the host part and returns at once; its future is
  // ready (or holds the error) when the host part is done. The engine then calls
  // finish_cuda() for that frame, in frame order, from another thread than start_cuda()'s,
  // which queues the rest on ctx.stream. ctx.note and ctx.metrics stay valid (and are read
  // by nobody else) until the future is ready. A stage that returns true here must also
  // run frames through run_cuda() alone (the engine uses it when it cannot overlap).
  virtual bool host_async() const { return false; }
  // Frames in flight this stage needs on the CUDA backend to keep the GPU busy (0: no
  // wish): one frame's host work (the MMP encoder's rounds) leaves the GPU mostly idle, so
  // such a stage gains from many frames at once. A batch run's default depth takes it
  // (docs/architecture.md); --depth overrides it.
  virtual int frames_in_flight() const { return 0; }
  virtual std::shared_future<void> start_cuda(const ImageView& in, const ImageView& out, const StageContext& ctx);
  virtual void finish_cuda(const ImageView& out, const StageContext& ctx);

  // Live parameter change between frames: `opts` is the stage's full option set with the
  // changed values merged in. Applies to the frames submitted after the call; frames in
  // flight keep their parameters. Stages that cannot change while running keep the default.
  virtual void update(const Options& opts);
  const Options& options() const { return options_; }
  void set_options(const Options& o) { options_ = o; }

  // Switched off live (the display's T key): the engine copies the input to the output
  // instead of running the stage. Only for stages whose output spec equals their input's.
  // Set on the worker thread between frames, like update().
  void set_bypass(bool b) { bypass_ = b; }
  bool bypassed() const { return bypass_; }

  // Constant-memory banks this stage reserves on its GPU per frame in flight (a per-device
  // budget, cuda/conv.hpp's kConvBanks): what limits how many pipelines share one GPU.
  virtual int constant_banks_per_slot() const { return 0; }

  // Files the stage writes besides the chain's output (a codec's bitstream file): the run
  // applies its -y / -n rule to them, and refuses the input's name, before configure().
  virtual std::vector<std::string> output_files() const { return {}; }

  // A line for the run summary after the last frame (a codec's bits and PSNR); "" for none.
  virtual std::string report() const { return ""; }

  // Name shown in reports and summaries, e.g. "format(yuv420p)".
  virtual std::string label() const { return name(); }
  const std::string& name() const;
  // The declaration this stage was created from (set by the registry's create()).
  const StageInfo* info() const { return info_; }
  void set_info(const StageInfo* info) { info_ = info; }

 private:
  const StageInfo* info_ = nullptr;
  Options options_;
  bool bypass_ = false;
};

// The display's +/- keys on a stage: how its main parameter steps. Declared with the stage,
// so the display works for any stage that declares one and names none.
struct LiveParam {
  enum class Step { Add, Scale, Cycle };
  std::string option;  // the option the keys change; "" = the stage has no live parameter
  Step step = Step::Add;
  double amount = 1;                // Add: +-amount per press; Scale: times or divided by amount
  double min = 0, max = 0;          // Add and Scale stay in this range
  std::vector<std::string> values;  // Cycle: the values in order (a preset table's names)
  // Set with every change (wavelet: method=fixed). While they do not hold yet, the first press
  // sets the option to `start` (wavelet: a fixed threshold of 8 levels).
  std::vector<std::pair<std::string, std::string>> sets;
  double start = 0;
  // Back to their declared defaults with every change (a preset's own size, sigma, ...).
  std::vector<std::string> resets;
};

struct StageInfo {
  std::string name;
  std::vector<std::string> aliases;
  std::string summary;      // one line for `vfpipe filters`
  std::string description;  // a paragraph for `vfpipe filters NAME`
  std::vector<OptionSpec> options;
  // Accepted input formats in order of preference; the chain builder inserts a format
  // conversion before the stage when its input is not in this list.
  std::vector<PixelFormat> formats;
  bool cuda = false;
  LiveParam live;
  std::vector<std::string> examples;
  std::function<std::unique_ptr<Stage>(const Options&)> create;
};

}  // namespace vfp
