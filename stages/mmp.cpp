// `mmp`: codes every frame with the MMP intra codec (codecs/mmp/) and outputs the
// decoder's reconstruction, so a chain shows what MMP at a given lambda does to the video;
// the run summary reports bits per frame, bpp, PSNR and encode time. `file=out.mmp` also
// writes the bitstream (frames in order: both engines run a stage's frames in order).
//
// On the CUDA backend the encoder's search runs on the GPU (cuda/mmp_search.hpp): the frame
// comes down to pinned memory, the encoder's host part (range coding, dictionary updates)
// runs on a thread of its own and the process-wide pool, and the reconstruction goes back
// up on the chain's stream. The stage is host_async(): the engine keeps one frame's encode
// going per slot (frames without carry are independent; with carry, or a bitstream file,
// they finish in order). The search's device time is in the HUD note and the report.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "codecs/mmp/container.hpp"
#include "codecs/mmp/search.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/parallel.hpp"
#include "core/registry.hpp"
#include "stages/builtin.hpp"
#if VFPIPE_HAVE_CUDA
#include "core/gpu.hpp"
#include "cuda/mmp_search.hpp"
#endif

namespace vfp {

namespace {
struct MmpSettings {
  double lambda = 32;
  std::string file;
  bool carry = false, independent_chroma = false, post_filter = true;
  int block = 16, modes = 4, min_unit = 4, dict = mmp::Params{}.max_dict;
  std::string tile = "0", tile_mode = "sync", tile_scan = "raster", search = "auto",
              dict_full = mmp::Params{}.replace_least_used ? "replace" : "stop", gpus = "1";
};

// gpus=N or all: how many GPUs the CUDA backend's frames in flight are dealt to (0: all).
int parse_gpu_count(const std::string& v) {
  if (v == "all") return 0;
  if (v.empty() || v.size() > 3 || v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) < 1)
    throw OptionError("gpus", "mmp: gpus=" + v + " (a number of GPUs, 1 or more, or all)");
  return std::stoi(v);
}

const OptionTable<MmpSettings>& mmp_options() {
  using S = MmpSettings;
  static const OptionTable<S> table = [] {
    OptionTable<S> t;  // the codec's state depends on every option: none changes while running
    t.number("lambda", &S::lambda, 32, 0, 1e9, "Lagrangian multiplier (larger: fewer bits, lower quality)");
    t.text("file", &S::file, "", "also write the bitstream to this .mmp file (an existing one needs the run's -y)");
    t.flag("carry", &S::carry, false, "keep dictionaries and models from frame to frame");
    t.flag("independent_chroma", &S::independent_chroma, false,
           "code Cr with dictionaries of its own instead of continuing Cb's (more bits)");
    t.integer("block", &S::block, 16, 8, 32, "block size: 8, 16 or 32");
    t.integer("modes", &S::modes, 4, 1, mmp::kModes,
              "prediction modes searched fully per unit, best by prediction error first (fewer: faster, slightly "
              "more bits; mmp encode's --modes)");
    t.integer("min_unit", &S::min_unit, 4, 4, 16,
              "smallest prediction unit: 4, 8 or 16 samples a side (larger: fewer units that wait for each other, "
              "less search work (CPU encode 25% faster at 8), some more bits; mmp encode's --min-unit)");
    t.integer("dict", &S::dict, mmp::Params{}.max_dict, 64, 4096,
              "dictionary elements per scale (fewer: a faster search, more bits; mmp encode's --dict)");
    t.choice("dict_full", &S::dict_full, mmp::Params{}.replace_least_used ? "replace" : "stop", {"replace", "stop"},
             "a full dictionary scale replaces its least used element (replace) or takes no more (stop; mmp "
             "encode's --dict-full)");
    t.text("tile", &S::tile, "0", "tiles of WxH luma samples (or N), coded in parallel; 0 = untiled");
    t.choice("tile_mode", &S::tile_mode, "sync", {"sync", "sync-dict", "independent"},
             "what tiles share: dictionaries and models (sync), dictionaries only, nothing");
    t.choice(
        "tile_scan", &S::tile_scan, "raster", {"raster", "wavefront"},
        "the order of synchronized tiles' rounds: raster, or wavefront (every block whose left, top and "
        "top-right neighbours are done: a 512x512 tile in 94 rounds instead of 1024, about 0.09 dB; on the GPU the "
        "low-latency setting)");
    t.choice(
        "search", &S::search, "auto", {"auto", "cpu", "cuda"},
        "where the encoder's search runs: auto (the GPU on the CUDA backend, else the CPU), cpu, or cuda "
        "(the whole block search on the GPU, also from the CPU backend; the same bytes, 30-140x faster on an H100)");
    t.text("gpus", &S::gpus, "1",
           "GPUs the CUDA backend encodes on: N or all (frames in flight dealt to them in turn, 8 a GPU; "
           "the chain's GPU first, then the next ones; CUDA_VISIBLE_DEVICES picks which)");
    t.flag("post_filter", &S::post_filter, true,
           "restoration post-filter on each decoded plane (taps designed by the encoder, sent in the stream)");
    return t;
  }();
  return table;
}

class MmpStage final : public Stage {
 public:
  explicit MmpStage(const MmpSettings& s)
      : file_(s.file), search_(s.search), gpus_(parse_gpu_count(s.gpus)), gpus_option_(s.gpus) {
    params_.lambda = s.lambda;
    params_.carry = s.carry;
    params_.shared_chroma = !s.independent_chroma;
    params_.post_filter = s.post_filter;
    params_.mode_candidates = s.modes;
    if (s.min_unit != 4 && s.min_unit != 8 && s.min_unit != 16)
      throw OptionError("min_unit", "mmp: min_unit=" + std::to_string(s.min_unit) + " (4, 8 or 16)");
    params_.min_unit = s.min_unit;
    params_.max_dict = s.dict;
    params_.replace_least_used = s.dict_full == "replace";
    params_.block_log = mmp::block_log_of_size(s.block);
    if (params_.block_log < 0) throw OptionError("block", "mmp: block=" + std::to_string(s.block) + " (8, 16 or 32)");
    // Choices: always one of the names.
    mmp::parse_tile_mode(s.tile_mode, &params_.tile_mode);
    mmp::parse_tile_scan(s.tile_scan, &params_.tile_scan);
    try {
      mmp::parse_tile_size(s.tile, &params_);
      mmp::check_tiles(params_);
    } catch (const Error& e) {
      const bool scan = params_.tile_scan == mmp::TileScan::Wavefront &&
                        (!params_.tiled() || params_.tile_mode == mmp::TileMode::Independent);
      throw OptionError(scan ? "tile_scan" : "tile", e.what());
    }
    if (gpus_ != 1 && s.carry)
      throw OptionError("gpus", "mmp: gpus=" + s.gpus +
                                    " with carry=1: carried dictionaries code each frame after "
                                    "the one before, on one GPU");
    if (s.search == "cuda") {
#if VFPIPE_HAVE_CUDA
      params_.search = cuda::make_mmp_leaf_search();  // a clear error without a usable GPU
#else
      throw OptionError("search", "mmp: search=cuda: this vfpipe was built without CUDA");
#endif
    }
  }
  std::vector<std::string> output_files() const override {
    return file_.empty() ? std::vector<std::string>{} : std::vector<std::string>{file_};
  }
  FrameSpec configure(const FrameSpec& in) override {
    spec_ = in;
    mmp::check_frame_tiles(in, params_, ErrorKind::Usage);  // before the first frame
    if (!file_.empty()) writer_ = std::make_unique<mmp::Writer>(file_, in, params_);
    return in;
  }
  void prepare(Backend backend, int slots) override {
#if VFPIPE_HAVE_CUDA
    if (backend == Backend::CUDA) {
      if (search_ == "auto") {
        params_.search = cuda::make_mmp_leaf_search();
        if (writer_) writer_->set_search(params_.search);
      }
      deal_to_gpus();
      slots_.clear();
      for (int i = 0; i < slots; ++i) slots_.push_back(std::make_unique<SlotBuffers>(spec_));
      // Each frame in flight holds a thread of its own that waits for its luma plane's
      // rounds, so the pool (the rounds' coding and dictionary updates, the chroma planes)
      // gets the cores left, at least half of them: on 16 cores with 8 frames in flight, 8
      // pool threads ran the 1080p clip 6-16% faster than 16, and 6 slower. More than two
      // threads a frame in flight only wait and steal: on 64 cores one GPU's 8 frames ran
      // 19-38% faster with 16 than with 56, and 24 no faster (docs/perf.md). --threads N overrides it.
      const int cores = available_cores();
      if (!params_.carry)
        pool_threads_ = limit_default_cpu_threads(std::min(std::max(cores / 2, cores - slots), 2 * slots));
      const char* e = std::getenv("VFP_MMP_STAGGER");
      stagger_blocks_ = e && std::string(e) == "0" ? 0 : mmp::frame_blocks(spec_, params_) / std::max(1, slots);
      return;
    }
#else
    (void)slots;
#endif
    if (gpus_ != 1 && backend == Backend::CPU)
      log::warn("mmp: gpus=%s is for the CUDA backend; this run encodes its frames one after another",
                gpus_option_.c_str());
  }
  void run_cpu(const ImageView& in, const ImageView& out, const StageContext& ctx) override {
    // Frames arrive in order (the engine's CPU worker runs a stage's frames one after another),
    // which carried dictionaries need.
    encode(in, out, ctx.note, ctx.metrics, {});
  }
#if VFPIPE_HAVE_CUDA
  bool host_async() const override { return !slots_.empty(); }
  // Independent frames overlap: eight at once run the 1080p clip at 1.4x the rate of three
  // (docs/perf.md). Carried dictionaries make frames wait for each other.
  int frames_in_flight() const override {
    return params_.carry ? 0 : 8 * (gpus_ == 0 ? std::max(1, cuda::device_count()) : gpus_);
  }
  // The frame comes down to the slot's pinned buffer on the chain's stream; a thread of its
  // own waits for it and encodes it into the slot's reconstruction buffer. The slot is
  // reused only after its frame's download, so both buffers are free when it starts.
  std::shared_future<void> start_cuda(const ImageView& in, const ImageView&, const StageContext& ctx) override {
    SlotBuffers& sb = *slots_.at(static_cast<size_t>(ctx.slot));
    // Frames start in order: consecutive ones go to the GPUs in turn, whatever the depth.
    const size_t gpu = searches_.empty() ? 0 : static_cast<size_t>(dealt_++) % searches_.size();
    cuda::memcpy_d2h_async(sb.down.data(), in.data[0], FrameLayout::of(spec_).total_bytes, ctx.stream);
    sb.downloaded.record(ctx.stream);
    std::shared_future<void> before = last_;
    auto progress = std::make_shared<Progress>();
    std::shared_ptr<const Progress> previous = std::exchange(last_progress_, progress);
    // The task lets go of `before` when it ends, so finished frames are not kept in a chain.
    const int device = searches_.empty() ? cuda::current_device() : devices_[gpu];
    std::shared_ptr<mmp::LeafSearch> search = searches_.empty() ? nullptr : searches_[gpu];
    last_ = std::async(std::launch::async, [this, &sb, before, previous, progress, note = ctx.note,
                                            metrics = ctx.metrics, device, search]() mutable {
              struct Done {  // however the encode ends, a frame waiting on this one goes on
                Progress& p;
                ~Done() { p.done = true; }
              } done{*progress};
              cuda::set_device(device);
              sb.downloaded.synchronize();
              wait_for_stagger(previous.get());
              encode(sb.down.view(), sb.up.view(), note, metrics, std::move(before), &progress->blocks, search);
            }).share();
    return last_;
  }
  void finish_cuda(const ImageView& out, const StageContext& ctx) override {
    const HostFrame& up = slots_.at(static_cast<size_t>(ctx.slot))->up;
    cuda::memcpy_h2d_async(out.data[0], up.data(), FrameLayout::of(spec_).total_bytes, ctx.stream);
  }
  void run_cuda(const ImageView& in, const ImageView& out, const StageContext& ctx) override {
    start_cuda(in, out, ctx).get();
    finish_cuda(out, ctx);
  }
#endif
  std::string report() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (frames_ == 0) return "";
    const double px = static_cast<double>(spec_.width) * spec_.height;
    return log::format(
        "mmp (lambda %g): %lld frames, %.0f bits/frame, %.4f bpp, PSNR %.2f dB, %.3f s/frame encode%s (%s)%s%s%s",
        params_.lambda, static_cast<long long>(frames_), total_.bits / frames_, total_.bits / frames_ / px,
        total_.psnr(), total_.seconds / frames_,
        // Summed over the search's threads: with tiles it can exceed the frame's time.
        params_.search ? log::format(", GPU search time %.3f s%s", gpu_s_ / frames_, on_gpus().c_str()).c_str() : "",
        total_.breakdown(static_cast<double>(frames_)).c_str(),
        pool_threads_ > 0 ? log::format(", %d CPU pool threads", pool_threads_).c_str() : "",
        file_.empty() ? "" : ", bitstream ", file_.c_str());
  }
  std::string label() const override {
    // The options that trade bits for speed, where they differ from the defaults: runs
    // compared side by side should say what they traded.
    std::string trade;
    if (params_.mode_candidates != mmp::Params{}.mode_candidates)
      trade += log::format(", modes=%d", params_.mode_candidates);
    if (params_.min_unit != mmp::Params{}.min_unit) trade += log::format(", min_unit=%d", params_.min_unit);
    if (params_.max_dict != mmp::Params{}.max_dict) trade += log::format(", dict=%d", params_.max_dict);
    if (params_.replace_least_used != mmp::Params{}.replace_least_used)
      trade += params_.replace_least_used ? ", dict_full=replace" : ", dict_full=stop";
    if (params_.tiled()) {
      trade += log::format(", tile=%dx%d", params_.tile_w, params_.tile_h);
      if (params_.tile_mode != mmp::Params{}.tile_mode)
        trade += std::string(", tile_mode=") + mmp::tile_mode_name(params_.tile_mode);
      if (params_.tile_scan != mmp::Params{}.tile_scan)
        trade += std::string(", tile_scan=") + mmp::tile_scan_name(params_.tile_scan);
    }
    if (gpus_ != 1) trade += ", gpus=" + gpus_option_;
    return log::format("mmp(lambda=%g%s%s)", params_.lambda, trade.c_str(),
                       params_.search ? ", search on the GPU" : "");
  }

