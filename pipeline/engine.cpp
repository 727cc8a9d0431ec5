#include "pipeline/engine.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "core/error.hpp"
#include "core/log.hpp"
#include "cpu/convert.hpp"
#include "pipeline/frame_pool.hpp"
#include "pipeline/nvtx.hpp"
#include "pipeline/queue.hpp"
#if VFPIPE_HAVE_CUDA
#include "core/gpu.hpp"
#include "cuda/kernels.hpp"
#endif

namespace vfp {

namespace {

struct InItem {
  FramePtr frame;
  int64_t index = 0;
  int64_t read_ns = 0, capture_ns = 0, enqueue_ns = 0;
};

struct OutItem {
  FramePtr frame;
  FrameRecord rec;
  std::shared_ptr<void> timing;  // backend data the sink thread turns into step times
  FramePtr source;               // the input frame, for sinks that want it (the display)
  int device_slot = -1;          // where the sink's DeviceTap put the frame
  bool host_valid = true;        // the host frame holds the data (the download ran)
};
using Emit = std::function<bool(OutItem&&)>;

class Worker {
 public:
  virtual ~Worker() = default;
  virtual std::vector<std::string> step_names() const = 0;
  virtual std::vector<std::string> step_tracks() const = 0;
  virtual std::vector<bool> step_copies() const = 0;
  // Takes one frame; may first wait for a slot to free up (CUDA: the oldest frame in flight).
  virtual void submit(FramePtr in, FrameRecord rec) = 0;
  // Completes every frame in flight, in order.
  virtual void flush() = 0;
  // Before a live change to the stages: waits until no stage of an earlier frame is still
  // to be queued (CUDA: the part of the chain after a host_async() stage), so that the
  // change reaches only the frames submitted after it.
  virtual void settle() {}
  // On the sink thread, before the record is kept: fills the step times from what the
  // backend left in item.timing (off the worker thread, which sets the frame rate).
  virtual void finalize(OutItem& item) { (void)item; }
};

// ---------------------------------------------------------------- CPU backend
class CpuWorker final : public Worker {
 public:
  CpuWorker(Chain& chain, int out_frames, bool keep_source, Emit emit)
      : chain_(chain), emit_(std::move(emit)), keep_source_(keep_source) {
    last_active_ = -1;
    for (size_t i = 0; i < chain_.size(); ++i)
      if (!chain_.step(i).stage->passthrough()) last_active_ = static_cast<int>(i);
    bufs_.resize(chain_.size());
    for (int i = 0; i < last_active_; ++i)
      if (!chain_.step(i).stage->passthrough()) bufs_[i] = std::make_unique<HostFrame>(chain_.step(i).out, false);
    if (last_active_ >= 0) out_pool_.emplace(chain_.output(), out_frames, false);
    for (size_t i = 0; i < chain_.size(); ++i) chain_.step(i).stage->prepare(Backend::CPU, 1);
    for (size_t i = 0; i < chain_.size(); ++i) labels_.push_back(chain_.step(i).stage->label());
  }
  std::vector<std::string> step_names() const override {
    std::vector<std::string> n;
    for (size_t i = 0; i < chain_.size(); ++i) n.push_back(chain_.step(i).stage->label());
    return n;
  }
  std::vector<std::string> step_tracks() const override {
    return std::vector<std::string>(chain_.size(), "worker thread");
  }
  std::vector<bool> step_copies() const override { return std::vector<bool>(chain_.size(), false); }
  void submit(FramePtr in, FrameRecord rec) override {
    rec.submit_ns = now_ns();
    FramePtr out = last_active_ >= 0 ? out_pool_->acquire() : in;
    ImageView cur = in->view();
    StageContext ctx;
    ctx.backend = Backend::CPU;
    ctx.frame_index = rec.index;
    rec.notes.resize(chain_.size());
    ctx.metrics = &rec.metrics;
    for (size_t i = 0; i < chain_.size(); ++i) {
      Stage& st = *chain_.step(i).stage;
      ctx.note = &rec.notes[i];
      const int64_t t0 = now_ns();
      if (!st.passthrough()) {
        NvtxRange range(labels_[i].c_str(), rec.index);
        ImageView dst = static_cast<int>(i) == last_active_ ? out->view() : bufs_[i]->view();
        if (st.bypassed())
          copy_image_cpu(cur, dst);
        else
          st.run_cpu(cur, dst, ctx);
        cur = dst;
      }
      const int64_t t1 = now_ns();
      rec.step_ms.push_back(static_cast<float>((t1 - t0) / 1e6));
      rec.step_start_ns.push_back(t0);
      rec.step_end_ns.push_back(t1);
    }
    if (out != in) {  // shared (cached) input frames are never written
      out->index = rec.index;
      out->capture_ns = rec.capture_ns;
    }
    rec.done_ns = rec.launched_ns = now_ns();
    emit_(OutItem{std::move(out), std::move(rec), nullptr, keep_source_ ? std::move(in) : nullptr});
  }
  void flush() override {}

