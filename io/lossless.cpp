#include "io/lossless.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <libdeflate.h>

#include "codecs/deflate/deflate.hpp"
#include "codecs/deflate/png.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/open.hpp"
#include "io/y4m.hpp"
#if VFPIPE_HAVE_CUDA
#include "cuda/deflate.hpp"
#endif

namespace vfp {

#if VFPIPE_HAVE_CUDA
struct LosslessEncoder::Gpu {
  cuda::DeflateEncoder enc;
  cuda::Stream stream;
  cuda::DeviceBuffer frame;  // PNG input, uploaded
};
#else
struct LosslessEncoder::Gpu {};
#endif

// libdeflate's compressor for one level (RAII).
struct LosslessEncoder::LibDeflate {
  explicit LibDeflate(int level) : c(libdeflate_alloc_compressor(level)) {
    if (!c) throw Error(ErrorKind::OutOfMemory, log::format("libdeflate: cannot make a level %d compressor", level));
  }
  ~LibDeflate() { libdeflate_free_compressor(c); }
  LibDeflate(const LibDeflate&) = delete;
  LibDeflate& operator=(const LibDeflate&) = delete;
  std::vector<uint8_t> run(const uint8_t* p, size_t n, DeflateFormat f) const {
    const size_t bound = f == DeflateFormat::Zlib   ? libdeflate_zlib_compress_bound(c, n)
                         : f == DeflateFormat::Gzip ? libdeflate_gzip_compress_bound(c, n)
                                                    : libdeflate_deflate_compress_bound(c, n);
    std::vector<uint8_t> out(bound);
    const size_t got = f == DeflateFormat::Zlib   ? libdeflate_zlib_compress(c, p, n, out.data(), out.size())
                       : f == DeflateFormat::Gzip ? libdeflate_gzip_compress(c, p, n, out.data(), out.size())
                                                  : libdeflate_deflate_compress(c, p, n, out.data(), out.size());
    if (got == 0) throw Error(ErrorKind::Internal, "libdeflate: the output did not fit its own bound");
    out.resize(got);
    return out;
  }
  libdeflate_compressor* c;
};

LosslessEncoder::LosslessEncoder(int level, bool gpu, bool reference) : level_(level) {
#if VFPIPE_HAVE_CUDA
  if (gpu && cuda::probe().usable) gpu_ = std::make_unique<Gpu>();
#else
  (void)gpu;
#endif
  if (!gpu_ && !reference) libdeflate_ = std::make_unique<LibDeflate>(level);
}
LosslessEncoder::~LosslessEncoder() = default;

const char* LosslessEncoder::engine() const {
  return gpu_ ? "GPU" : libdeflate_ ? "libdeflate" : "vfpipe CPU reference";
}

std::vector<uint8_t> LosslessEncoder::png(const uint8_t* img, size_t pitch, int w, int h, int ch, bool swap_rb) {
#if VFPIPE_HAVE_CUDA
  if (gpu_) {
    const size_t bytes = pitch * static_cast<size_t>(h);
    if (gpu_->frame.size() < bytes) gpu_->frame = cuda::DeviceBuffer(bytes, "PNG frame");
    cuda::memcpy_h2d_async(gpu_->frame.get(), img, bytes, gpu_->stream.get());
    return gpu_->enc.encode_png(gpu_->frame.get(), pitch, w, h, ch, swap_rb, level_, gpu_->stream.get());
  }
#endif
  if (libdeflate_) {
    const std::vector<uint8_t> rows = png_filter_rows(img, pitch, w, h, ch, swap_rb);
    return png_from_zlib(w, h, ch, libdeflate_->run(rows.data(), rows.size(), DeflateFormat::Zlib));
  }
  return encode_png(img, pitch, w, h, ch, swap_rb, level_);
}

std::vector<uint8_t> LosslessEncoder::compress(const uint8_t* p, size_t n, const deflate::Options& opt,
                                               DeflateFormat f) {
#if VFPIPE_HAVE_CUDA
  if (gpu_)
    return gpu_->enc.compress(p, n, opt,
                              f == DeflateFormat::Zlib   ? cuda::DeflateContainer::Zlib
                              : f == DeflateFormat::Gzip ? cuda::DeflateContainer::Gzip
                                                         : cuda::DeflateContainer::Raw);
#endif
  if (libdeflate_) return libdeflate_->run(p, n, f);
  return f == DeflateFormat::Zlib   ? deflate::compress_zlib(p, n, opt)
         : f == DeflateFormat::Gzip ? deflate::compress_gzip(p, n, opt)
                                    : deflate::compress(p, n, opt);
}

void require_output_dir(const std::string& path) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) return;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    throw Error(ErrorKind::Output, "output directory '" + dir.string() + "' " +
                                       (errno == ENOENT ? std::string("does not exist (create it first)")
                                                        : std::string("cannot be used: ") + std::strerror(errno)));
  if (!S_ISDIR(st.st_mode))
    throw Error(ErrorKind::Output, "output directory '" + dir.string() + "' is not a directory");
}

// ------------------------------------------------------------------ PNG sequence
PngSequenceSink::PngSequenceSink(std::string pattern, const LosslessOptions& opt)
    : pattern_(std::move(pattern)), opt_(opt) {}
PngSequenceSink::~PngSequenceSink() = default;