 private:
  // Codes one frame. `before`: the previous frame's encode when frames overlap (CUDA
  // backend); carried states and the bitstream file need the frames in order, so they wait
  // for it (and fail with it); independent frames only append their bytes after it.
  void encode(const ImageView& in, const ImageView& out, std::string* note,
              std::vector<std::pair<std::string, double>>* metrics, std::shared_future<void> before,
              std::atomic<int64_t>* blocks_coded = nullptr, std::shared_ptr<mmp::LeafSearch> search = nullptr) {
    std::atomic<int64_t> device_ns{0};
    mmp::Params p = writer_ ? writer_->params() : params_;
    if (search) p.search = std::move(search);  // the frame's GPU (gpus=N)
    p.device_ns = &device_ns;
    p.blocks_coded = blocks_coded;
    const bool ordered = params_.carry;
    if (ordered && before.valid()) before.get();
    mmp::FrameStats st;
    if (writer_ && ordered) {
      st = writer_->write(in, &out, &device_ns);
    } else if (writer_) {
      std::vector<std::vector<uint8_t>> payloads;
      st = mmp::encode_frame(in, p, &out, &payloads, nullptr);
      if (before.valid()) before.get();
      writer_->append(payloads);
    } else {
      st = mmp::encode_frame(in, p, &out, nullptr, params_.carry ? &states_ : nullptr);
    }
    const double gpu = static_cast<double>(device_ns.load()) * 1e-9;
    if (note)
      *note = log::format("MMP %.0f BITS  %.3f BPP  %.2f DB  %.0f MS%s", st.bits,
                          st.bits / (static_cast<double>(spec_.width) * spec_.height), st.psnr(), st.seconds * 1e3,
                          p.search ? log::format("  GPU %.0f MS", gpu * 1e3).c_str() : "");
    if (metrics) {
      metrics->emplace_back("mmp kbits", st.bits / 1000);
      metrics->emplace_back("mmp encode (ms)", st.seconds * 1e3);
      if (p.search) metrics->emplace_back("mmp GPU search (ms)", gpu * 1e3);
    }
    std::lock_guard<std::mutex> lock(mu_);
    total_ += st;
    gpu_s_ += gpu;
    ++frames_;
  }

