// One process-wide CPU thread pool (oneTBB's scheduler) that every parallel part of vfpipe
// uses: the CPU stages split each plane into row stripes, the synthetic source renders in
// stripes, and later parts (MMP tiles, batch pipelines) submit to the same pool. TBB
// shares its workers between every thread that submits work, so several pipelines in one
// process never start more threads than the limit set here.
#pragma once
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <functional>
#include <memory>

namespace vfp {

// Limits the pool to `n` threads (the caller's thread included); 0 = every core the process
// may use. Call before work starts (the CLI's --threads). Throws Error(Usage) for n < 0.
void set_cpu_threads(int n);
// Lowers the pool to `n` threads (at least 1) unless a positive count was set (the CLI's
// --threads N): for a stage whose other threads need cores of their own. Returns the limit
// in force afterwards.
int limit_default_cpu_threads(int n);
// The limit in force (every core the process may use when never set).
int cpu_threads();
// The number of cores this process may run on (its CPU affinity mask).
int available_cores();

// A share of the pool for a producer that runs beside latency-sensitive threads (the
// synthetic source renders while the engine's worker, completion and sink threads must get
// a core at once): work run through it uses at most cpu_threads() - reserve threads.
class PoolShare {
 public:
  explicit PoolShare(int reserve);
  ~PoolShare();
  PoolShare(const PoolShare&) = delete;
  PoolShare& operator=(const PoolShare&) = delete;
  void run(const std::function<void()>& fn);
  int threads() const { return threads_; }

 private:
  int threads_;
  std::unique_ptr<tbb::task_arena> arena_;
};

// Calls body(begin, end) over disjoint row ranges covering [0, n), in parallel on the pool;
// ranges hold at least `min_rows` rows (bodies that restart state per range, e.g. the
// median's histograms, amortise it over that many). With one thread, body(0, n) is called
// once on this thread: exactly the single-threaded reference loop.
template <typename Body>
void parallel_rows(int n, int min_rows, Body&& body) {
  if (n <= 0) return;
  min_rows = std::max(1, min_rows);
  if (cpu_threads() == 1 || n <= min_rows) {
    body(0, n);
    return;
  }
  // Fixed chunks of at least min_rows rows; TBB hands out contiguous runs of chunks.
  const int chunks = n / min_rows;
  auto row = [&](int c) { return static_cast<int>(static_cast<long long>(c) * n / chunks); };
  tbb::parallel_for(tbb::blocked_range<int>(0, chunks),
                    [&](const tbb::blocked_range<int>& r) { body(row(r.begin()), row(r.end())); });
}

}  // namespace vfp