 private:
  Chain& chain_;
  Emit emit_;
  std::vector<std::string> labels_;  // NVTX range names
  bool keep_source_ = false;
  int last_active_;
  std::vector<std::unique_ptr<HostFrame>> bufs_;
  std::optional<FramePool> out_pool_;
};

#if VFPIPE_HAVE_CUDA
// ---------------------------------------------------------------- CUDA backend
// Three streams by function, so that one frame's kernels overlap the next frame's copies:
//   upload stream:   H2D(n)                  H2D(n+1)               ...
//   compute stream:           stages(n)              stages(n+1)
//   download stream:                   D2H(n)                 D2H(n+1)
// ordered per frame by events, so uploads, kernels and downloads of consecutive frames
// overlap while each direction's copies stay in frame order (copies of the same direction
// never interleave, which kept the copy engines at full rate in docs/perf.md). `depth`
// slots hold the per-frame device buffers and events; a slot is reused only after its
// frame's download completed.
//
// Completion: a completion thread waits for each frame's download, in submission order,
// and hands the frame to the sink queue at once, so a frame leaves when its work is done,
// not when its slot is next needed (with a paced source that would add depth - 1 frame
// periods). How it learns of the download is `Completion`: Event blocks in
// cudaEventSynchronize on the download's event; HostFunc queues a cudaLaunchHostFunc
// callback after the download that wakes the thread (docs/architecture.md, latency model).
//
// Host work inside a stage (Stage::host_async(), the MMP encoder): the worker queues a frame
// up to that stage and starts its host part, then goes on with the next frames; a tail
// thread waits for each frame's host part in submission order and queues the rest of its
// chain and its download. So up to `depth` frames' host parts run at once, and no stream
// ever waits on the host (nothing is queued before what it needs is done).
class CudaWorker final : public Worker {
 public:
  CudaWorker(Chain& chain, int depth, int out_frames, bool timing, bool keep_source, Sink* tap_sink,
             Completion completion, Emit emit)
      : chain_(chain), emit_(std::move(emit)), out_pool_(chain.output(), out_frames, true) {
    completion_ = completion;
    tap_sink_ = tap_sink;
    timing_ = timing;
    keep_source_ = keep_source;
    if (chain_.size() + 5 > kMaxEvents)
      throw Error(ErrorKind::Usage,
                  log::format("a chain of %zu stages is too long (at most %zu)", chain_.size(), kMaxEvents - 5));
    // Events per frame: up start/end, [2] computed of an empty chain, one per stage end,
    // [3 + S] unused, down end.
    events_ = std::make_shared<EventPool>(chain_.size() + 5);
    in_bytes_ = FrameLayout::of(chain_.input()).total_bytes;
    out_bytes_ = FrameLayout::of(chain_.output()).total_bytes;
    for (int s = 0; s < depth; ++s) {
      auto sl = std::make_unique<Slot>();
      sl->worker = this;
      sl->index = s;
      sl->in = cuda::DeviceBuffer::frame(in_bytes_, "an input frame");
      for (size_t i = 0; i < chain_.size(); ++i) {
        const auto& step = chain_.step(i);
        sl->bufs.emplace_back(
            step.stage->passthrough()
                ? cuda::DeviceBuffer()
                : cuda::DeviceBuffer::frame(FrameLayout::of(step.out).total_bytes, "a stage output frame"));
      }
      slots_.push_back(std::move(sl));
    }
    for (size_t i = 0; i < chain_.size(); ++i) chain_.step(i).stage->prepare(Backend::CUDA, depth);
    for (size_t i = 0; i < chain_.size(); ++i) labels_.push_back(chain_.step(i).stage->label());
    for (size_t i = 0; i < chain_.size() && async_step_ < 0; ++i) {
      const Stage& st = *chain_.step(i).stage;
      if (!st.passthrough() && st.host_async()) async_step_ = static_cast<int>(i);
    }
    // Live changes must wait for earlier frames' tails only where the tail has stages a
    // change can reach (the builder's format conversions take none).
    for (size_t i = static_cast<size_t>(async_step_ + 1); async_step_ >= 0 && i < chain_.size(); ++i)
      if (!chain_.step(i).stage->passthrough() && !chain_.step(i).inserted) tail_mutable_ = true;
    last_step_end_.assign(chain_.size(), INT64_MIN);
    nvtx_name_stream(up_.get(), "vfpipe upload");
    nvtx_name_stream(compute_.get(), "vfpipe compute");
    nvtx_name_stream(down_.get(), "vfpipe download");
    reanchor(true);
    completer_ = std::thread([this, device = cuda::current_device()] {
      cuda::set_device(device);
      completion_loop();
    });
    if (async_step_ >= 0)
      tailer_ = std::thread([this, device = cuda::current_device()] {
        cuda::set_device(device);
        tail_loop();
      });
  }
  ~CudaWorker() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (tailer_.joinable()) tailer_.join();  // it queues (or drops) every tail still waiting
    completer_.join();                       // it waits for (and hands on or drops) every frame still in flight
    for (auto* st : {&up_, &compute_, &down_}) sync_no_throw(st->get());
  }
  std::vector<std::string> step_names() const override {
    std::vector<std::string> n{"upload (H2D)"};
    for (size_t i = 0; i < chain_.size(); ++i) n.push_back(chain_.step(i).stage->label());
    n.push_back("download (D2H)");
    return n;
  }
  std::vector<std::string> step_tracks() const override {
    std::vector<std::string> t{"CUDA upload stream"};
    t.insert(t.end(), chain_.size(), "CUDA compute stream");
    t.push_back("CUDA download stream");
    return t;
  }
  std::vector<bool> step_copies() const override {
    std::vector<bool> c(chain_.size() + 2, false);
    c.front() = c.back() = true;
    return c;
  }
  void submit(FramePtr in, FrameRecord rec) override {
    const int slot = static_cast<int>(next_ % slots_.size());
    Slot& s = *slots_[static_cast<size_t>(slot)];
    wait_until_free(s);
    FramePtr out = out_pool_.acquire();  // blocks when the sink lags: back-pressure
    rec.submit_ns = now_ns();
    if (rec.submit_ns - anchor_->host_ns > kReanchorNs) reanchor();
    s.evs = events_->acquire();
    s.evs->anchor = anchor_;
    // The record lives in the slot from here: stages write their notes and metrics into it,
    // from the tail thread too.
    s.rec = std::move(rec);
    s.rec.notes.assign(chain_.size(), std::string());
    std::vector<cuda::Event>& ev = s.evs->ev;
    // A frame its source left in GPU memory (NVDEC) is the chain's input where it is: the
    // frame stays with the slot until its download is done.
    s.in_dev = in->on_device && in->device ? in->device : s.in.get();
    if (timing_) ev[0].record(up_.get());
    if (s.in_dev == s.in.get()) {
      NvtxRange range("H2D", s.rec.index);
      cuda::memcpy_h2d_async(s.in.get(), in->data(), in_bytes_, up_.get());
    }
    ev[1].record(up_.get());
    cuda::stream_wait(compute_.get(), ev[1]);
    s.cur = ImageView::over(s.in_dev, chain_.input());
    s.frame_in = std::move(in);
    s.frame_out = std::move(out);
    s.host = {};
    s.next_step = run_steps(s, 0, async_step_ >= 0);
    {
      std::lock_guard<std::mutex> lk(mu_);
      s.busy = true;
      s.launched = s.downloaded = s.failed = false;
      pending_.push_back(slot);
      if (async_step_ >= 0) {
        tails_.push_back(slot);
        ++tails_open_;
      }
    }
    cv_.notify_all();
    ++next_;
    if (async_step_ < 0) {
      try {
        launch_tail(s);
      } catch (...) {  // the completion thread must not wait for a download never queued
        {
          std::lock_guard<std::mutex> lk(mu_);
          if (!s.launched) s.failed = true;
          s.launched = s.downloaded = true;
        }
        cv_.notify_all();
        throw;
      }
    }
  }
  void settle() override {
    if (!tail_mutable_) return;
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return tails_open_ == 0 || error_; });
    if (error_) std::rethrow_exception(error_);
  }
  void flush() override {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return pending_.empty(); });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // GPU event times on the host clock: an anchor event recorded on an idle stream and
  // waited for gives one (host ns, event) pair; other events are placed by their elapsed
  // time from it. A new anchor every few seconds keeps the float milliseconds of
  // cudaEventElapsedTime at sub-microsecond resolution; a frame keeps the one it was
  // submitted under.
  struct Anchor {
    cuda::Event ev;
    int64_t host_ns = 0;
    int64_t error_ns = 0;  // half the window it was taken in: the most its host time can be off
  };
  static constexpr int64_t kReanchorNs = 4'000'000'000;
  // The host time of the anchor is the middle of [record, synchronize returned]; a thread
  // descheduled in between, or a GPU busy with another process's context, widens that
  // window, so the narrowest of a few tries is kept. Before the first frame there is time
  // to wait for a quiet moment (up to about 20 ms); later anchors are taken on the
  // submitting thread and try five times.
  void reanchor(bool first = false) {
    std::shared_ptr<Anchor> best;
    int64_t best_span = INT64_MAX;
    const int tries = first ? 40 : 5;
    for (int attempt = 0; attempt < tries && best_span > 50'000; ++attempt) {
      if (attempt >= 5) std::this_thread::sleep_for(std::chrono::microseconds(500));
      auto a = std::make_shared<Anchor>();
      const int64_t t0 = now_ns();
      a->ev.record(clock_.get());
      a->ev.synchronize();
      const int64_t t1 = now_ns();
      if (t1 - t0 < best_span) {
        best_span = t1 - t0;
        a->host_ns = (t0 + t1) / 2;
        a->error_ns = (t1 - t0 + 1) / 2;
        best = std::move(a);
      }
    }
    anchor_ = std::move(best);
  }
  // A frame's events. They travel with the frame to the sink thread, which reads their
  // times (finalize) and returns them to the pool: the worker never waits on a query.
  struct FrameEvents {
    std::vector<cuda::Event> ev;
    std::shared_ptr<const Anchor> anchor;
  };
  class EventPool : public std::enable_shared_from_this<EventPool> {
   public:
    explicit EventPool(size_t n) : n_(n) {}
    std::shared_ptr<FrameEvents> acquire() {
      std::unique_ptr<FrameEvents> e;
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (!free_.empty()) {
          e = std::move(free_.back());
          free_.pop_back();
        }
      }
      if (!e) {  // grows to the frames in flight plus those queued for the sink
        e = std::make_unique<FrameEvents>();
        for (size_t i = 0; i < n_; ++i) e->ev.emplace_back();
      }
      auto self = shared_from_this();
      return std::shared_ptr<FrameEvents>(e.release(), [self](FrameEvents* p) {
        p->anchor.reset();
        std::lock_guard<std::mutex> lk(self->mu_);
        self->free_.emplace_back(p);
      });
    }

   private:
    size_t n_;
    std::mutex mu_;
    std::vector<std::unique_ptr<FrameEvents>> free_;
  };
  struct Slot {
    CudaWorker* worker = nullptr;
    int index = 0;
    cuda::DeviceBuffer in;
    std::vector<cuda::DeviceBuffer> bufs;
    FramePtr frame_in, frame_out;
    FrameRecord rec;
    std::shared_ptr<FrameEvents> evs;
    uint8_t* in_dev = nullptr;  // the chain's input in device memory
    ImageView cur;              // the frame as the last queued step left it
    size_t next_step = 0;       // the host_async() step still to finish, or the chain's length
    std::shared_future<void> host;
    int device_slot = -1;
    bool host_valid = true;
    // Guarded by mu_: in flight (submitted, not yet handed on), fully launched by the
    // worker (or dropped: `failed`, nothing to wait for), download seen done by the
    // HostFunc callback.
    bool busy = false, launched = false, downloaded = false, failed = false;
  };
  StageContext context_of(Slot& s) {
    StageContext ctx;
    ctx.backend = Backend::CUDA;
    ctx.stream = compute_.get();
    ctx.slot = s.index;
    ctx.frame_index = s.rec.index;
    ctx.metrics = &s.rec.metrics;
    return ctx;
  }
  // Queues the chain's steps from `from` on the compute stream, each from where the last
  // left the frame (s.cur). With `split`, stops at the host_async() stage: starts it
  // (s.host) and returns its index; else runs every step and returns the chain's length.
  size_t run_steps(Slot& s, size_t from, bool split) {
    const size_t S = chain_.size();
    std::vector<cuda::Event>& ev = s.evs->ev;
    StageContext ctx = context_of(s);
    for (size_t i = from; i < S; ++i) {
      Stage& stage = *chain_.step(i).stage;
      ctx.note = &s.rec.notes[i];
      if (!stage.passthrough()) {
        NvtxRange range(labels_[i].c_str(), s.rec.index);
        ImageView dst = ImageView::over(s.bufs[i].get(), chain_.step(i).out);
        if (stage.bypassed()) {
          cuda::copy_image_async(s.cur, dst, compute_.get());
        } else if (split && static_cast<int>(i) == async_step_) {
          s.host = stage.start_cuda(s.cur, dst, ctx);
          return i;
        } else {
          stage.run_cuda(s.cur, dst, ctx);
        }
        s.cur = dst;
      }
      if (timing_ || i + 1 == S) ev[3 + i].record(compute_.get());
    }
    if (S == 0) ev[2].record(compute_.get());
    return S;
  }
  // The rest of a frame after its head (submit): the host_async() stage's second part if
  // it was started, the steps after it, the display's copy, the download and the
  // completion's callback; then marks the slot launched. Throws what failed.
  void launch_tail(Slot& s) {
    const size_t S = chain_.size();
    std::vector<cuda::Event>& ev = s.evs->ev;
    size_t i = s.next_step;
    if (i < S) {
      s.host.get();  // the host part's error, if any
      StageContext ctx = context_of(s);
      ctx.note = &s.rec.notes[i];
      ImageView dst = ImageView::over(s.bufs[i].get(), chain_.step(i).out);
      {
        NvtxRange range(labels_[i].c_str(), s.rec.index);
        chain_.step(i).stage->finish_cuda(dst, ctx);
      }
      s.cur = dst;
      if (timing_ || i + 1 == S) ev[3 + i].record(compute_.get());
      run_steps(s, i + 1, false);
    }
    const cuda::Event& computed = S > 0 ? ev[2 + S] : ev[2];
    cuda::stream_wait(down_.get(), computed);
    // The display's copy of the device frames, on the compute stream after the download's
    // dependency: the download does not wait for it.
    if (tap_sink_ && !tap_checked_) {
      tap_ = tap_sink_->device_tap();
      tap_checked_ = true;
    }
    s.device_slot = tap_ ? tap_->copy(s.cur.data[0], s.in_dev, compute_.get()) : -1;
    // The download can be skipped when the tap holds the frame and nobody reads it on the host.
    s.host_valid = s.device_slot < 0 || tap_sink_->needs_host_frames();
    if (s.host_valid) {
      NvtxRange range("D2H", s.rec.index);
      cuda::memcpy_d2h_async(s.frame_out->data(), s.cur.data[0], out_bytes_, down_.get());
    }
    ev[4 + S].record(down_.get());
    std::exception_ptr launch_error;
    if (completion_ == Completion::HostFunc) {
      try {
        cuda::launch_host_func(down_.get(), &on_downloaded, &s);
      } catch (...) {
        launch_error = std::current_exception();
      }
    }
    s.rec.launched_ns = now_ns();  // before the completion thread reads it (it waits for `launched`)
    {
      std::lock_guard<std::mutex> lk(mu_);
      s.launched = true;
      if (launch_error) {  // no callback will come: the frame is dropped, the run stops
        s.downloaded = true;
        if (!error_) error_ = launch_error;
      }
    }
    cv_.notify_all();
    if (launch_error) std::rethrow_exception(launch_error);
  }
  // Tail thread: each frame's tail in submission order, once its host part is done. After a
  // failure the frames still waiting are dropped (their host parts finished first: they
  // write into the slot).
  void tail_loop() {
    nvtx_name_thread("vfpipe tails");
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !tails_.empty(); });
      if (tails_.empty()) return;
      Slot& s = *slots_[static_cast<size_t>(tails_.front())];
      const bool drop = error_ != nullptr;
      lk.unlock();
      std::exception_ptr err;
      if (drop) {
        if (s.host.valid()) s.host.wait();
      } else {
        try {
          launch_tail(s);
        } catch (...) {
          err = std::current_exception();
          if (s.host.valid()) s.host.wait();
        }
      }
      lk.lock();
      if (drop || err) {
        if (!s.launched) s.failed = true;
        s.launched = s.downloaded = true;
        if (err && !error_) error_ = err;
      }
      tails_.pop_front();
      --tails_open_;
      cv_.notify_all();
    }
  }
  static void sync_no_throw(cuda::StreamHandle s) {
    try {
      cuda::Event e;
      e.record(s);
      e.synchronize();
    } catch (...) {
    }
  }
  // Worker thread: waits until the completion thread has handed on the slot's last frame.
  // A failure there (a CUDA error, the sink gone) is rethrown here, stopping the run.
  void wait_until_free(Slot& s) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return !s.busy || error_; });
    if (error_) std::rethrow_exception(error_);
  }
  // CUDA's callback thread, after the slot's download (Completion::HostFunc).
  static void on_downloaded(void* p) {
    Slot* s = static_cast<Slot*>(p);
    {
      std::lock_guard<std::mutex> lk(s->worker->mu_);
      s->downloaded = true;
    }
    s->worker->cv_.notify_all();
  }
  // Completion thread: blocks until the slot's download is done. False: the frame was
  // dropped before its download was queued.
  bool wait_for_download(Slot& s) {
    const cuda::Event& done = s.evs->ev[4 + chain_.size()];
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return s.launched; });  // the worker has queued everything for it
    if (s.failed) return false;
    if (completion_ == Completion::Event) {
      lk.unlock();
      done.synchronize();
      return true;
    }
    // A failed stream never runs the callback: the event reports the error instead.
    while (!cv_.wait_for(lk, std::chrono::milliseconds(20), [&] { return s.downloaded; })) {
      lk.unlock();
      (void)done.query();  // throws on a CUDA error
      lk.lock();
    }
    return true;
  }
  void completion_loop() {
    nvtx_name_thread("vfpipe completion");
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, nothing in flight
      Slot& s = *slots_[static_cast<size_t>(pending_.front())];
      const bool drop = error_ != nullptr;
      lk.unlock();
      std::exception_ptr err;
      bool handed_on = false;
      try {
        if (wait_for_download(s) && !drop) {
          complete(s);
          handed_on = true;
        }
      } catch (...) {
        err = std::current_exception();
      }
      if (!handed_on) release(s);
      lk.lock();
      if (err && !error_) error_ = err;
      s.busy = false;
      pending_.pop_front();
      cv_.notify_all();
    }
  }
  // Frees a slot whose frame is not handed on (after a failure).
  void release(Slot& s) {
    s.frame_in.reset();
    s.frame_out.reset();
    s.evs.reset();
  }
  void complete(Slot& s) {
    s.rec.done_ns = now_ns();
    s.frame_out->index = s.rec.index;
    s.frame_out->capture_ns = s.rec.capture_ns;
    FramePtr source = keep_source_ ? std::move(s.frame_in) : nullptr;
    s.frame_in.reset();
    emit_(OutItem{std::move(s.frame_out), std::move(s.rec), timing_ ? std::move(s.evs) : nullptr, std::move(source),
                  s.device_slot, s.host_valid});
    s.evs.reset();
  }

 public:
  void finalize(OutItem& item) override {
    auto evs = std::static_pointer_cast<FrameEvents>(item.timing);
    if (!evs) return;
    const size_t S = chain_.size();
    const Anchor& a = *evs->anchor;
    // One query per event, relative to the anchor; durations are differences of these.
    auto T = [&](size_t i) {
      return a.host_ns + static_cast<int64_t>(std::llround(cuda::Event::elapsed_ms(a.ev, evs->ev[i]) * 1e6));
    };
    // A stream starts a frame's work when both its dependency and the stream's previous
    // frame are done: the compute start is max(upload end, previous compute end), the
    // download start max(compute end, previous download end). Derived so, the two events
    // that would mark them need not be recorded (each record costs the worker ~0.6 us).
    FrameRecord& rec = item.rec;
    rec.clock_error_ns = a.error_ns;
    rec.step_ms.reserve(S + 2);
    rec.step_start_ns.reserve(S + 2);
    rec.step_end_ns.reserve(S + 2);
    auto span = [&](int64_t b, int64_t e) {
      rec.step_start_ns.push_back(b);
      rec.step_end_ns.push_back(e);
      rec.step_ms.push_back(static_cast<float>((e - b) / 1e6));
    };
    const int64_t up0 = T(0), up1 = T(1);
    span(up0, up1);
    int64_t t = up1;
    if (async_step_ < 0) {
      t = std::max(up1, last_compute_end_);
      for (size_t i = 0; i < S; ++i) {
        const int64_t e = T(3 + i);
        span(t, e);
        t = e;
      }
      if (S > 0) last_compute_end_ = t;
    } else {
      // Frames interleave on the compute stream (an earlier frame's tail is queued after
      // later frames' heads), but each step still runs its frames in order: a step starts
      // after its frame's previous step and its previous frame. The host_async() step's own
      // frames overlap: it starts with its frame.
      for (size_t i = 0; i < S; ++i) {
        const int64_t b = static_cast<int>(i) == async_step_ ? t : std::max(t, last_step_end_[i]);
        const int64_t e = T(3 + i);
        span(b, e);
        last_step_end_[i] = e;
        t = e;
      }
    }
    const int64_t down1 = T(4 + S);
    span(std::max(t, last_download_end_), down1);
    last_download_end_ = down1;
  }

 private:
  static constexpr size_t kMaxEvents = 72;  // chains of up to 67 stages
  Chain& chain_;
  Emit emit_;
  std::vector<std::string> labels_;  // NVTX range names
  cuda::Stream up_, compute_, down_, clock_;
  std::shared_ptr<const Anchor> anchor_;
  std::shared_ptr<EventPool> events_;
  bool timing_ = true, keep_source_ = false;
  Sink* tap_sink_ = nullptr;
  DeviceTap* tap_ = nullptr;
  bool tap_checked_ = false;
  int64_t last_compute_end_ = INT64_MIN, last_download_end_ = INT64_MIN;  // finalize() only
  std::vector<int64_t> last_step_end_;                                    // finalize() only
  int async_step_ = -1;        // the first host_async() step, or -1 (no tail thread)
  bool tail_mutable_ = false;  // stages after it take live changes (settle() waits)
  FramePool out_pool_;
  std::vector<std::unique_ptr<Slot>> slots_;
  size_t in_bytes_ = 0, out_bytes_ = 0;
  uint64_t next_ = 0;
  Completion completion_ = Completion::Event;
  // Between the worker and the completion thread: slots in flight in submission order.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> pending_;
  std::deque<int> tails_;  // slots whose tail the tail thread has still to queue
  int tails_open_ = 0;     // of those, not yet queued (settle() waits for 0)
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread completer_, tailer_;  // last: started after everything above exists
};
#endif

