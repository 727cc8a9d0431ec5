// Bounded queue between the source, GPU and sink threads. Two push policies:
//   push()             blocks while full (batch: back-pressure, never drop)
//   push_keep_newest() never blocks: when full, the oldest item is dropped (live)
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>

namespace vfp {

template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : cap_(capacity ? capacity : 1) {}

  // Returns false if the queue was closed (the item is not queued). `on_insert(item)` runs
  // just before the item enters the queue, after any wait for room (the engine stamps the
  // enqueue time there).
  template <typename F = void (*)(T&)>
  bool push(
      T item, F&& on_insert = [](T&) {}) {
    std::unique_lock<std::mutex> lk(mu_);
    not_full_.wait(lk, [&] { return closed_ || q_.size() < cap_; });
    if (closed_) return false;
    on_insert(item);
    q_.push_back(std::move(item));
    high_water_ = q_.size() > high_water_ ? q_.size() : high_water_;
    not_empty_.notify_one();
    return true;
  }

  // Returns how many items were dropped to make room (0 or 1); -1 if closed.
  template <typename F = void (*)(T&)>
  int push_keep_newest(
      T item, F&& on_insert = [](T&) {}) {
    std::unique_lock<std::mutex> lk(mu_);
    if (closed_) return -1;
    on_insert(item);
    int dropped = 0;
    if (q_.size() >= cap_) {
      q_.pop_front();
      dropped = 1;
    }
    q_.push_back(std::move(item));
    high_water_ = q_.size() > high_water_ ? q_.size() : high_water_;
    not_empty_.notify_one();
    return dropped;
  }

  // Blocks until an item is available; nullopt once closed and drained.
  std::optional<T> pop() {
    std::unique_lock<std::mutex> lk(mu_);
    not_empty_.wait(lk, [&] { return closed_ || !q_.empty(); });
    if (q_.empty()) return std::nullopt;
    T v = std::move(q_.front());
    q_.pop_front();
    not_full_.notify_one();
    return v;
  }

  // No more pushes; pops drain what is left.
  void close() {
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }
  // Close and discard queued items (error shutdown).
  void abort() {
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = true;
    q_.clear();
    not_empty_.notify_all();
    not_full_.notify_all();
  }

  size_t size() const {
    std::lock_guard<std::mutex> lk(mu_);
    return q_.size();
  }
  size_t capacity() const { return cap_; }
  size_t high_water() const {
    std::lock_guard<std::mutex> lk(mu_);
    return high_water_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  std::deque<T> q_;
  size_t cap_;
  size_t high_water_ = 0;
  bool closed_ = false;
};

}  // namespace vfp
