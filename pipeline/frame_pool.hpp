// A fixed set of host frames allocated once (pinned for the CUDA backend) and recycled:
// a FramePtr returns its frame to the pool when the last reference goes away.
#pragma once
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "core/frame.hpp"

namespace vfp {

class FramePool {
 public:
  FramePool(const FrameSpec& spec, int count, bool pinned);
  // Blocks until a frame is free.
  FramePtr acquire();
  int count() const { return count_; }
  int available() const;
  const FrameSpec& spec() const { return spec_; }
  // Every frame of the pool (to attach device memory before the first acquire).
  std::vector<HostFrame*> frames() const;

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::unique_ptr<HostFrame>> owned;
    std::vector<HostFrame*> free;
  };
  std::shared_ptr<State> st_;
  FrameSpec spec_;
  int count_;
};

}  // namespace vfp