// Blocks SIGINT/SIGTERM in this thread (and the threads it starts) for its lifetime, so
// that the signal reaches the source thread, interrupting a blocking read there.
class SignalMaskGuard {
 public:
  SignalMaskGuard() {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &s, &old_);
  }
  ~SignalMaskGuard() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  const sigset_t& old() const { return old_; }

 private:
  sigset_t old_;
};

}  // namespace

namespace {

int current_device() {
#if VFPIPE_HAVE_CUDA
  return cuda::current_device();
#else
  return 0;
#endif
}
// -1: a CPU run, which must not touch the CUDA runtime (its start costs a few hundred ms).
void bind_device([[maybe_unused]] int device) {
#if VFPIPE_HAVE_CUDA
  if (device >= 0) cuda::set_device(device);
#endif
}

// One run of the pipeline: three threads (source, worker = the caller's, sink) around two
// bounded queues. A source failure ends the input but the frames already read are still
// processed and written ("loses nothing"); a stage or sink failure stops everything.
class PipelineRun {
 public:
  PipelineRun(Source& src, Chain& chain, Sink& sink, const EngineConfig& cfg)
      : src_(src),
        chain_(chain),
        sink_(sink),
        cfg_(cfg),
        depth_(cfg.depth < 2 ? 2 : cfg.depth),
        qcap_(cfg.queue < 1 ? 1 : cfg.queue),
        gpu_(cfg.backend == Backend::CUDA),
        inq_(static_cast<size_t>(qcap_)),
        outq_(static_cast<size_t>(qcap_)) {}

