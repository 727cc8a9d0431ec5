#include "core/parallel.hpp"

#include <sched.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "core/log.hpp"

namespace vfp {

namespace {
std::mutex g_mu;
std::unique_ptr<tbb::global_control> g_limit;  // process-wide: TBB enforces it for every arena
std::atomic<int> g_threads{0};                 // 0 = not set: every available core
bool g_chosen = false;                         // a positive count was set (under g_mu)

void set_limit(int t) {  // under g_mu
  g_limit.reset();
  g_limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(t));
  g_threads = t;
}
}  // namespace

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? static_cast<int>(hc) : 1;
}

void set_cpu_threads(int n) {
  if (n < 0) throw Error(ErrorKind::Usage, log::format("--threads %d: give 0 (all cores) or a positive count", n));
  std::lock_guard<std::mutex> lk(g_mu);
  set_limit(n == 0 ? available_cores() : n);
  g_chosen = n > 0;
}

int limit_default_cpu_threads(int n) {
  std::lock_guard<std::mutex> lk(g_mu);
  n = std::max(1, n);
  if (!g_chosen && n < cpu_threads()) set_limit(n);
  return cpu_threads();
}

PoolShare::PoolShare(int reserve)
    : threads_(std::max(1, cpu_threads() - std::max(0, reserve))),
      arena_(std::make_unique<tbb::task_arena>(threads_)) {}
PoolShare::~PoolShare() = default;

void PoolShare::run(const std::function<void()>& fn) { arena_->execute(fn); }

int cpu_threads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  static const int all = available_cores();
  return all;
}

}  // namespace vfp
