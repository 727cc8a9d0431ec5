#include "pipeline/frame_pool.hpp"

#include "core/log.hpp"

namespace vfp {

FramePool::FramePool(const FrameSpec& spec, int count, bool pinned)
    : st_(std::make_shared<State>()), spec_(spec), count_(count) {
  check_host_memory(static_cast<size_t>(count) * FrameLayout::of(spec).total_bytes,
                    log::format("%d frames of %s", count, spec.describe().c_str()));
  for (int i = 0; i < count; ++i) {
    st_->owned.push_back(std::make_unique<HostFrame>(spec, pinned));
    st_->free.push_back(st_->owned.back().get());
  }
}

FramePtr FramePool::acquire() {
  std::unique_lock<std::mutex> lk(st_->mu);
  st_->cv.wait(lk, [&] { return !st_->free.empty(); });
  HostFrame* f = st_->free.back();
  st_->free.pop_back();
  std::shared_ptr<State> st = st_;  // the deleter keeps the pool's frames alive
  return FramePtr(f, [st](HostFrame* p) {
    std::lock_guard<std::mutex> g(st->mu);
    st->free.push_back(p);
    st->cv.notify_one();
  });
}

std::vector<HostFrame*> FramePool::frames() const {
  std::lock_guard<std::mutex> lk(st_->mu);
  std::vector<HostFrame*> all;
  for (const auto& f : st_->owned) all.push_back(f.get());
  return all;
}

int FramePool::available() const {
  std::lock_guard<std::mutex> lk(st_->mu);
  return static_cast<int>(st_->free.size());
}

}  // namespace vfp