  mmp::Params params_;
  std::string file_;
  FrameSpec spec_;
  std::string search_;
  int gpus_ = 1;             // 0: all
  std::string gpus_option_;  // as written, for messages and the label
  std::unique_ptr<mmp::Writer> writer_;
  mmp::PlaneStates states_;
  int pool_threads_ = 0;  // the pool's threads once the stage limited it (0: not)
#if VFPIPE_HAVE_CUDA
  // A frame's encode as the next frame sees it.
  struct Progress {
    std::atomic<int64_t> blocks{0};
    std::atomic<bool> done{false};
  };
  // Frames in flight start staggered: each waits until the frame before it has coded its
  // share of a frame's blocks (a frame's blocks / the slots) or ended. Started together,
  // the slots' frames would run in waves: every plane's costly first rounds at once, and
  // the GPU short of work while a wave's planes end and its post-filters run on the host.
  void wait_for_stagger(const Progress* previous) const {
    if (!previous || stagger_blocks_ <= 0) return;
    while (!previous->done && previous->blocks.load(std::memory_order_relaxed) < stagger_blocks_)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::shared_ptr<Progress> last_progress_;
  int64_t stagger_blocks_ = 0;  // VFP_MMP_STAGGER=0: none
  // CUDA backend, per slot: the frame come down, its reconstruction going up, and the event
  // the encode waits for.
  struct SlotBuffers {
    explicit SlotBuffers(const FrameSpec& spec) : down(spec, true), up(spec, true) {}
    HostFrame down, up;
    cuda::Event downloaded;
  };
  std::vector<std::unique_ptr<SlotBuffers>> slots_;
  // gpus=N: a search on each of N GPUs, the chain's first; frames dealt to them in turn.
  // Each GPU's search keeps its own dictionary mirrors and round groups, and a frame's
  // planes stay on one GPU, so the GPUs share nothing but the host's pool.
  std::vector<int> devices_;
  std::vector<std::shared_ptr<mmp::LeafSearch>> searches_;
  void deal_to_gpus() {
    devices_.clear();
    searches_.clear();
    if (!params_.search) {
      if (gpus_ != 1) log::warn("mmp: gpus=%s: search=cpu encodes on the CPU", gpus_option_.c_str());
      return;
    }
    const int count = cuda::device_count(), want = gpus_ == 0 ? count : gpus_;
    if (want > count) {
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      const std::string why = visible ? log::format(" (CUDA_VISIBLE_DEVICES=%s)", visible) : "";
      throw OptionError(
          "gpus", log::format("mmp: gpus=%d: %d GPU%s visible%s", want, count, count == 1 ? "" : "s", why.c_str()));
    }
    // k searches a GPU, each with its own lock, mirrors and round groups, the frames dealt
    // to all of them in turn; with frames on several GPUs, two searches a GPU and host
    // threads that sleep while they wait (8 frame threads a GPU spinning take the cores the
    // pool needs): 9-19% faster on two H200s, on four from 9% slower to 24% faster across
    // two machines (docs/perf.md). One GPU keeps one search and the runtime's wait (level
    // there). VFP_MMP_SEARCHES_PER_GPU=k and VFP_CUDA_SCHEDULE, where set, win.
    const char* e = std::getenv("VFP_MMP_SEARCHES_PER_GPU");
    const int per = e ? std::clamp(std::atoi(e), 1, 8) : want > 1 ? 2 : 1;
    if (want > 1 && !std::getenv("VFP_CUDA_SCHEDULE") && !cuda::set_wait_mode("blocking"))
      log::warn("mmp: gpus=%s: could not make host threads sleep while they wait for the GPUs", gpus_option_.c_str());
    const int first = cuda::current_device();
    for (int k = 0; k < per; ++k)
      for (int i = 0; i < want; ++i) {
        devices_.push_back((first + i) % count);
        if (i == 0 && k == 0) {
          searches_.push_back(params_.search);
          continue;
        }
        cuda::DeviceScope on(devices_.back());
        searches_.push_back(cuda::make_mmp_leaf_search());
      }
    gpu_count_ = want;
  }
  int gpu_count_ = 1;
  std::atomic<int64_t> dealt_{0};  // frames started
#endif
  std::string on_gpus() const {
#if VFPIPE_HAVE_CUDA
    if (gpu_count_ > 1) {
      const size_t per = searches_.size() / static_cast<size_t>(gpu_count_);
      return log::format(" on %d GPUs", gpu_count_) + (per > 1 ? log::format(", %zu searches each", per) : "");
    }
#endif
    return "";
  }
  mutable std::mutex mu_;
  mmp::FrameStats total_;
  double gpu_s_ = 0;
  int64_t frames_ = 0;
#if VFPIPE_HAVE_CUDA
  // The newest frame's encode. Last: destroyed first, it waits for a task still running,
  // which uses the members above.
  std::shared_future<void> last_;
#endif
};
}  // namespace