  RunResult run() {
    const auto t0 = std::chrono::steady_clock::now();
    describe_run();
    if (!start_worker()) return std::move(res_);
    res_.report.start_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    SignalMaskGuard mask;
    // The CUDA device is per thread: the helpers work on the caller's (batch pipelines are
    // bound to one GPU each by the thread that runs them).
    const int device = gpu_ ? current_device() : -1;
    std::thread sink_thread([&] {
      bind_device(device);
      sink_loop();
    });
    std::thread source_thread([&] {
      pthread_sigmask(SIG_SETMASK, &mask.old(), nullptr);  // receive SIGINT here
      bind_device(device);
      source_loop();
    });
    worker_loop();
    inq_.abort();  // frees a source blocked on a full queue after a failure
    source_thread.join();
    outq_.close();
    sink_thread.join();
    const auto t_finish = std::chrono::steady_clock::now();
    finish();
    res_.report.finish_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_finish).count();
    return std::move(res_);
  }

 private:
  void describe_run() {
    RunReport& rep = res_.report;
    rep.backend = backend_name(cfg_.backend);
    rep.device = "CPU";
#if VFPIPE_HAVE_CUDA
    if (gpu_) rep.device = cuda::device_name(cuda::current_device());
#endif
    rep.input = src_.describe();
    rep.output = sink_.describe();
    rep.chain = chain_.describe();
    rep.input_spec = chain_.input().describe();
    rep.output_spec = chain_.output().describe();
    rep.warmup = cfg_.warmup;
    rep.depth = gpu_ ? depth_ : 1;
    rep.bytes_up = FrameLayout::of(chain_.input()).payload_bytes;
    rep.bytes_down = FrameLayout::of(chain_.output()).payload_bytes;
    rep.max_records = cfg_.max_records;
  }

