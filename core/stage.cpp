#include "core/stage.hpp"

#include "core/error.hpp"

namespace vfp {

const char* backend_name(Backend b) { return b == Backend::CUDA ? "cuda" : "cpu"; }

const std::string& Stage::name() const {
  static const std::string unnamed = "(unregistered)";
  return info_ ? info_->name : unnamed;
}

bool Stage::has_cuda() const { return info_ && info_->cuda; }

void Stage::update(const Options&) {
  throw Error(ErrorKind::Usage, "filter '" + name() + "' cannot change its options while running");
}

void Stage::run_cuda(const ImageView&, const ImageView&, const StageContext&) {
  throw Error(ErrorKind::Internal, "stage '" + name() + "' has no CUDA implementation");
}

std::shared_future<void> Stage::start_cuda(const ImageView&, const ImageView&, const StageContext&) {
  throw Error(ErrorKind::Internal, "stage '" + name() + "' has no asynchronous CUDA implementation");
}

void Stage::finish_cuda(const ImageView&, const StageContext&) {
  throw Error(ErrorKind::Internal, "stage '" + name() + "' has no asynchronous CUDA implementation");
}

}  // namespace vfp