std::string PngSequenceSink::name(int64_t i) const { return single() ? pattern_ : sequence_file_name(pattern_, i); }

std::string PngSequenceSink::describe() const {
  return pattern_ + " (PNG, DEFLATE level " + std::to_string(opt_.level) +
         (enc_ ? std::string(", ") + enc_->engine() + ")" : std::string(")"));
}

void PngSequenceSink::open(const FrameSpec& spec) {
  // An image sequence's folder is created, as the other image-sequence writer does.
  const std::filesystem::path dir = std::filesystem::path(name(0)).parent_path();
  std::error_code ec;
  if (!dir.empty() && !std::filesystem::exists(dir, ec) && !std::filesystem::create_directories(dir, ec) && ec &&
      ec != std::errc::not_a_directory)
    throw Error(ErrorKind::Output, "cannot create output directory '" + dir.string() + "': " + ec.message());
  require_output_dir(name(0));
  if (spec.format != PixelFormat::BGR24 && spec.format != PixelFormat::GRAY8 && spec.format != PixelFormat::RGB24)
    throw Error(ErrorKind::Output, pattern_ + ": PNG holds gray or RGB, not " + pix_fmt_name(spec.format));
  enc_ = std::make_unique<LosslessEncoder>(opt_.level, opt_.gpu, opt_.reference);
  if (opt_.gpu && !enc_->on_gpu()) log::warn("%s: no usable GPU, PNGs are encoded on the CPU", pattern_.c_str());
  if (spec.non_square_pixels()) sar_ = spec.sar;
}

void PngSequenceSink::write(const HostFrame& f) {
  if (single() && n_ > 0)
    throw Error(ErrorKind::Output,
                "'" + pattern_ +
                    "' holds one image and a second frame came: add -n 1 "
                    "(ffmpeg: -frames:v 1), or write every frame with a pattern such as frames/%06d.png");
  const ImageView v = f.view();
  const int ch = f.spec().format == PixelFormat::GRAY8 ? 1 : 3;
  std::vector<uint8_t> png = enc_->png(v.data[0], static_cast<size_t>(v.pitch[0]), v.pw[0], v.ph[0], ch,
                                       f.spec().format == PixelFormat::BGR24);
  if (sar_.known()) png_add_pixel_aspect(png, sar_.num, sar_.den);
  write_file_atomically(name(n_), png);
  ++n_;
}

// ------------------------------------------------------------------ .y4m.gz
Y4mGzSink::Y4mGzSink(std::string path, const LosslessOptions& opt) : path_(std::move(path)), opt_(opt) {}
Y4mGzSink::~Y4mGzSink() {
  try {
    close();
  } catch (...) {
  }
}

std::string Y4mGzSink::describe() const {
  return path_ + " (Y4M, gzip member per frame, DEFLATE level " + std::to_string(opt_.level) +
         (enc_ ? std::string(", ") + enc_->engine() + ")" : std::string(")"));
}

void Y4mGzSink::open(const FrameSpec& s) {
  require_output_dir(path_);
  header_ = y4m_header(s);  // throws for formats Y4M cannot hold
  f_ = std::fopen(path_.c_str(), "wb");
  if (!f_) throw Error(ErrorKind::Output, "cannot open output '" + path_ + "': " + std::strerror(errno));
  enc_ = std::make_unique<LosslessEncoder>(opt_.level, opt_.gpu, opt_.reference);
  if (opt_.gpu && !enc_->on_gpu()) log::warn("%s: no usable GPU, compressing on the CPU", path_.c_str());
  buf_.resize(header_.size() + 6 + FrameLayout::of(s).payload_bytes);
}

void Y4mGzSink::write(const HostFrame& fr) {
  // The first member also carries the stream header.
  size_t at = 0;
  if (!header_.empty()) {
    std::memcpy(buf_.data(), header_.data(), header_.size());
    at = header_.size();
  }
  std::memcpy(buf_.data() + at, "FRAME\n", 6);
  fr.store_packed(buf_.data() + at + 6);
  const size_t n = at + 6 + FrameLayout::of(fr.spec()).payload_bytes;
  deflate::Options o;
  o.level = opt_.level;
  const std::vector<uint8_t> gz = enc_->compress(buf_.data(), n, o, DeflateFormat::Gzip);
  if (std::fwrite(gz.data(), 1, gz.size(), f_) != gz.size() || std::fflush(f_) != 0) {
    const int err = errno;
    // Cut the partial member off: the file stays a valid .gz of the complete frames.
    std::fclose(f_);
    f_ = nullptr;
    const int cut = ::truncate(path_.c_str(), static_cast<off_t>(complete_bytes_));
    throw Error(ErrorKind::Output, "cannot write to " + path_ + ": " + std::strerror(err) + " (the " +
                                       std::to_string(frames_) + " frames before this one are " +
                                       (cut == 0 ? "complete" : "written") + ")");
  }
  complete_bytes_ += gz.size();
  ++frames_;
  header_.clear();
}

void Y4mGzSink::close() {
  if (!f_) return;
  FILE* f = f_;
  f_ = nullptr;
  if (std::fclose(f) != 0)
    throw Error(ErrorKind::Output, "cannot finish writing " + path_ + ": " + std::strerror(errno));
}

}  // namespace vfp