  // The backend's worker and the input frame pool; false (error kept, sink closed) if either fails.
  bool start_worker() {
    const bool keep_source = sink_.wants_source();
    auto emit = [this](OutItem&& it) { return outq_.push(std::move(it)); };
    try {
#if VFPIPE_HAVE_CUDA
      if (gpu_)
        // Output frames: one per slot in flight, the sink queue, and one being written.
        worker_ = std::make_unique<CudaWorker>(chain_, depth_, depth_ + qcap_ + 2, cfg_.timing, keep_source, &sink_,
                                               cfg_.completion, emit);
#else
      if (gpu_) throw Error(ErrorKind::Gpu, "this build of vfpipe has no CUDA support");
#endif
      if (!gpu_) worker_ = std::make_unique<CpuWorker>(chain_, qcap_ + 2, keep_source, emit);
      // Enough input frames for: the queue, the frames in flight, one being read, and
      // (CPU pass-through chains) frames forwarded to the sink queue.
      // A sink that wants the input frames holds them as long as the outputs: qcap + 2 more.
      if (!src_.provides_frames())
        in_pool_.emplace(chain_.input(), 2 * qcap_ + depth_ + 3 + (keep_source ? qcap_ + 2 : 0), gpu_);
#if VFPIPE_HAVE_CUDA
      // A source that decodes on this GPU leaves its frames there: each input frame gets
      // device memory, and the chain reads it without an upload. Not for a sink that shows
      // the input (it reads the host copy).
      if (gpu_ && in_pool_ && !keep_source && src_.can_fill_device()) {
        const size_t bytes = FrameLayout::of(chain_.input()).total_bytes;
        for (HostFrame* f : in_pool_->frames()) {
          in_device_.push_back(cuda::DeviceBuffer::frame(bytes, "an input frame in GPU memory"));
          f->device = in_device_.back().get();
        }
        res_.report.input += ", frames stay in GPU memory";
      }
#endif
    } catch (...) {
      res_.error = std::current_exception();
      sink_.close();
      return false;
    }
    res_.report.steps = worker_->step_names();
    res_.report.step_tracks = worker_->step_tracks();
    res_.report.step_copy = worker_->step_copies();
    return true;
  }

  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lk(err_mu_);
    if (!res_.error) res_.error = e;
    failing_ = true;
  }
  void fail_source(std::exception_ptr e) {
    std::lock_guard<std::mutex> lk(err_mu_);
    if (!res_.error) res_.error = e;
    source_failed_ = true;
  }
  bool stopping() const {
    return failing_.load() || source_failed_.load() || (cfg_.stop && cfg_.stop->load() != 0) || sink_.stop_requested();
  }

  // Sleeps until `due_ns` (now_ns's clock) plus the time the sink has held the source so
  // far (`*held_ns`, which grows while it holds; a camera keeps its own time and is never
  // held), in short steps so that a stop or a hold is seen at once; false if stopping.
  bool wait_until(int64_t due_ns, int64_t* held_ns) {
    for (;;) {
      if (stopping()) return false;
      if (sink_.holds_source() && !src_.is_live()) {
        const int64_t t0 = now_ns();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        *held_ns += now_ns() - t0;
        continue;
      }
      const int64_t left = due_ns + *held_ns - now_ns();
      if (left <= 0) return true;
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<int64_t>(left, 20'000'000)));
    }
  }

  void source_loop() {
    nvtx_name_thread("vfpipe source");
    try {
      int64_t n = 0, paced_from_ns = 0, held_ns = 0, due_ns = 0;
      double t0 = -1;  // the first frame's timestamp, for pacing by timestamps
      while (!stopping() && (cfg_.max_frames < 0 || n < cfg_.max_frames)) {
        FramePtr f;
        int64_t read_ns = now_ns();
        {
          NvtxRange range("read", n);
          if (src_.provides_frames()) {
            f = src_.next_frame();
            if (!f) break;
          } else {
            f = in_pool_->acquire();
            if (!src_.read(*f)) break;
          }
        }
        if (cfg_.pace_fps > 0) {
          // Read, then held until due, as ffmpeg's -re: frame n is due at its timestamp
          // after the first frame's (a variable frame rate plays as recorded), else at
          // n / fps; never before the frame before it.
          const int64_t took = now_ns() - read_ns;
          if (n == 0) paced_from_ns = read_ns + took;
          const double t = src_.time_of(n);
          if (n == 0) t0 = t;
          const int64_t at = t >= 0 && t0 >= 0 ? static_cast<int64_t>((t - t0) * 1e9)
                                               : static_cast<int64_t>(static_cast<double>(n) * 1e9 / cfg_.pace_fps);
          due_ns = std::max(due_ns, at);
          if (!wait_until(paced_from_ns + due_ns, &held_ns)) break;
          read_ns = std::max(read_ns, now_ns() - took);  // the read counts from when it was due
        }
        InItem item{std::move(f), n++, read_ns, now_ns()};
        if (!src_.provides_frames()) {  // pool frames are ours alone: stamp them
          item.frame->index = item.index;
          item.frame->capture_ns = item.capture_ns;
        }
        if (n == 1) t_first_ = item.capture_ns;
        ++frames_in_;
        auto stamp = [](InItem& it) { it.enqueue_ns = now_ns(); };
        if (cfg_.policy == Policy::Live) {
          int d = inq_.push_keep_newest(std::move(item), stamp);
          if (d < 0) break;
          dropped_ += d;
        } else if (!inq_.push(std::move(item), stamp)) {
          break;
        }
      }
    } catch (...) {
      fail_source(std::current_exception());
    }
    inq_.close();
  }

  void worker_loop() {
    try {
      nvtx_name_thread("vfpipe worker");
      while (auto it = inq_.pop()) {
        if (failing_) break;
        FrameRecord rec;
        rec.index = it->index;
        rec.read_ns = it->read_ns;
        rec.capture_ns = it->capture_ns;
        rec.enqueue_ns = it->enqueue_ns;
        if (cfg_.before_frame) {
          if (!cfg_.change_due || cfg_.change_due(it->index)) worker_->settle();
          cfg_.before_frame(it->index, chain_);
        }
        worker_->submit(std::move(it->frame), std::move(rec));
      }
      if (!failing_) worker_->flush();
    } catch (...) {
      fail(std::current_exception());
      inq_.abort();
    }
  }

  void sink_loop() {
    nvtx_name_thread("vfpipe sink");
    bool sink_ok = true;
    try {
      sink_.begin_stream();
    } catch (...) {
      sink_ok = false;
      fail(std::current_exception());
      inq_.abort();
    }
    while (auto it = outq_.pop()) {
      if (!sink_ok) continue;
      try {
        write(*it);
      } catch (...) {
        sink_ok = false;
        fail(std::current_exception());
        inq_.abort();
      }
    }
    try {
      sink_.end_of_stream();
    } catch (...) {
      fail(std::current_exception());
    }
  }

  void write(OutItem& it) {
    RunReport& rep = res_.report;
    worker_->finalize(it);
    it.rec.write_ns = now_ns();
    {
      NvtxRange range("write", it.rec.index);
      OutFrame of{*it.frame,       it.source.get(), &it.rec,        &rep.steps,
                  dropped_.load(), outq_.size(),    it.device_slot, it.host_valid};
      sink_.write_frame(of);
    }
    it.source.reset();
    it.rec.output_ns = now_ns();
    t_last_ = it.rec.output_ns;
    if (cfg_.on_frame) cfg_.on_frame(it.rec, dropped_.load());
    if (cfg_.timing) keep_record(std::move(it.rec));
    ++rep.frames_out;
    if (cfg_.progress) cfg_.progress(rep.frames_out, dropped_.load());
  }

  // Bounded memory: past max_records the newest records replace the oldest.
  void keep_record(FrameRecord&& rec) {
    RunReport& rep = res_.report;
    if (rep.max_records == 0 || rep.frames.size() < rep.max_records) {
      rep.frames.push_back(std::move(rec));
    } else {
      rep.frames[ring_] = std::move(rec);
      ring_ = (ring_ + 1) % rep.max_records;
      ++rep.records_evicted;
    }
  }

  void finish() {
    worker_.reset();
    try {
      sink_.close();
    } catch (...) {
      fail(std::current_exception());
    }
    RunReport& rep = res_.report;
    // The ring's oldest record is at `ring_`: restore output order.
    std::rotate(rep.frames.begin(), rep.frames.begin() + static_cast<std::ptrdiff_t>(ring_), rep.frames.end());
    rep.frames_in = frames_in_;
    rep.dropped = dropped_;
    rep.input_queue_high_water = inq_.high_water();
    rep.interrupted = cfg_.stop && cfg_.stop->load() != 0;
    rep.wall_s = (t_last_ > t_first_ && rep.frames_out > 0) ? (t_last_ - t_first_) / 1e9 : 0;
  }

  Source& src_;
  Chain& chain_;
  Sink& sink_;
  const EngineConfig& cfg_;
  const int depth_, qcap_;
  const bool gpu_;
  RunResult res_;
  std::mutex err_mu_;
  std::atomic<bool> failing_{false}, source_failed_{false};
  BoundedQueue<InItem> inq_;
  BoundedQueue<OutItem> outq_;
  std::atomic<int64_t> frames_in_{0}, dropped_{0};
  std::unique_ptr<Worker> worker_;
  std::optional<FramePool> in_pool_;
#if VFPIPE_HAVE_CUDA
  std::vector<cuda::DeviceBuffer> in_device_;  // the input frames' device memory (can_fill_device)
#endif
  size_t ring_ = 0;  // next record to overwrite once max_records are held
  int64_t t_first_ = 0, t_last_ = 0;
};

}  // namespace

RunResult run_pipeline(Source& src, Chain& chain, Sink& sink, const EngineConfig& cfg) {
  return PipelineRun(src, chain, sink, cfg).run();
}

}  // namespace vfp
