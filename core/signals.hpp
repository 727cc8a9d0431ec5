// SIGINT/SIGTERM handling: the first signal asks the pipeline to stop (finish the frames
// in flight, close outputs); a second one exits at once. `vfpipe batch` has one more step:
// the first Ctrl-C finishes the items in flight, the second abandons them (their temporary
// outputs are removed), the third exits at once.
#pragma once
#include <atomic>

namespace vfp {

std::atomic<int>& stop_flag();     // the signal number that asked to stop, or 0
std::atomic<int>& signal_count();  // signals received so far
// Also ignores SIGPIPE (a closed pipe is a write error). The `exit_at`-th signal exits at
// once (status 128 + signal).
void install_signal_handlers(int exit_at = 2);

}  // namespace vfp
