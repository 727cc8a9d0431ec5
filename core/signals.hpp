// SIGINT/SIGTERM handling: the first signal asks the pipeline to stop (finish the frames
// in flight, close outputs); a second one exits at once.
#pragma once
#include <atomic>

namespace vfp {

std::atomic<int>& stop_flag();   // the signal number that asked to stop, or 0
void install_signal_handlers();  // also ignores SIGPIPE (a closed pipe is a write error)

}  // namespace vfp