void register_mmp_stage(Registry& reg) {
  StageInfo s;
  s.name = "mmp";
  s.summary = "MMP intra coding: outputs the decoded frames, reports bits and PSNR";
  s.description =
      "Codes every frame with vfpipe's MMP intra codec (multiscale recurrent pattern matching with "
      "H.264-style prediction, docs/mmp.md) at the given lambda and passes on the decoder's "
      "reconstruction. The run summary gives bits per frame, bpp, PSNR, the encode time and where it "
      "went. On the CUDA backend the encoder's whole block search runs on the GPU (the same bytes as "
      "the CPU's; about 0.35 s for a 512x512 frame on an H100, less with tiles; --depth frames are encoded at "
      "once, so a stream runs at several frames per second; gpus=N deals them to N GPUs); on the CPU it takes "
      "seconds to minutes per frame, spread over every core with tile=WxH (tiles sharing dictionaries "
      "and models, docs/mmp.md#tiles). search=cuda uses the GPU from the CPU backend too. The live "
      "display's HUD shows each frame's bits, PSNR, time and GPU time.";
  s.options = mmp_options().specs();
  s.formats = {PixelFormat::YUV420P, PixelFormat::GRAY8, PixelFormat::YUV444P};
  s.cuda = true;
  s.examples = {"mmp=lambda=40", "format=gray,mmp=lambda=100:file=out.mmp", "mmp=lambda=60:carry=1",
                "mmp=lambda=60:tile=128x128"};
  s.create = [](const Options& o) { return std::make_unique<MmpStage>(mmp_options().bind(o)); };
  reg.add(std::move(s));
}

}  // namespace vfp
