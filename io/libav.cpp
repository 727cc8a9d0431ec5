#include "io/libav.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>

#include "core/error.hpp"
#if VFPIPE_HAVE_NVDEC_DIRECT
#include "io/nvdec.hpp"
#endif
#include "core/log.hpp"
#include "cpu/convert.hpp"
#include "cpu/convert_ops.hpp"
#include "io/rate.hpp"
#include "io/stream_map.hpp"
#include "io/transcode.hpp"
#if VFPIPE_HAVE_CUDA
#include "core/gpu.hpp"
#include "cuda/kernels.hpp"
#endif

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/hwcontext.h>
#include <libavutil/imgutils.h>
#include <libavutil/mastering_display_metadata.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
#if VFPIPE_HAVE_CUDA
#include <libavutil/hwcontext_cuda.h>
#endif
}

namespace vfp {

bool have_libav() { return true; }

namespace {

// RAII for the libav objects.
struct FormatInput {
  AVFormatContext* f = nullptr;
  ~FormatInput() { avformat_close_input(&f); }
};
struct CodecContext {
  AVCodecContext* c = nullptr;
  ~CodecContext() { avcodec_free_context(&c); }
};
struct Frame {
  AVFrame* f = av_frame_alloc();
  ~Frame() { av_frame_free(&f); }
};
struct Packet {
  AVPacket* p = av_packet_alloc();
  ~Packet() { av_packet_free(&p); }
};

// libav's pixel formats that are one of ours as they are (8-bit) or at 16 bits (10/12/16-bit
// samples, scaled to the full 16-bit range as vfpipe's 16-bit formats hold them).
struct FormatMap {
  AVPixelFormat av;
  PixelFormat ours;
  int bits;
};
constexpr FormatMap kFormats[] = {
    {AV_PIX_FMT_YUV420P, PixelFormat::YUV420P, 8},
    {AV_PIX_FMT_YUVJ420P, PixelFormat::YUV420P, 8},
    {AV_PIX_FMT_YUV444P, PixelFormat::YUV444P, 8},
    {AV_PIX_FMT_YUVJ444P, PixelFormat::YUV444P, 8},
    {AV_PIX_FMT_GRAY8, PixelFormat::GRAY8, 8},
    {AV_PIX_FMT_BGR24, PixelFormat::BGR24, 8},
    {AV_PIX_FMT_RGB24, PixelFormat::RGB24, 8},
    {AV_PIX_FMT_YUV420P10LE, PixelFormat::YUV420P16, 10},
    {AV_PIX_FMT_YUV420P12LE, PixelFormat::YUV420P16, 12},
    {AV_PIX_FMT_YUV420P16LE, PixelFormat::YUV420P16, 16},
    {AV_PIX_FMT_YUV444P10LE, PixelFormat::YUV444P16, 10},
    {AV_PIX_FMT_YUV444P12LE, PixelFormat::YUV444P16, 12},
    {AV_PIX_FMT_YUV444P16LE, PixelFormat::YUV444P16, 16},
    {AV_PIX_FMT_GRAY10LE, PixelFormat::GRAY16, 10},
    {AV_PIX_FMT_GRAY12LE, PixelFormat::GRAY16, 12},
    {AV_PIX_FMT_GRAY16LE, PixelFormat::GRAY16, 16},
};
const FormatMap* find_map(AVPixelFormat f) {
  for (const FormatMap& m : kFormats)
    if (m.av == f) return &m;
  return nullptr;
}

// Formats with no direct counterpart are converted (libswscale) to the nearest of ours:
// RGB to bgr24, YUV keeping vertical chroma resolution (4:2:2 -> 4:4:4), depth kept.
AVPixelFormat nearest_format(AVPixelFormat f) {
  const AVPixFmtDescriptor* d = av_pix_fmt_desc_get(f);
  if (!d) return AV_PIX_FMT_YUV420P;
  const bool deep = d->comp[0].depth > 8;
  if (d->flags & AV_PIX_FMT_FLAG_RGB) return deep ? AV_PIX_FMT_YUV444P16LE : AV_PIX_FMT_BGR24;
  if (d->nb_components <= 2) return deep ? AV_PIX_FMT_GRAY16LE : AV_PIX_FMT_GRAY8;
  if (d->log2_chroma_h > 0 && d->log2_chroma_w > 0) return deep ? AV_PIX_FMT_YUV420P16LE : AV_PIX_FMT_YUV420P;
  return deep ? AV_PIX_FMT_YUV444P16LE : AV_PIX_FMT_YUV444P;
}

// Copies (and for 10/12-bit samples rescales) the planes of `src` (libav) into `dst` (ours).
void frame_to_view(const AVFrame* src, int bits, const ImageView& dst) {
  for (int p = 0; p < plane_count(dst.format); ++p) {
    const size_t row = static_cast<size_t>(dst.pw[p]) * sample_bytes(dst.format);
    for (int y = 0; y < dst.ph[p]; ++y) {
      const uint8_t* s = src->data[p] + static_cast<ptrdiff_t>(y) * src->linesize[p];
      uint8_t* d = dst.row(p, y);
      if (bits == 8 || bits == 16) {
        std::memcpy(d, s, row);
      } else {
        const uint16_t* s16 = reinterpret_cast<const uint16_t*>(s);
        uint16_t* d16 = reinterpret_cast<uint16_t*>(d);
        for (int x = 0; x < dst.pw[p]; ++x) d16[x] = conv::widen_to16(s16[x], bits);
      }
    }
  }
}
// NVDEC's 4:2:0 output (NV12, or P010/P016 with the samples in the high bits; `f`: its
// format, on the host or in GPU memory) as a semi-planar picture for our planar 4:2:0
// formats; false when it is not one of them (or not for `dst`'s format). The split is
// exact: the same samples the CPU decoder gives.
bool semi_planar_of(const AVFrame* src, AVPixelFormat f, int bits, PixelFormat dst, SemiPlanar* out) {
  const bool nv12 = f == AV_PIX_FMT_NV12 && dst == PixelFormat::YUV420P;
  const bool p01x = (f == AV_PIX_FMT_P010 || f == AV_PIX_FMT_P016) && dst == PixelFormat::YUV420P16;
  if (!nv12 && !p01x) return false;
  *out = {src->data[0], src->linesize[0], src->data[1], src->linesize[1], nv12 ? 8 : bits};
  return true;
}

void view_to_frame(const ImageView& src, int bits, AVFrame* dst) {
  for (int p = 0; p < plane_count(src.format); ++p) {
    const size_t row = static_cast<size_t>(src.pw[p]) * sample_bytes(src.format);
    for (int y = 0; y < src.ph[p]; ++y) {
      const uint8_t* s = src.row(p, y);
      uint8_t* d = dst->data[p] + static_cast<ptrdiff_t>(y) * dst->linesize[p];
      if (bits == 8 || bits == 16) {
        std::memcpy(d, s, row);
      } else {
        const uint16_t* s16 = reinterpret_cast<const uint16_t*>(s);
        uint16_t* d16 = reinterpret_cast<uint16_t*>(d);
        for (int x = 0; x < src.pw[p]; ++x) d16[x] = conv::narrow_from16(s16[x], bits);
      }
    }
  }
}

double seconds(int64_t ts, AVRational tb) { return ts == AV_NOPTS_VALUE ? 0 : ts * av_q2d(tb); }

}  // namespace

struct LibavInput {
  std::string url;
  AVRational time_base{1, 25};             // the video stream's
  AVPixelFormat native = AV_PIX_FMT_NONE;  // the decoder's format
  PixelFormat ours = PixelFormat::YUV420P;
  int bits = 8;
  AVColorRange range = AVCOL_RANGE_UNSPECIFIED;
  AVColorSpace matrix = AVCOL_SPC_UNSPECIFIED;
  AVColorPrimaries primaries = AVCOL_PRI_UNSPECIFIED;
  AVColorTransferCharacteristic transfer = AVCOL_TRC_UNSPECIFIED;
  AVChromaLocation chroma_location = AVCHROMA_LOC_UNSPECIFIED;
  double origin = 0;    // seconds: the input's start plus -ss; output timestamps count from here
  bool seeked = false;  // -ss given
  double end = std::numeric_limits<double>::infinity();  // seconds: origin + -t
  // What decoded the video, known at the first frame: "cpu", "nvdec (libavcodec)", "nvdec"
  // (its own API), "nvdec (reused)" (a decoder an earlier file left).
  std::string decoder = "cpu";

  // What the output carries over, copied from the demuxer when it opened: the container's
  // and the video stream's metadata, the rotation, and the other streams' parameters.
  struct Stream {
    int index = -1;
    AVMediaType type = AVMEDIA_TYPE_UNKNOWN;
    AVCodecParameters* par = nullptr;
    AVRational time_base{1, 1000};
    int disposition = 0;
    AVDictionary* metadata = nullptr;
  };
  AVDictionary* metadata = nullptr;
  AVDictionary* video_metadata = nullptr;
  int video_disposition = 0;
  std::vector<uint8_t> display_matrix;
  std::vector<Stream> others;  // candidates for copying: -map's choice, or every other stream
  bool mapped = false;         // -map given: `others` is exactly what it chose

  ~LibavInput() {
    av_dict_free(&metadata);
    av_dict_free(&video_metadata);
    for (Stream& s : others) {
      avcodec_parameters_free(&s.par);
      av_dict_free(&s.metadata);
    }
    for (AVPacket* p : queue) av_packet_free(&p);
  }

  // Timestamps of the frames handed to the pipeline, by frame index (video time base).
  // Outputs that take none (null, the display) would let them pile up over a long stream:
  // those far behind any frame the pipeline can still hold are forgotten.
  void record(int64_t index, int64_t pts) {
    std::lock_guard<std::mutex> lk(mu);
    pts_of[index] = pts;
    pts_of.erase(pts_of.begin(), pts_of.lower_bound(index - kTimestampsKept));
  }
  static constexpr int64_t kTimestampsKept = 4096;  // frames; the engine holds at most ~100
  // The timestamp of frame `index`, kept for the output.
  bool peek(int64_t index, int64_t* pts) {
    std::lock_guard<std::mutex> lk(mu);
    auto it = pts_of.find(index);
    if (it == pts_of.end()) return false;
    *pts = it->second;
    return true;
  }
  // The timestamp of frame `index`, and forgets it (each output frame is written once).
  bool take(int64_t index, int64_t* pts) {
    std::lock_guard<std::mutex> lk(mu);
    auto it = pts_of.find(index);
    if (it == pts_of.end()) return false;
    *pts = it->second;
    pts_of.erase(pts_of.begin(), std::next(it));  // older ones were dropped by the live policy
    return true;
  }

  // The packets of the copied streams travel from the source's demuxer to the output through
  // this queue: one demuxer, so pipes and network streams are copied too. The output claims
  // its streams when it is created, before the source reads any packet.
  void claim(const std::vector<int>& streams) {
    std::lock_guard<std::mutex> lk(mu);
    for (int s : streams) {
      if (static_cast<size_t>(s) >= claimed.size()) claimed.resize(static_cast<size_t>(s) + 1, false);
      claimed[static_cast<size_t>(s)] = true;
    }
  }
  bool wants(int stream) {
    std::lock_guard<std::mutex> lk(mu);
    return static_cast<size_t>(stream) < claimed.size() && claimed[static_cast<size_t>(stream)];
  }
  bool wants_any() {
    std::lock_guard<std::mutex> lk(mu);
    return std::find(claimed.begin(), claimed.end(), true) != claimed.end();
  }
  // The source's packet of a claimed stream, moved into the queue.
  void offer(AVPacket* p) {
    if (!wants(p->stream_index)) return;
    AVPacket* q = av_packet_alloc();
    if (!q) throw Error(ErrorKind::OutOfMemory, "a copied packet");
    av_packet_move_ref(q, p);
    std::lock_guard<std::mutex> lk(mu);
    queue.push_back(q);
  }
  // The oldest queued packet if its time (seconds of the input) is at most `until`; the
  // caller owns it.
  AVPacket* next_packet(double until) {
    std::lock_guard<std::mutex> lk(mu);
    if (queue.empty()) return nullptr;
    AVPacket* p = queue.front();
    const Stream* s = stream(p->stream_index);
    const int64_t ts = p->pts != AV_NOPTS_VALUE ? p->pts : p->dts;
    if (s && ts != AV_NOPTS_VALUE && ts * av_q2d(s->time_base) > until) return nullptr;
    queue.pop_front();
    return p;
  }
  const Stream* stream(int index) const {
    for (const Stream& s : others)
      if (s.index == index) return &s;
    return nullptr;
  }

  // HDR: the mastering display's colour volume and the content's light levels, as
  // AVMasteringDisplayMetadata and AVContentLightMetadata bytes; empty where unknown.
  struct Hdr {
    std::vector<uint8_t> mastering_display, light_level;
  };
  // From the container (stream side data), or else from the first decoded frame (HEVC's
  // and AV1's own metadata, which only the decoder sees). Whatever is known first stays.
  void keep_hdr(const uint8_t* mastering, size_t mastering_size, const uint8_t* light, size_t light_size) {
    std::lock_guard<std::mutex> lk(mu);
    if (mastering && hdr_.mastering_display.empty() && mastering_size >= sizeof(AVMasteringDisplayMetadata))
      hdr_.mastering_display.assign(mastering, mastering + sizeof(AVMasteringDisplayMetadata));
    if (light && hdr_.light_level.empty() && light_size >= sizeof(AVContentLightMetadata))
      hdr_.light_level.assign(light, light + sizeof(AVContentLightMetadata));
  }
  Hdr hdr() {
    std::lock_guard<std::mutex> lk(mu);
    return hdr_;
  }

 private:
  std::mutex mu;
  Hdr hdr_;
  std::map<int64_t, int64_t> pts_of;
  std::vector<bool> claimed;  // by input stream index
  std::deque<AVPacket*> queue;
};

namespace {

// "PQ" or "HLG" for the HDR transfers, else "".
const char* hdr_transfer_name(AVColorTransferCharacteristic t) {
  return t == AVCOL_TRC_SMPTE2084 ? "PQ" : t == AVCOL_TRC_ARIB_STD_B67 ? "HLG" : "";
}

// Opens `url` for reading; throws vfp::Error (Input) naming the problem.
void open_input(FormatInput& in, const std::string& url) {
  if (int e = avformat_open_input(&in.f, url.c_str(), nullptr, nullptr); e < 0)
    throw Error(ErrorKind::Input, "cannot open input '" + url + "': " + averr(e));
  if (int e = avformat_find_stream_info(in.f, nullptr); e < 0)
    throw Error(ErrorKind::Input, "'" + url + "': cannot read its streams: " + averr(e));
}

// libavcodec's CUDA device for NVDEC, one per GPU for the whole process (creating one costs
// a context's start; one per pipeline measured slower in a batch: docs/perf.md). Null, with
// `why`, when there is none (no driver, no GPU, a libav without CUDA).
//
// `on_runtime`: on the CUDA runtime's own context of the GPU, so that decoded frames are
// device memory the chain's kernels can read (the CUDA backend). libav's own way to share
// the primary context wants it made with blocking synchronisation and refuses it once the
// runtime has started it otherwise, so the device is built around the runtime's context.
// Else (the CPU backend, which never starts the runtime) libav's own choice: the primary
// context with its flags, or a context of its own.
AVBufferRef* nvdec_device(int gpu, bool on_runtime, std::string* why) {
  static std::mutex mu;
  static std::map<std::pair<int, bool>, AVBufferRef*> devices;  // kept for the process's life
  static std::map<std::pair<int, bool>, std::string> failures;
  std::lock_guard<std::mutex> lk(mu);
  const auto key = std::make_pair(gpu, on_runtime);
  if (auto f = devices.find(key); f != devices.end()) return f->second;
  if (auto f = failures.find(key); f != failures.end()) {
    *why = f->second;
    return nullptr;
  }
  AVBufferRef* ref = nullptr;
  const std::string name = std::to_string(gpu);
  int e = 0;
#if VFPIPE_HAVE_CUDA
  if (on_runtime) {
    e = AVERROR(ENODEV);
    try {
      void* ctx = cuda::primary_context(gpu);
      ref = av_hwdevice_ctx_alloc(AV_HWDEVICE_TYPE_CUDA);
      if (ref) {
        auto* hw = static_cast<AVCUDADeviceContext*>(reinterpret_cast<AVHWDeviceContext*>(ref->data)->hwctx);
        hw->cuda_ctx = static_cast<CUcontext>(ctx);  // the runtime's: libav does not release it
        // The decoder's mapping of pictures goes on a stream of its own, which the copies
        // into the chain's frames wait for (not the default stream, which would order it
        // with every other stream of the context). Kept, as the device, for the process.
        static std::deque<cuda::Stream> streams;  // under `mu`
        streams.emplace_back();
        hw->stream = reinterpret_cast<CUstream>(streams.back().get());
        e = av_hwdevice_ctx_init(ref);
        if (e < 0) av_buffer_unref(&ref);
      }
    } catch (const Error& err) {
      log::debug("NVDEC on the runtime's context: %s", err.what());
    }
  }
#endif
  if (!on_runtime) {
    // The runtime's primary context when libav accepts its flags, else a context of its own.
    constexpr int kUsePrimaryContext = 1;  // AV_CUDA_USE_PRIMARY_CONTEXT (libavutil/hwcontext_cuda.h)
    e = av_hwdevice_ctx_create(&ref, AV_HWDEVICE_TYPE_CUDA, name.c_str(), nullptr, kUsePrimaryContext);
    if (e < 0) e = av_hwdevice_ctx_create(&ref, AV_HWDEVICE_TYPE_CUDA, name.c_str(), nullptr, 0);
  }
  if (e < 0 || !ref) {
    failures[key] = *why = "libav cannot open CUDA device " + name + ": " + averr(e < 0 ? e : AVERROR(ENOMEM));
    return nullptr;
  }
  devices[key] = ref;
  return ref;
}

}  // namespace

bool prepare_nvdec(int gpu, std::string* why) {
  std::string unused;
  return nvdec_device(gpu, true, why ? why : &unused) != nullptr;
}

namespace {

// The decoder's choice of output format: CUDA frames when offered (NVDEC takes this
// stream), else the software format libavcodec would pick.
AVPixelFormat pick_cuda_format(AVCodecContext* c, const AVPixelFormat* fmts) {
  for (const AVPixelFormat* p = fmts; *p != AV_PIX_FMT_NONE; ++p)
    if (*p == AV_PIX_FMT_CUDA) return *p;
  return avcodec_default_get_format(c, fmts);
}

class LibavSource final : public Source {
 public:
  LibavSource(const std::string& url, const LibavInputOptions& opt) : info_(std::make_shared<LibavInput>()) {
    info_->url = url;
    open_input(in_, url);
    int vs = -1;
    std::vector<int> others;
    if (!opt.map.empty()) {
      std::vector<StreamKind> kinds;
      for (unsigned i = 0; i < in_.f->nb_streams; ++i) {
        const AVStream* s = in_.f->streams[i];
        const AVMediaType t = s->codecpar->codec_type;
        kinds.push_back({t == AVMEDIA_TYPE_VIDEO        ? 'v'
                         : t == AVMEDIA_TYPE_AUDIO      ? 'a'
                         : t == AVMEDIA_TYPE_SUBTITLE   ? 's'
                         : t == AVMEDIA_TYPE_ATTACHMENT ? 't'
                                                        : 'd',
                         (s->disposition & AV_DISPOSITION_ATTACHED_PIC) != 0});
      }
      const MappedStreams m = resolve_stream_maps(opt.map, kinds);
      vs = m.video;
      others = m.copied;
      info_->mapped = true;
    } else {
      vs = av_find_best_stream(in_.f, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
      if (vs < 0) throw Error(ErrorKind::Input, "'" + url + "' has no video stream");
      for (unsigned i = 0; i < in_.f->nb_streams; ++i)
        if (static_cast<int>(i) != vs) others.push_back(static_cast<int>(i));
    }
    st_ = in_.f->streams[vs];
    keep_stream_info(others);
    info_->time_base = st_->time_base;
    const AVCodec* dec = avcodec_find_decoder(st_->codecpar->codec_id);
    if (!dec)
      throw Error(ErrorKind::Input,
                  "'" + url + "': no decoder for " + std::string(avcodec_get_name(st_->codecpar->codec_id)));
    dec_.c = avcodec_alloc_context3(dec);
    avcodec_parameters_to_context(dec_.c, st_->codecpar);
    dec_.c->thread_count = opt.threads;  // 0: libavcodec picks (frame and slice threads)
    const bool nvdec = setup_direct_nvdec(opt, url) || setup_nvdec(dec, opt, url);
    if (int e = avcodec_open2(dec_.c, dec, nullptr); e < 0)
      throw Error(ErrorKind::Input, "'" + url + "': cannot open the " + dec->name + " decoder: " + averr(e));
    if (dec_.c->pix_fmt == AV_PIX_FMT_NONE || dec_.c->width <= 0 || dec_.c->height <= 0)
      throw Error(ErrorKind::Input,
                  "'" + url +
                      "': the video stream's size and pixel format cannot be read (an .mp4 with its index at "
                      "the end, read from a pipe or a server that cannot seek? remux it with -movflags +faststart)");
    set_format(dec_.c->pix_fmt);
    const AVCodecParameters* cp = st_->codecpar;
    info_->range = cp->color_range;
    info_->matrix = cp->color_space;
    info_->primaries = cp->color_primaries;
    info_->transfer = cp->color_trc;
    info_->chroma_location = cp->chroma_location;
    // The matrix and range the conversions to RGB (format stage, display, PNG) use.
    spec_.color.matrix = cp->color_space == AVCOL_SPC_BT709 ? ColorMatrix::BT709
                         : cp->color_space == AVCOL_SPC_BT470BG || cp->color_space == AVCOL_SPC_SMPTE170M
                             ? ColorMatrix::BT601
                         : cp->color_space == AVCOL_SPC_BT2020_NCL ? ColorMatrix::BT2020
                                                                   : ColorMatrix::Unspecified;
    spec_.color.range = cp->color_range == AVCOL_RANGE_MPEG   ? ColorRange::Limited
                        : cp->color_range == AVCOL_RANGE_JPEG ? ColorRange::Full
                        : dec_.c->pix_fmt == AV_PIX_FMT_YUVJ420P || dec_.c->pix_fmt == AV_PIX_FMT_YUVJ444P
                            ? ColorRange::Full
                            : ColorRange::Unspecified;
    spec_.width = cp->width;
    spec_.height = cp->height;
    // The pixels' aspect (the container's, else the codec's): anamorphic video keeps its shape.
    if (const AVRational sar = av_guess_sample_aspect_ratio(in_.f, st_, nullptr); sar.num > 0 && sar.den > 0)
      spec_.sar = {sar.num, sar.den};
    // Interlaced video: the field displayed first (TT and BT show the top one first).
    const AVFieldOrder fo = cp->field_order;
    spec_.fields = fo == AV_FIELD_TT || fo == AV_FIELD_BT   ? FieldOrder::TopFirst
                   : fo == AV_FIELD_BB || fo == AV_FIELD_TB ? FieldOrder::BottomFirst
                                                            : FieldOrder::Progressive;
    AVRational r = st_->avg_frame_rate.num > 0 ? st_->avg_frame_rate : st_->r_frame_rate;
    if (r.num <= 0 || r.den <= 0) r = {25, 1};
    spec_.fps = {r.num, r.den};
    validate_spec(spec_, ("input '" + url + "'").c_str());
    const double start = in_.f->start_time == AV_NOPTS_VALUE ? 0 : in_.f->start_time / double(AV_TIME_BASE);
    info_->origin = start + std::max(0.0, opt.start);
    info_->seeked = opt.start > 0;
    if (opt.duration >= 0) info_->end = info_->origin + opt.duration;
    if (opt.start > 0 && in_.f->duration != AV_NOPTS_VALUE && in_.f->duration > 0 &&
        opt.start >= in_.f->duration / double(AV_TIME_BASE))
      throw Error(ErrorKind::Usage, log::format("-ss %g: '%s' lasts %.2f s, so nothing is left to filter", opt.start,
                                                url.c_str(), in_.f->duration / double(AV_TIME_BASE)));
    if (opt.start > 0) {
      const int64_t ts = static_cast<int64_t>(info_->origin * AV_TIME_BASE);
      if (int e = av_seek_frame(in_.f, -1, ts, AVSEEK_FLAG_BACKWARD); e < 0)
        throw Error(ErrorKind::Input, "'" + url + "': cannot seek to " + std::to_string(opt.start) + " s: " + averr(e));
    }
    if (st_->nb_frames > 0 && opt.start <= 0 && opt.duration < 0) frames_ = expected_ = st_->nb_frames;
    // A still image file (libav's image2 or one of its *_pipe demuxers: PNG, JPEG, TIFF,
    // ...) is one frame, which a one-image output needs to know before the run.
    const std::string demuxer = in_.f->iformat->name;
    const bool file = url.find("://") == std::string::npos && url.rfind("pipe:", 0) != 0 && url.rfind("fd:", 0) != 0;
    if (frames_ < 0 && file && opt.start <= 0 &&
        (demuxer == "image2" || (demuxer.size() > 5 && demuxer.compare(demuxer.size() - 5, 5, "_pipe") == 0)))
      frames_ = 1;
    // Where the video stream ends by the container (its duration, or Matroska's per-track
    // DURATION tag): with no frame count to compare, a truncated file shows as an early end.
    if (opt.start <= 0 && opt.duration < 0) {
      const double s0 = st_->start_time == AV_NOPTS_VALUE ? 0 : seconds(st_->start_time, st_->time_base);
      if (st_->duration != AV_NOPTS_VALUE && st_->duration > 0) {
        stream_end_ = s0 + seconds(st_->duration, st_->time_base);
      } else if (const AVDictionaryEntry* d = av_dict_get(st_->metadata, "DURATION", nullptr, 0)) {
        int h = 0, m = 0;
        double sec = 0;
        if (std::sscanf(d->value, "%d:%d:%lf", &h, &m, &sec) == 3) stream_end_ = s0 + h * 3600.0 + m * 60.0 + sec;
      }
    }
    ignore_errors_ = opt.ignore_errors;
    describe_ =
        url + " (" + std::string(dec->name) + (nvdec ? " on NVDEC" : "") + ", " +
        av_get_pix_fmt_name(dec_.c->sw_pix_fmt != AV_PIX_FMT_NONE && nvdec ? dec_.c->sw_pix_fmt : dec_.c->pix_fmt) +
        (hdr_transfer_name(cp->color_trc)[0] ? std::string(", HDR ") + hdr_transfer_name(cp->color_trc) : "") + ")";
  }
  ~LibavSource() override {
    av_frame_unref(frame_.f);  // a mapped picture goes back to its decoder first
    sws_freeContext(sws_);
    av_buffer_unref(&direct_frames_);
  }

  FrameSpec spec() const override { return spec_; }
  std::string describe() const override { return describe_; }
  int64_t frame_count() const override { return frames_; }
  bool can_fill_device() const override { return frames_on_gpu_; }
  bool handles_time_window() const override { return true; }  // -ss seeks, -t ends by timestamps
  int sample_bits() const override { return info_->bits > 8 && info_->bits < 16 ? info_->bits : 0; }
  std::shared_ptr<LibavInput> input() const { return info_; }

  double time_of(int64_t index) const override {
    int64_t pts = 0;
    return info_->peek(index, &pts) && pts != AV_NOPTS_VALUE ? seconds(pts, info_->time_base) : -1;
  }

  bool read(HostFrame& dst) override {
    while (true) {
      const int r = receive_frame();
      if (r == AVERROR_EOF) return end_of_input();
      if (r == 0) {
        ++decoded_;
        const int64_t pts = frame_.f->best_effort_timestamp;
        const double t = seconds(pts, info_->time_base);
        if (pts != AV_NOPTS_VALUE && t < info_->origin - 1e-9) continue;  // before -ss
        if (pts != AV_NOPTS_VALUE && t >= info_->end - 1e-9) {            // past -t
          read_copied_to_end();
          return false;
        }
        deliver(dst, pts);
        return true;
      }
      if (r != AVERROR(EAGAIN)) return input_error("decoding failed: " + averr(r));
      if (!feed()) return false;
    }
  }

 private:
  // The end: complete, or with damage: packets the decoder could not use, or fewer frames
  // than the container's index lists. Every frame decoded, before and after the damage, has
  // been delivered; the damage is then reported (an error, or a warning when ignored).
  bool end_of_input() {
    // Frames missing: fewer than the index lists, or fewer than the video packets read (one
    // frame per packet; the decoder drops the frames of packets it cannot use).
    int64_t lost = expected_ > next_ ? expected_ - next_ : 0;
    const AVFieldOrder fo = st_->codecpar->field_order;
    const bool frame_packets = fo == AV_FIELD_PROGRESSIVE || fo == AV_FIELD_UNKNOWN;  // not one field a packet
    if (lost == 0 && frame_packets && packets_ > decoded_) lost = packets_ - decoded_;
    const double fps = spec_.fps.value() > 0 ? spec_.fps.value() : 25;
    if (lost == 0 && expected_ == 0 && stream_end_ > 0 && last_end_ >= 0 && stream_end_ - last_end_ > 2 / fps + 0.05)
      lost = std::llround((stream_end_ - last_end_) * fps);
    if (lost == 0 && damaged_ == 0) return false;
    std::string why;
    if (damaged_ > 0) why = std::to_string(damaged_) + " damaged packet" + (damaged_ > 1 ? "s" : "") + " skipped";
    if (lost > 0) why += (why.empty() ? "" : ", ") + std::to_string(lost) + " frame" + (lost > 1 ? "s" : "") + " lost";
    expected_ = damaged_ = packets_ = decoded_ = 0;
    return damage(why);
  }
  // Damage that ends the input here (a read error).
  bool input_error(const std::string& why) {
    return damage("it breaks after frame " + std::to_string(next_) + ": " + why);
  }
  bool damage(const std::string& why) {
    const std::string what = "'" + info_->url + "' is damaged (" + why + ")";
    if (!ignore_errors_)
      throw Error(ErrorKind::Input, what + "; the " + std::to_string(next_) +
                                        " frames decoded are written (--ignore-input-errors: accept)");
    log::warn("%s", what.c_str());
    return false;
  }

  // -t ends the video before the demuxer's end: the copied streams' packets up to that time
  // are still to be read (the output cuts them at -t). Demuxers give packets in about time
  // order, so a packet a few seconds past the end ends the search (sparse subtitles too).
  void read_copied_to_end() {
    if (!info_->wants_any() || copied_read_) return;
    copied_read_ = true;
    while (av_read_frame(in_.f, packet_.p) >= 0) {
      const AVPacket* p = packet_.p;
      const int64_t ts = p->pts != AV_NOPTS_VALUE ? p->pts : p->dts;
      const bool past =
          ts != AV_NOPTS_VALUE && seconds(ts, in_.f->streams[p->stream_index]->time_base) > info_->end + 3;
      if (p->stream_index != st_->index) info_->offer(packet_.p);
      av_packet_unref(packet_.p);
      if (past) break;
    }
  }

  // What the output carries over (metadata, rotation, the other streams' parameters),
  // copied now: the demuxer may update its own while it reads.
  void keep_stream_info(const std::vector<int>& others) {
    av_dict_copy(&info_->metadata, in_.f->metadata, 0);
    av_dict_copy(&info_->video_metadata, st_->metadata, 0);
    info_->video_disposition = st_->disposition;
    size_t n = 0;
    if (const uint8_t* m = av_stream_get_side_data(st_, AV_PKT_DATA_DISPLAYMATRIX, &n); m && n >= 9 * 4)
      info_->display_matrix.assign(m, m + n);
    size_t ln = 0;
    const uint8_t* mastering = av_stream_get_side_data(st_, AV_PKT_DATA_MASTERING_DISPLAY_METADATA, &n);
    const uint8_t* light = av_stream_get_side_data(st_, AV_PKT_DATA_CONTENT_LIGHT_LEVEL, &ln);
    info_->keep_hdr(mastering, n, light, ln);
    for (int i : others) {
      const AVStream* s = in_.f->streams[i];
      LibavInput::Stream o;
      o.index = i;
      o.type = s->codecpar->codec_type;
      o.time_base = s->time_base;
      o.disposition = s->disposition;
      o.par = avcodec_parameters_alloc();
      if (!o.par || avcodec_parameters_copy(o.par, s->codecpar) < 0) {
        avcodec_parameters_free(&o.par);
        throw Error(ErrorKind::OutOfMemory, "a stream's parameters");
      }
      av_dict_copy(&o.metadata, s->metadata, 0);
      info_->others.push_back(o);
    }
  }

  void set_format(AVPixelFormat f) {
    const FormatMap* m = find_map(f);
    info_->native = f;
    if (m) {
      spec_.format = m->ours;
      info_->bits = m->bits;
    } else {
      convert_to_ = nearest_format(f);
      m = find_map(convert_to_);
      spec_.format = m->ours;
      info_->bits = m->bits;
      log::info("%s: %s frames are converted to %s", info_->url.c_str(), av_get_pix_fmt_name(f),
                pix_fmt_name(spec_.format));
    }
    info_->ours = spec_.format;
  }

  // Sends the next video packet (or, at the end, the flush) to the decoder; false when the
  // input broke and the run ends here (--ignore-input-errors).
  bool feed() {
    while (true) {
      const int e = av_read_frame(in_.f, packet_.p);
      if (e == AVERROR_EOF) {
        send_packet(nullptr);
        return true;
      }
      if (e < 0) return input_error("cannot read: " + averr(e));
      const bool video = packet_.p->stream_index == st_->index;
      if (!video) info_->offer(packet_.p);
      int s = video ? send_packet(packet_.p) : 0;
      if (video && s == 0) ++packets_;
      av_packet_unref(packet_.p);
      if (s < 0 && s != AVERROR_INVALIDDATA) return input_error("cannot decode: " + averr(s));
      if (s == AVERROR_INVALIDDATA) {
        ++damaged_;
        log::debug("%s: a damaged packet after frame %lld was skipped", info_->url.c_str(),
                   static_cast<long long>(next_));
      }
      if (video) return true;
    }
  }

  void deliver(HostFrame& dst, int64_t pts) {
    const AVFrame* f = frame_.f;
    if (f->width != spec_.width || f->height != spec_.height)
      throw Error(ErrorKind::Input, "'" + info_->url + "': the frame size changed at frame " + std::to_string(next_) +
                                        " (" + std::to_string(f->width) + "x" + std::to_string(f->height) +
                                        "); vfpipe streams keep one size");
    dst.on_device = false;
    if (next_ == 0) {
      keep_hdr_metadata(f);
      info_->decoder = f->format != AV_PIX_FMT_CUDA ? "cpu" : "nvdec (libavcodec)";
#if VFPIPE_HAVE_NVDEC_DIRECT
      if (direct_) info_->decoder = direct_->reused_decoder() ? "nvdec (reused)" : "nvdec";
#endif
    }
    if (f->format == AV_PIX_FMT_CUDA && !(dst.device && frames_on_gpu_ && to_device(dst))) {
      // NVDEC's picture in GPU memory (NV12, P010, YUV444), wanted on the host.
      av_frame_unref(hw_host_.f);
      if (int e = av_hwframe_transfer_data(hw_host_.f, frame_.f, 0); e < 0)
        throw Error(ErrorKind::Input, "'" + info_->url + "': cannot copy an NVDEC frame to the host: " + averr(e));
      av_frame_copy_props(hw_host_.f, frame_.f);
      av_frame_unref(frame_.f);
      av_frame_move_ref(frame_.f, hw_host_.f);
    }
    if (!dst.on_device) to_host(dst);
    av_frame_unref(frame_.f);
    if (pts != AV_NOPTS_VALUE)
      last_end_ = seconds(pts, info_->time_base) + 1 / (spec_.fps.value() > 0 ? spec_.fps.value() : 25);
    info_->record(next_++, pts);
  }

  // The first frame's HDR metadata where the container had none: HEVC and AV1 carry it
  // in the stream, where only the decoder sees it.
  void keep_hdr_metadata(const AVFrame* f) {
    const AVFrameSideData* m = av_frame_get_side_data(f, AV_FRAME_DATA_MASTERING_DISPLAY_METADATA);
    const AVFrameSideData* l = av_frame_get_side_data(f, AV_FRAME_DATA_CONTENT_LIGHT_LEVEL);
    info_->keep_hdr(m ? m->data : nullptr, m ? m->size : 0, l ? l->data : nullptr, l ? l->size : 0);
  }

  // NVDEC's picture into the engine's device memory for the frame, in the stream's format,
  // done before it returns (the decoder reuses its surface once the frame is released);
  // false for a format only the host path converts.
  bool to_device(HostFrame& dst) {
#if VFPIPE_HAVE_CUDA
    const AVFrame* f = frame_.f;
    const auto sw = reinterpret_cast<const AVHWFramesContext*>(f->hw_frames_ctx->data)->sw_format;
    const ImageView view = ImageView::over(dst.device, spec_);
    SemiPlanar sp;
    const bool semi_planar = semi_planar_of(f, sw, info_->bits, spec_.format, &sp);
    if (!semi_planar && !(sw == AV_PIX_FMT_YUV444P && spec_.format == PixelFormat::YUV444P)) return false;
    if (!gpu_copy_) gpu_copy_ = std::make_unique<GpuCopy>();
    // The decoder's mapping of the picture runs on its device's stream: the copy waits for it.
    gpu_copy_->mapped.record(reinterpret_cast<cuda::StreamHandle>(map_stream_));
    cuda::stream_wait(gpu_copy_->stream.get(), gpu_copy_->mapped);
    if (semi_planar) {
      cuda::split_semi_planar_async(sp, view, gpu_copy_->stream.get());
    } else {  // 8-bit 4:4:4: planar already
      ImageView src = view;
      for (int p = 0; p < 3; ++p) {
        src.data[p] = f->data[p];
        src.pitch[p] = f->linesize[p];
      }
      cuda::copy_image_async(src, view, gpu_copy_->stream.get());
    }
    gpu_copy_->stream.synchronize();
    dst.on_device = true;
    return true;
#else
    (void)dst;
    return false;
#endif
  }

  void to_host(HostFrame& dst) {
    const AVFrame* f = frame_.f;
    SemiPlanar sp;
    if (convert_to_ == AV_PIX_FMT_NONE &&
        semi_planar_of(f, static_cast<AVPixelFormat>(f->format), info_->bits, spec_.format, &sp)) {
      split_semi_planar_cpu(sp, dst.view());  // NVDEC's NV12 / P010 / P016: no swscale
    } else if (convert_to_ != AV_PIX_FMT_NONE || static_cast<AVPixelFormat>(f->format) != info_->native) {
      if (convert_to_ == AV_PIX_FMT_NONE) convert_to_ = find_map(info_->native)->av;
      sws_ = sws_getCachedContext(sws_, f->width, f->height, static_cast<AVPixelFormat>(f->format), f->width, f->height,
                                  convert_to_, SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr, nullptr,
                                  nullptr);
      if (!sws_) throw Error(ErrorKind::Input, "cannot convert the input's pixel format");
      av_frame_unref(converted_.f);
      converted_.f->format = convert_to_;
      converted_.f->width = f->width;
      converted_.f->height = f->height;
      if (av_frame_get_buffer(converted_.f, 0) < 0) throw Error(ErrorKind::OutOfMemory, "a converted frame");
      sws_scale(sws_, f->data, f->linesize, 0, f->height, converted_.f->data, converted_.f->linesize);
      frame_to_view(converted_.f, find_map(convert_to_)->bits, dst.view());
    } else {
      frame_to_view(f, info_->bits, dst.view());
    }
  }

  int send_packet(const AVPacket* p) {
#if VFPIPE_HAVE_NVDEC_DIRECT
    if (direct_) return direct_->send(p);
#endif
    return avcodec_send_packet(dec_.c, p);
  }
  // The next decoded frame into frame_: 0, AVERROR(EAGAIN) or AVERROR_EOF, as libavcodec's.
  int receive_frame() {
#if VFPIPE_HAVE_NVDEC_DIRECT
    if (direct_) {
      nvdec::Picture pic;
      const int r = direct_->receive(&pic);
      if (r < 0) return r;
      AVFrame* f = frame_.f;
      av_frame_unref(f);
      // The picture as libavcodec's NVDEC frames look: CUDA memory, NV12, its frames context
      // (for copies to the host); the buffer's release unmaps it.
      auto* held = new std::shared_ptr<void>(std::move(pic.mapping));
      f->buf[0] = av_buffer_create(
          nullptr, 0, [](void* opaque, uint8_t*) { delete static_cast<std::shared_ptr<void>*>(opaque); }, held, 0);
      if (!f->buf[0]) {
        delete held;
        return AVERROR(ENOMEM);
      }
      f->hw_frames_ctx = av_buffer_ref(direct_frames_);
      f->format = AV_PIX_FMT_CUDA;
      f->width = pic.width;
      f->height = pic.height;
      f->data[0] = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(pic.luma));
      f->data[1] = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(pic.chroma));
      f->linesize[0] = f->linesize[1] = static_cast<int>(pic.pitch);
      f->pts = f->best_effort_timestamp = pic.has_pts ? pic.pts : AV_NOPTS_VALUE;
      return 0;
    }
#endif
    return avcodec_receive_frame(dec_.c, frame_.f);
  }

  // NVDEC through its own API (io/nvdec.hpp) for what it takes: the CUDA backend's frames
  // on the runtime's context, H.264 or HEVC in 8-bit 4:2:0. Its decoders can outlive the
  // file (vfpipe batch). False: libavcodec decodes (setup_nvdec).
  bool setup_direct_nvdec(const LibavInputOptions& opt, const std::string& url) {
#if VFPIPE_HAVE_NVDEC_DIRECT && VFPIPE_HAVE_CUDA
    if (opt.hwaccel == "none" || opt.hwaccel.empty() || !opt.runtime_context || !opt.gpu_frames) return false;
    std::string why;
    if (!nvdec::supports(st_->codecpar, &why)) {
      log::debug("%s: NVDEC through libavcodec (%s)", url.c_str(), why.c_str());
      return false;
    }
    AVBufferRef* dev = nvdec_device(cuda::current_device(), true, &why);
    if (!dev) return false;
    const auto* hw = static_cast<const AVCUDADeviceContext*>(reinterpret_cast<AVHWDeviceContext*>(dev->data)->hwctx);
    try {
      direct_ = std::make_unique<nvdec::StreamDecoder>(st_->codecpar, hw->cuda_ctx, hw->stream);
    } catch (const Error& e) {
      log::debug("%s: NVDEC through libavcodec (%s)", url.c_str(), e.what());
      return false;
    }
    direct_frames_ = av_hwframe_ctx_alloc(dev);
    if (!direct_frames_) throw Error(ErrorKind::OutOfMemory, "an NVDEC frames context");
    auto* fc = reinterpret_cast<AVHWFramesContext*>(direct_frames_->data);
    fc->format = AV_PIX_FMT_CUDA;
    fc->sw_format = AV_PIX_FMT_NV12;
    fc->width = st_->codecpar->width;
    fc->height = st_->codecpar->height;
    if (int e = av_hwframe_ctx_init(direct_frames_); e < 0)
      throw Error(ErrorKind::Input, "'" + url + "': an NVDEC frames context: " + averr(e));
    map_stream_ = hw->stream;
    frames_on_gpu_ = true;
    dec_.c->thread_count = 1;  // libavcodec's decoder only describes the stream: no threads
    return true;
#else
    (void)opt;
    (void)url;
    return false;
#endif
  }

  // NVDEC (hwaccel "auto" or "cuda") when the codec has a CUDA configuration and a CUDA
  // device opens; true when the decoder was set up for it. A profile NVDEC lacks still falls
  // back to the CPU decoder at the first frame (pick_cuda_format is not offered CUDA).
  bool setup_nvdec(const AVCodec* dec, const LibavInputOptions& opt, const std::string& url) {
    const std::string& mode = opt.hwaccel;
    if (mode == "none" || mode.empty()) return false;
    bool has_config = false;
    for (int i = 0;; ++i) {
      const AVCodecHWConfig* hc = avcodec_get_hw_config(dec, i);
      if (!hc) break;
      if (hc->device_type == AV_HWDEVICE_TYPE_CUDA && (hc->methods & AV_CODEC_HW_CONFIG_METHOD_HW_DEVICE_CTX))
        has_config = true;
    }
    std::string why;
    AVBufferRef* dev = nullptr;
    if (!has_config) {
      why = std::string("this libavcodec has no NVDEC path for ") + dec->name;
    } else {
      int gpu = 0;
#if VFPIPE_HAVE_CUDA
      gpu = cuda::current_device();  // a batch pipeline's GPU
#endif
      if (opt.runtime_context) {
        std::string shared_why;
        dev = nvdec_device(gpu, true, &shared_why);
        frames_on_gpu_ = dev != nullptr && opt.gpu_frames;
      }
      if (!dev) dev = nvdec_device(gpu, false, &why);
    }
    if (!dev) {
      if (mode == "cuda") throw Error(ErrorKind::Input, "'" + url + "': -hwaccel cuda: " + why);
      static std::once_flag once;  // one line per process, not per file of a batch
      std::call_once(once, [&] { log::info("NVDEC not used (%s); decoding on the CPU", why.c_str()); });
      return false;
    }
    dec_.c->hw_device_ctx = av_buffer_ref(dev);
    dec_.c->get_format = pick_cuda_format;
#if VFPIPE_HAVE_CUDA  // the copies into the engine's device frames wait for the mapping
    map_stream_ = static_cast<AVCUDADeviceContext*>(reinterpret_cast<AVHWDeviceContext*>(dev->data)->hwctx)->stream;
#endif
    // NVDEC does the decoding: frame threads would only add contexts and frames in flight
    // for the CPU's share (parsing), and contend across a batch's pipelines.
    dec_.c->thread_count = 1;
    return true;
  }

  FormatInput in_;
  AVStream* st_ = nullptr;
  CodecContext dec_;
#if VFPIPE_HAVE_NVDEC_DIRECT
  std::unique_ptr<nvdec::StreamDecoder> direct_;  // NVDEC's own API, instead of dec_'s decoding
#endif
  AVBufferRef* direct_frames_ = nullptr;         // the frames context its pictures name
  [[maybe_unused]] void* map_stream_ = nullptr;  // where NVDEC maps pictures: copies wait for it (a CUstream)
  Frame frame_, converted_, hw_host_;
  Packet packet_;
#if VFPIPE_HAVE_CUDA
  struct GpuCopy {  // NVDEC pictures into the engine's device frames
    cuda::Stream stream;
    cuda::Event mapped;
  };
  std::unique_ptr<GpuCopy> gpu_copy_;
#endif
  bool frames_on_gpu_ = false;  // NVDEC on the runtime's context: frames can stay in GPU memory
  SwsContext* sws_ = nullptr;
  AVPixelFormat convert_to_ = AV_PIX_FMT_NONE;
  std::shared_ptr<LibavInput> info_;
  FrameSpec spec_;
  int64_t frames_ = -1, next_ = 0, expected_ = 0, damaged_ = 0;
  double stream_end_ = -1, last_end_ = -1;  // seconds: the container's end of the video, the last frame's end
  int64_t packets_ = 0, decoded_ = 0;       // video packets the decoder took, frames it gave
  bool ignore_errors_ = false, copied_read_ = false;
  std::string describe_;
};

// The option that leaves the input's streams of `type` out, for the warnings.
const char* drop_hint(AVMediaType type) {
  return type == AVMEDIA_TYPE_AUDIO      ? "-an to drop audio"
         : type == AVMEDIA_TYPE_SUBTITLE ? "-sn to drop subtitles"
         : type == AVMEDIA_TYPE_DATA     ? "-dn to drop data streams"
                                         : "-map to choose streams";
}

// Whether the run keeps the input's streams of `type` (-an, -sn, -dn leave them out).
bool kept(const VideoOptions& opt, AVMediaType type) {
  return type == AVMEDIA_TYPE_AUDIO      ? opt.audio
         : type == AVMEDIA_TYPE_SUBTITLE ? opt.subtitles
         : type == AVMEDIA_TYPE_DATA     ? opt.data
                                         : true;
}

// The input's other streams (audio, subtitles, data, attachments; -map's choice), copied
// packet by packet from the source's demuxer, in step with the video; audio re-encoded
// where -c:a asks for it or the container cannot hold it as it is.
class StreamCopier {
 public:
  // Chooses the streams the output can hold and claims them from the input: at the output's
  // creation, before the source reads a packet. `audio_codec`: "" (copy where the container
  // holds it, else re-encode to its own audio codec), "copy", or an encoder's name.
  StreamCopier(std::shared_ptr<LibavInput> in, const AVOutputFormat* of, const VideoOptions& opt) : in_(std::move(in)) {
    const bool copy_only = opt.audio_codec == "copy";
    // -ar and -ac change the samples: the audio is re-encoded, by default in its own codec.
    const bool reshape = opt.audio_rate > 0 || opt.audio_channels > 0;
    if (opt.audio && copy_only && reshape)
      throw Error(ErrorKind::Usage, "-ar / -ac: copied audio (-c:a copy) keeps its rate and channels");
    const AVCodec* asked = nullptr;  // -c:a's encoder, for every audio stream
    if (opt.audio && !copy_only && !opt.audio_codec.empty()) asked = find_audio_encoder(opt.audio_codec, of);
    const std::string& scodec = opt.subtitle_codec;  // -c:s
    const AVCodec* sub_asked = nullptr;
    if (opt.subtitles && !scodec.empty() && scodec != "copy") sub_asked = find_subtitle_encoder(scodec, of);
    const AudioTarget target{opt.audio_bitrate, opt.audio_rate, opt.audio_channels};
    for (const LibavInput::Stream& s : in_->others) {
      const char* type = av_get_media_type_string(s.type);
      type = type ? type : "unknown";
      const char* name = avcodec_get_name(s.par->codec_id);
      const bool audio = s.type == AVMEDIA_TYPE_AUDIO;
      if (!kept(opt, s.type)) continue;
      if (s.type == AVMEDIA_TYPE_VIDEO && !in_->mapped) {
        log::warn(
            "video stream #%d (%s) left out: vfpipe filters one video stream (-map 0 copies a cover picture, "
            "-map 0:v:N filters another stream)",
            s.index, name);
        continue;
      }
      const bool fits = avformat_query_codec(of, s.par->codec_id, FF_COMPLIANCE_NORMAL) == 1;
      const AVCodec* enc = audio ? asked : nullptr;
      if (audio && fits && !enc && reshape) {
        enc = avcodec_find_encoder(s.par->codec_id);
        if (enc && avformat_query_codec(of, enc->id, FF_COMPLIANCE_NORMAL) != 1) enc = nullptr;
      }
      if (audio && (!fits || reshape) && !enc && !copy_only) {
        // As ffmpeg: audio the container cannot hold becomes its own audio codec.
        try {
          enc = find_audio_encoder("", of);
        } catch (const Error& e) {
          log::warn("audio stream #%d (%s): %s", s.index, name, e.what());
        }
        if (enc && !fits)
          log::info(
              "audio stream #%d (%s) cannot go into the %s output as it is: re-encoded as %s (-c:a copy leaves it "
              "out)",
              s.index, name, of->name, avcodec_get_name(enc->id));
      }
      if (enc && !avcodec_find_decoder(s.par->codec_id)) {
        const std::string what = log::format("audio stream #%d (%s): this libavcodec cannot decode it", s.index, name);
        if (asked) throw Error(ErrorKind::Usage, "-c:a " + opt.audio_codec + ": " + what + " (use -c:a copy)");
        log::warn("%s: left out (use .mkv, or -an to drop audio)", what.c_str());
        continue;
      }
      if (sub_asked && s.type == AVMEDIA_TYPE_SUBTITLE && sub_asked->id != s.par->codec_id) {
        // -c:s names the format: text subtitles converted into it, bitmaps refused (a
        // bitmap has no text to convert).
        if (!text_subtitles(s.par->codec_id) || !text_subtitles(sub_asked->id) ||
            !avcodec_find_decoder(s.par->codec_id))
          throw Error(ErrorKind::Usage,
                      log::format("-c:s %s: subtitle stream #%d (%s) cannot be converted to it: only text subtitles "
                                  "convert into text ones (-c:s copy into .mkv keeps it, -sn drops it)",
                                  scodec.c_str(), s.index, name));
        chosen_.push_back(s.index);
        transcoders_[s.index] = std::make_unique<SubtitleConverter>(s.par, s.time_base, sub_asked);
        continue;
      }
      if (!fits && s.type == AVMEDIA_TYPE_SUBTITLE && scodec.empty()) {
        // As ffmpeg: text subtitles become the container's own text format (SubRip in MP4:
        // mov_text); bitmap subtitles cannot be converted.
        if (const AVCodec* sub = find_subtitle_converter(s.par->codec_id, of)) {
          log::info("subtitle stream #%d (%s) cannot go into the %s output as it is: converted to %s", s.index, name,
                    of->name, sub->name);
          chosen_.push_back(s.index);
          transcoders_[s.index] = std::make_unique<SubtitleConverter>(s.par, s.time_base, sub);
          continue;
        }
      }
      if (!fits && !enc) {
        const std::string what =
            log::format("%s stream #%d (%s) cannot go into the %s output", type, s.index, name, of->name);
        if (in_->mapped) throw Error(ErrorKind::Usage, "-map: " + what + " (use .mkv, or map it out)");
        if (s.type == AVMEDIA_TYPE_SUBTITLE && scodec == "copy")
          log::warn("%s as it is: left out (-c:s copy; without it text subtitles are converted)", what.c_str());
        else
          log::warn("%s: left out (use .mkv, or %s)", what.c_str(), drop_hint(s.type));
        continue;
      }
      chosen_.push_back(s.index);
      if (enc)
        transcoders_[s.index] = std::make_unique<AudioTranscoder>(s.par, s.time_base, enc, target);
      else
        copied_[s.index] = std::string(type) + " " + name + " copied";
    }
    in_->claim(chosen_);
  }
  // "audio aac copied", "audio aac re-encoded as opus (48000 Hz stereo, 128 kb/s)",
  // "subtitle subrip converted to mov_text", in order.
  std::vector<std::string> carried() const {
    std::vector<std::string> c;
    for (int i : chosen_) {
      const auto t = transcoders_.find(i);
      c.push_back(t != transcoders_.end() ? t->second->describe() : copied_.at(i));
    }
    return c;
  }

  // The output's streams for the chosen ones, after the video stream, in the chosen order.
  void add_streams(AVFormatContext* out) {
    for (int i : chosen_) {
      const LibavInput::Stream* s = in_->stream(i);
      AVStream* o = avformat_new_stream(out, nullptr);
      if (!o) throw Error(ErrorKind::OutOfMemory, "an output stream");
      if (const auto t = transcoders_.find(i); t != transcoders_.end()) {
        t->second->open(out, o);
      } else {
        if (avcodec_parameters_copy(o->codecpar, s->par) < 0) throw Error(ErrorKind::OutOfMemory, "an output stream");
        o->codecpar->codec_tag = 0;
        o->time_base = s->time_base;
      }
      o->disposition = s->disposition;
      av_dict_copy(&o->metadata, s->metadata, 0);
      map_[i] = o->index;
    }
  }

  // Whether the output gets a subtitle stream (copied or converted).
  bool has_subtitles() const {
    return std::any_of(chosen_.begin(), chosen_.end(),
                       [&](int i) { return in_->stream(i)->type == AVMEDIA_TYPE_SUBTITLE; });
  }

  // The re-encoded streams' last samples, once every packet is in (before the trailer).
  void finish() {
    for (auto& [index, t] : transcoders_) t->finish();
  }

  // Writes the copied streams' packets up to `until` seconds of the input.
  void pump(AVFormatContext* out, double until) {
    if (chosen_.empty()) return;
    while (AVPacket* next = in_->next_packet(until)) {
      Packet owned;
      av_packet_free(&owned.p);
      owned.p = next;
      AVPacket* p = owned.p;
      const auto idx = map_.find(p->stream_index);
      if (idx == map_.end()) continue;
      const AVRational tb = in_->stream(p->stream_index)->time_base;
      const double t = seconds(p->pts != AV_NOPTS_VALUE ? p->pts : p->dts, tb);
      // Packets before the start are cut only after a seek (-ss): without one, the audio's
      // priming packets (negative timestamps) stay, as ffmpeg keeps them.
      if ((in_->seeked && t < in_->origin - 1e-9) || t >= in_->end) continue;
      const int64_t shift = av_rescale_q(static_cast<int64_t>(std::llround(in_->origin * 1e6)), {1, 1000000}, tb);
      if (p->pts != AV_NOPTS_VALUE) p->pts -= shift;
      if (p->dts != AV_NOPTS_VALUE) p->dts -= shift;
      if (const auto t = transcoders_.find(p->stream_index); t != transcoders_.end()) {
        t->second->send(p);
        continue;
      }
      av_packet_rescale_ts(p, tb, out->streams[idx->second]->time_base);
      p->stream_index = idx->second;
      p->pos = -1;
      if (int e = av_interleaved_write_frame(out, p); e < 0)
        throw Error(ErrorKind::Output, std::string("cannot write a copied packet: ") + averr(e));
    }
  }

 private:
  std::shared_ptr<LibavInput> in_;
  std::vector<int> chosen_;                                       // input stream indices
  std::map<int, int> map_;                                        // input stream -> output stream
  std::map<int, std::string> copied_;                             // input stream -> "audio aac copied"
  std::map<int, std::unique_ptr<StreamTranscoder>> transcoders_;  // input stream -> its encoder
};

const AVCodec* default_encoder(const AVOutputFormat* of, bool lossless) {
  const std::string name = of->name;
  auto first = [](std::initializer_list<const char*> names) -> const AVCodec* {
    for (const char* n : names)
      if (const AVCodec* c = avcodec_find_encoder_by_name(n)) return c;
    return nullptr;
  };
  if (lossless) return first({"ffv1"});
  if (name.find("webm") != std::string::npos) return first({"libvpx-vp9", "libsvtav1", "libaom-av1"});
  if (name == "image2" || name == "image2pipe") return nullptr;
  if (const AVCodec* c = first({"libx264"}))
    if (avformat_query_codec(of, c->id, FF_COMPLIANCE_NORMAL) == 1) return c;
  return avcodec_find_encoder(of->video_codec);
}

// A colour tag by libavutil's name (as ffmpeg's -color_primaries bt2020 gives it), or -1 (and
// `names` the valid ones). `name_of` is av_color_primaries_name and the like.
template <typename Name>
int colour_tag(const std::string& text, Name name_of, int count, std::string* names) {
  for (int i = 0; i < count; ++i) {
    const char* n = name_of(i);
    if (!n || std::string(n) == "reserved" || std::string(n) == "reserved0") continue;
    if (text == n) return i;
    *names += (names->empty() ? "" : ", ") + std::string(n);
  }
  return -1;
}

// -color_primaries and the rest, checked: libavutil's names (and ffmpeg's range spellings).
struct ColourTags {
  int primaries = -1, trc = -1, space = -1, range = -1;  // -1: the input's
  explicit ColourTags(const VideoOptions& o) {
    const auto parse = [](const std::string& text, const char* option, auto name_of, int count) {
      if (text.empty()) return -1;
      std::string names;
      const int v = colour_tag(text, name_of, count, &names);
      if (v < 0) throw Error(ErrorKind::Usage, std::string(option) + " " + text + ": not a tag (" + names + ")");
      return v;
    };
    primaries = parse(
        o.color_primaries, "-color_primaries",
        [](int i) { return av_color_primaries_name(static_cast<AVColorPrimaries>(i)); }, AVCOL_PRI_NB);
    trc = parse(
        o.color_trc, "-color_trc",
        [](int i) { return av_color_transfer_name(static_cast<AVColorTransferCharacteristic>(i)); }, AVCOL_TRC_NB);
    space = parse(
        o.colorspace, "-colorspace", [](int i) { return av_color_space_name(static_cast<AVColorSpace>(i)); },
        AVCOL_SPC_NB);
    const std::string& r = o.color_range;
    range = r == "limited" || r == "mpeg" ? AVCOL_RANGE_MPEG
            : r == "full" || r == "jpeg"
                ? AVCOL_RANGE_JPEG
                : parse(
                      r, "-color_range", [](int i) { return av_color_range_name(static_cast<AVColorRange>(i)); },
                      AVCOL_RANGE_NB);
  }
};

// The vfpipe format for an encoder's pixel format, and back: our format -> the encoder's.
AVPixelFormat encoder_format(const AVCodec* c, PixelFormat ours, int want_bits) {
  AVPixelFormat best = AV_PIX_FMT_NONE;
  int best_bits = 0;
  for (const AVPixelFormat* f = c->pix_fmts; f && *f != AV_PIX_FMT_NONE; ++f) {
    const FormatMap* m = find_map(*f);
    if (!m || m->ours != ours) continue;
    if (*f == AV_PIX_FMT_YUVJ420P || *f == AV_PIX_FMT_YUVJ444P) {
      if (best == AV_PIX_FMT_NONE) best = *f;  // JPEG-range variants only if nothing else
      continue;
    }
    // The input's depth if the encoder has it, else the deepest it has.
    const bool better = best == AV_PIX_FMT_NONE || best == AV_PIX_FMT_YUVJ420P || best == AV_PIX_FMT_YUVJ444P ||
                        (best_bits != want_bits && (m->bits == want_bits || m->bits > best_bits));
    if (better) {
      best = *f;
      best_bits = m->bits;
    }
  }
  return best;
}

class LibavSink final : public Sink {
 public:
  LibavSink(std::string path, LibavOutputOptions opt) : path_(std::move(path)), opt_(std::move(opt)) {
    const AVOutputFormat* of = av_guess_format(nullptr, path_.c_str(), nullptr);
    if (!of)
      throw Error(ErrorKind::Usage, "unknown output type '" + path_ +
                                        "' (no container for this extension: use .mp4, .mkv, .mov, .webm, .avi, .y4m, "
                                        "an image pattern such as frames/%06d.png, '-' for Y4M on stdout, or null)");
    if (opt_.codec == "copy")
      throw Error(ErrorKind::Usage,
                  "-c:v copy: vfpipe encodes the frames it filters; copying the input's video would skip the "
                  "filters (ffmpeg -c:v copy does that). Name an encoder (libx264, libx265, libsvtav1, ffv1) or "
                  "leave -c:v out");
    if (!opt_.codec.empty()) {
      enc_ = avcodec_find_encoder_by_name(opt_.codec.c_str());
      if (!enc_ || enc_->type != AVMEDIA_TYPE_VIDEO)
        throw Error(ErrorKind::Usage, "-c:v " + opt_.codec + ": no such video encoder in this libavcodec");
    } else {
      enc_ = default_encoder(of, opt_.lossless);
      if (!enc_) throw Error(ErrorKind::Usage, "output '" + path_ + "': no video encoder for a " + of->name + " file");
    }
    if (avformat_query_codec(of, enc_->id, FF_COMPLIANCE_NORMAL) == 0)
      throw Error(ErrorKind::Usage, std::string("a ") + of->name + " file cannot hold " + enc_->name + " video");
    const int bits = wanted_bits();
    // The input's own format first: then no conversion is inserted before the encoder.
    std::vector<PixelFormat> order;
    if (opt_.input) order.push_back(opt_.input->ours);
    for (PixelFormat f : {PixelFormat::YUV420P, PixelFormat::YUV444P, PixelFormat::GRAY8, PixelFormat::YUV420P16,
                          PixelFormat::YUV444P16, PixelFormat::GRAY16, PixelFormat::BGR24, PixelFormat::RGB24})
      if (std::find(order.begin(), order.end(), f) == order.end()) order.push_back(f);
    for (PixelFormat f : order)
      if (encoder_format(enc_, f, bits) != AV_PIX_FMT_NONE) accepted_.push_back(f);
    // Packed RGB that the encoder does not take is converted to its YUV (libswscale), with
    // the matrix the output is tagged with: only when the chain ends in RGB.
    if (encoder_format(enc_, PixelFormat::YUV420P, 8) != AV_PIX_FMT_NONE)
      for (PixelFormat f : {PixelFormat::BGR24, PixelFormat::RGB24})
        if (std::find(accepted_.begin(), accepted_.end(), f) == accepted_.end()) accepted_.push_back(f);
    if (accepted_.empty())
      throw Error(ErrorKind::Usage, std::string("the ") + enc_->name + " encoder takes none of vfpipe's pixel formats");
    if (opt_.input) copier_ = std::make_unique<StreamCopier>(opt_.input, of, opt_);
    if (opt_.rate.num > 0) slots_ = std::make_unique<RateSlots>(opt_.rate);
    (void)ColourTags(opt_);  // a bad name is a usage error before the output exists
  }
  ~LibavSink() override {
    sws_freeContext(sws_);
    if (oc_ && !closed_) {  // an abandoned output: release without a trailer
      if (!(oc_->oformat->flags & AVFMT_NOFILE)) avio_closep(&oc_->pb);
    }
    avformat_free_context(oc_);
  }

  std::vector<PixelFormat> accepted_formats() const override { return accepted_; }

  void open(const FrameSpec& spec) override {
    spec_ = spec;
    if (int e = avformat_alloc_output_context2(&oc_, nullptr, nullptr, path_.c_str()); e < 0)
      throw Error(ErrorKind::Output, "cannot create output '" + path_ + "': " + averr(e));
    open_encoder();
    vs_ = avformat_new_stream(oc_, nullptr);
    if (!vs_ || avcodec_parameters_from_context(vs_->codecpar, enc_ctx_.c) < 0)
      throw Error(ErrorKind::OutOfMemory, "the output's video stream");
    vs_->time_base = enc_ctx_.c->time_base;
    vs_->avg_frame_rate = enc_ctx_.c->framerate;
    vs_->sample_aspect_ratio = enc_ctx_.c->sample_aspect_ratio;
    if (opt_.input) carry_over();
    for (const auto& [key, value] : opt_.metadata)
      av_dict_set(&oc_->metadata, key.c_str(), value.empty() ? nullptr : value.c_str(), 0);
    if (!(oc_->oformat->flags & AVFMT_NOFILE))
      if (int e = avio_open(&oc_->pb, path_.c_str(), AVIO_FLAG_WRITE); e < 0)
        throw Error(ErrorKind::Output, "cannot open output '" + path_ + "': " + averr(e));
    // The muxer checks its streams now; the header itself waits for the first frame, when
    // the input's decoder has shown what only the stream carries (HDR metadata).
    AVDictionary* o = muxer_options();
    const int e = avformat_init_output(oc_, &o);
    av_dict_free(&o);
    if (e < 0) throw Error(ErrorKind::Output, "cannot write the header of '" + path_ + "': " + averr(e));
  }

  void write(const HostFrame& f) override {
    write_header();
    if (!slots_) {
      fill(f);
      frame_.f->pts = pts_of(f.index);
      send(frame_.f);
      return;
    }
    // -r (io/rate.hpp): frames repeated or left out by their times.
    const double t = frame_seconds(opt_.input.get(), f.index, spec_.fps);
    int64_t repeats = 0, slot = 0;
    if (!slots_->place(t, &repeats, &slot)) return;
    repeat(slot - repeats, repeats);
    fill(f);
    frame_.f->pts = slot;
    send(frame_.f);
  }

  // The frame in frame_.f again, in `count` slots from `from`.
  void repeat(int64_t from, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      frame_.f->pts = from + i;
      send(frame_.f);
    }
  }

  // The frame's pixels into frame_.f: one frame, refilled (a new buffer only while the
  // encoder still holds the last one).
  void fill(const HostFrame& f) {
    if (!frame_.f->buf[0]) {
      frame_.f->format = enc_ctx_.c->pix_fmt;
      frame_.f->width = spec_.width;
      frame_.f->height = spec_.height;
      if (spec_.fields != FieldOrder::Progressive) {
#if LIBAVUTIL_VERSION_INT >= AV_VERSION_INT(58, 7, 100)
        frame_.f->flags |= AV_FRAME_FLAG_INTERLACED;
        if (spec_.fields == FieldOrder::TopFirst) frame_.f->flags |= AV_FRAME_FLAG_TOP_FIELD_FIRST;
#else
        frame_.f->interlaced_frame = 1;
        frame_.f->top_field_first = spec_.fields == FieldOrder::TopFirst;
#endif
      }
      if (av_frame_get_buffer(frame_.f, 0) < 0) throw Error(ErrorKind::OutOfMemory, "an output frame");
    }
    if (av_frame_make_writable(frame_.f) < 0) throw Error(ErrorKind::OutOfMemory, "an output frame");
    if (sws_) {
      const ImageView v = f.view();
      const uint8_t* planes[1] = {v.data[0]};
      const int pitch[1] = {static_cast<int>(v.pitch[0])};
      sws_scale(sws_, planes, pitch, 0, spec_.height, frame_.f->data, frame_.f->linesize);
    } else {
      view_to_frame(f.view(), out_bits_, frame_.f);
    }
    frame_.f->color_range = enc_ctx_.c->color_range;
    frame_.f->colorspace = enc_ctx_.c->colorspace;
    frame_.f->color_primaries = enc_ctx_.c->color_primaries;
    frame_.f->color_trc = enc_ctx_.c->color_trc;
  }

  void close() override {
    if (closed_ || !oc_) return;
    closed_ = true;
    write_header();
    if (slots_) {  // the last frame lasts its input frame's duration
      const int64_t from = slots_->next_slot();
      repeat(from, slots_->finish(static_cast<double>(spec_.fps.den) / spec_.fps.num));
      log::info("%s: %s", path_.c_str(), slots_->summary().c_str());
    }
    send(nullptr);
    if (copier_) {
      copier_->pump(oc_, std::numeric_limits<double>::infinity());
      copier_->finish();
    }
    const int e = av_write_trailer(oc_);
    const int ce = (oc_->oformat->flags & AVFMT_NOFILE) ? 0 : avio_closep(&oc_->pb);
    if (e < 0 || ce < 0)
      throw Error(ErrorKind::Output,
                  "cannot finish '" + path_ + "': " + averr(e < 0 ? e : ce) + " (the file is incomplete)");
  }

  std::string describe() const override {
    std::string d = path_ + " (" + enc_->name;
    if (enc_ctx_.c) d += std::string(", ") + av_get_pix_fmt_name(enc_ctx_.c->pix_fmt);
    if (copier_)
      for (const std::string& c : copier_->carried()) d += ", " + c;
    if (opt_.rate.num > 0) d += log::format(", -r %d/%d", opt_.rate.num, opt_.rate.den);
    return d + ")";
  }

 private:
  void open_encoder() {
    enc_ctx_.c = avcodec_alloc_context3(enc_);
    AVCodecContext* c = enc_ctx_.c;
    c->width = spec_.width;
    c->height = spec_.height;
    const int bits = wanted_bits();
    c->pix_fmt = encoder_format(enc_, spec_.format, bits);
    if (c->pix_fmt == AV_PIX_FMT_NONE && is_packed_rgb(spec_.format)) {
      c->pix_fmt = encoder_format(enc_, PixelFormat::YUV420P, 8);
      rgb_from_ = spec_.format == PixelFormat::BGR24 ? AV_PIX_FMT_BGR24 : AV_PIX_FMT_RGB24;
    }
    if (c->pix_fmt == AV_PIX_FMT_NONE)
      throw Error(ErrorKind::Usage,
                  std::string("the ") + enc_->name + " encoder cannot take " + pix_fmt_name(spec_.format) + " frames");
    out_bits_ = find_map(c->pix_fmt)->bits;
    // A depth asked for (-pix_fmt), or the input's, that the encoder does not have: said.
    if (is_16bit(spec_.format) && bits > 8 && out_bits_ != bits && (opt_.bits > 0 || out_bits_ < bits))
      log::warn("%s: the %s encoder has no %d-bit %s format; writing %s", path_.c_str(), enc_->name, bits,
                pix_fmt_name(with_depth(spec_.format, 8)), av_get_pix_fmt_name(c->pix_fmt));
    c->framerate = {spec_.fps.num, spec_.fps.den};
    if (opt_.rate.num > 0) c->framerate = {opt_.rate.num, opt_.rate.den};
    // The pixels' aspect: the frames' own, or the one that gives -aspect's display ratio.
    if (opt_.aspect.num > 0)
      av_reduce(&c->sample_aspect_ratio.num, &c->sample_aspect_ratio.den,
                static_cast<int64_t>(opt_.aspect.num) * spec_.height,
                static_cast<int64_t>(opt_.aspect.den) * spec_.width, 1 << 16);
    else if (spec_.sar.known())
      c->sample_aspect_ratio = {spec_.sar.num, spec_.sar.den};
    // Interlaced frames keep their field order, as ffmpeg tags them (the encoder codes them
    // as fields only when asked: --encoder-opt flags=+ilme+ildct for libx264).
    if (spec_.fields != FieldOrder::Progressive)
      c->field_order = spec_.fields == FieldOrder::TopFirst ? AV_FIELD_TT : AV_FIELD_BB;
    // Timestamps: the input's time base and the frames' own timestamps (variable rate kept);
    // without an input file, one tick per frame.
    c->time_base = opt_.input ? opt_.input->time_base : AVRational{spec_.fps.den, spec_.fps.num};
    if (opt_.rate.num > 0) c->time_base = {opt_.rate.den, opt_.rate.num};  // -r: one tick per frame
    if (opt_.input) {
      c->color_range = opt_.input->range;
      c->colorspace = opt_.input->matrix;
      c->color_primaries = opt_.input->primaries;
      c->color_trc = opt_.input->transfer;
      c->chroma_sample_location = opt_.input->chroma_location;
    }
    // -color_primaries and the rest: the user's tags over the input's.
    const ColourTags tags(opt_);
    if (tags.primaries >= 0) c->color_primaries = static_cast<AVColorPrimaries>(tags.primaries);
    if (tags.trc >= 0) c->color_trc = static_cast<AVColorTransferCharacteristic>(tags.trc);
    if (tags.space >= 0) c->colorspace = static_cast<AVColorSpace>(tags.space);
    if (tags.range >= 0) c->color_range = static_cast<AVColorRange>(tags.range);
    // Frames whose colour vfpipe knows (a Y4M input's range, say) are tagged with it.
    if (c->colorspace == AVCOL_SPC_UNSPECIFIED && !is_packed_rgb(spec_.format))
      c->colorspace = spec_.color.matrix == ColorMatrix::BT709    ? AVCOL_SPC_BT709
                      : spec_.color.matrix == ColorMatrix::BT601  ? AVCOL_SPC_SMPTE170M
                      : spec_.color.matrix == ColorMatrix::BT2020 ? AVCOL_SPC_BT2020_NCL
                                                                  : AVCOL_SPC_UNSPECIFIED;
    if (c->color_range == AVCOL_RANGE_UNSPECIFIED && !is_packed_rgb(spec_.format))
      c->color_range = spec_.color.range == ColorRange::Limited ? AVCOL_RANGE_MPEG
                       : spec_.color.range == ColorRange::Full  ? AVCOL_RANGE_JPEG
                                                                : AVCOL_RANGE_UNSPECIFIED;
    if (rgb_from_ != AV_PIX_FMT_NONE) {
      // RGB to limited-range YUV with the input's matrix, else as vfpipe resolves an
      // untagged one (ColorDesc::resolved: BT.709 for HD, BT.601 for SD).
      if (c->colorspace == AVCOL_SPC_UNSPECIFIED || c->colorspace == AVCOL_SPC_RGB) {
        const ColorMatrix m = spec_.color.resolved(spec_.width, spec_.height).matrix;
        c->colorspace = m == ColorMatrix::BT709    ? AVCOL_SPC_BT709
                        : m == ColorMatrix::BT2020 ? AVCOL_SPC_BT2020_NCL
                                                   : AVCOL_SPC_SMPTE170M;
      }
      c->color_range = AVCOL_RANGE_MPEG;
      sws_ = sws_getContext(spec_.width, spec_.height, rgb_from_, spec_.width, spec_.height, c->pix_fmt,
                            SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr, nullptr, nullptr);
      if (!sws_) throw Error(ErrorKind::Output, "cannot convert RGB frames for the encoder");
      const int cs = c->colorspace == AVCOL_SPC_BT709        ? SWS_CS_ITU709
                     : c->colorspace == AVCOL_SPC_BT2020_NCL ? SWS_CS_BT2020
                                                             : SWS_CS_ITU601;
      sws_setColorspaceDetails(sws_, sws_getCoefficients(cs), 1, sws_getCoefficients(cs), 0, 0, 1 << 16, 1 << 16);
    }
    if (opt_.gop >= 0) c->gop_size = opt_.gop;
    if (opt_.bitrate > 0) c->bit_rate = opt_.bitrate;
    c->thread_count = opt_.threads;  // 0: libavcodec picks
    if (oc_->oformat->flags & AVFMT_GLOBALHEADER) c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    AVDictionary* o = nullptr;
    auto has_option = [&](const char* name) { return c->priv_data && av_opt_find(c->priv_data, name, nullptr, 0, 0); };
    const bool has_crf = has_option("crf");
    if (opt_.crf >= 0) {
      if (!has_crf) throw Error(ErrorKind::Usage, std::string("-crf: the ") + enc_->name + " encoder has no crf");
      av_dict_set_int(&o, "crf", opt_.crf, 0);
    } else if (has_crf && opt_.bitrate <= 0 &&
               (std::string(enc_->name) == "libx264" || std::string(enc_->name) == "libx265")) {
      av_dict_set_int(&o, "crf", 18, 0);  // visually lossless for most video, as people choose for masters
    }
    if (!opt_.preset.empty()) av_dict_set(&o, "preset", opt_.preset.c_str(), 0);
    if (!opt_.codec_params.empty()) {
      const std::string name = enc_->name;
      const std::string key = (name.rfind("lib", 0) == 0 ? name.substr(3) : name) + "-params";  // x264-params
      if (!has_option(key.c_str()))
        throw Error(ErrorKind::Usage, "the " + name + " encoder takes no parameter string (-x264-params style)");
      av_dict_set(&o, key.c_str(), opt_.codec_params.c_str(), 0);
    }
    for (const auto& [key, value] : opt_.encoder_options) av_dict_set(&o, key.c_str(), value.c_str(), 0);
    const int e = avcodec_open2(c, enc_, &o);
    std::string unused;
    for (AVDictionaryEntry* t = nullptr; (t = av_dict_get(o, "", t, AV_DICT_IGNORE_SUFFIX));)
      unused += std::string(unused.empty() ? "" : ", ") + t->key;
    av_dict_free(&o);
    if (e < 0)
      throw Error(ErrorKind::Usage, std::string("cannot open the ") + enc_->name + " encoder: " + averr(e) +
                                        " (check -crf, -preset, -b:v, -tune, -profile:v and the codec parameters)");
    if (!unused.empty())
      throw Error(ErrorKind::Usage, std::string("the ") + enc_->name + " encoder has no option " + unused);
  }

  // A run that a full disk or a crash cuts short leaves a playable file: MP4 and MOV are
  // written fragmented (a fragment at least every second, each with its own index, flushed
  // to the file), Matroska closes a cluster every second; at most the last second is lost.
  // -movflags replaces the MP4 default (+faststart: a classic MP4, without that protection).
  AVDictionary* muxer_options() {
    AVDictionary* o = nullptr;
    const std::string name = oc_->oformat->name;
    fragmented_ = name == "mp4" || name == "mov" || name == "ipod" || name == "ismv" || name == "3gp" ||
                  name == "3g2" || name == "psp" || name == "f4v";
    if (!opt_.movflags.empty()) {
      if (!fragmented_)
        throw Error(ErrorKind::Usage, "-movflags applies to .mp4 and .mov outputs, not to '" + path_ + "'");
      av_dict_set(&o, "movflags", opt_.movflags.c_str(), 0);
      fragmented_ = opt_.movflags.find("frag_") != std::string::npos;
    } else if (fragmented_ && copier_ && copier_->has_subtitles()) {
      // libavformat writes a fragmented MP4's subtitle samples without their durations
      // (ffmpeg's own fragmented output shows every cue for no time), so a file with
      // subtitles is written classic.
      log::info(
          "%s: written as a classic MP4 (index at the end), as its subtitles lose their timing in a "
          "fragmented one; a run cut short leaves it unplayable",
          path_.c_str());
      fragmented_ = false;
    } else if (fragmented_) {
      av_dict_set(&o, "movflags", "+frag_keyframe+delay_moov+default_base_moof", 0);
      av_dict_set(&o, "frag_duration", "1000000", 0);
    } else if (name == "matroska" || name == "webm") {
      av_dict_set(&o, "cluster_time_limit", "1000", 0);
      fragmented_ = true;
    }
    return o;
  }

  // The depth asked of the encoder: -pix_fmt's (yuv420p10le), else the input's.
  int wanted_bits() const {
    return opt_.bits > 0 ? opt_.bits : opt_.input_bits > 0 ? opt_.input_bits : opt_.input ? opt_.input->bits : 8;
  }

  void write_header() {
    if (header_written_) return;
    header_written_ = true;
    if (opt_.input) carry_hdr_metadata();
    if (int e = avformat_write_header(oc_, nullptr); e < 0)
      throw Error(ErrorKind::Output, "cannot write the header of '" + path_ + "': " + averr(e));
  }

  // The input's HDR metadata, on the stream (the container's colour fields: Matroska's
  // MasteringMetadata, MP4's mdcv and clli) and on the frames (encoders that write it into
  // the codec's own stream take it from there).
  void carry_hdr_metadata() {
    const LibavInput::Hdr hdr = opt_.input->hdr();
    const struct {
      const std::vector<uint8_t>& bytes;
      AVPacketSideDataType stream;
      AVFrameSideDataType frame;
    } kinds[] = {
        {hdr.mastering_display, AV_PKT_DATA_MASTERING_DISPLAY_METADATA, AV_FRAME_DATA_MASTERING_DISPLAY_METADATA},
        {hdr.light_level, AV_PKT_DATA_CONTENT_LIGHT_LEVEL, AV_FRAME_DATA_CONTENT_LIGHT_LEVEL}};
    for (const auto& k : kinds) {
      if (k.bytes.empty()) continue;
      uint8_t* d = av_stream_new_side_data(vs_, k.stream, k.bytes.size());
      AVFrameSideData* fd = av_frame_new_side_data(frame_.f, k.frame, k.bytes.size());
      if (!d || !fd) throw Error(ErrorKind::OutOfMemory, "the output's HDR metadata");
      std::memcpy(d, k.bytes.data(), k.bytes.size());
      std::memcpy(fd->data, k.bytes.data(), k.bytes.size());
    }
  }

  // Metadata, the video stream's tags and rotation, and the other streams of the input.
  void carry_over() {
    const LibavInput& in = *opt_.input;
    av_dict_copy(&oc_->metadata, in.metadata, 0);
    av_dict_copy(&vs_->metadata, in.video_metadata, 0);
    vs_->disposition = in.video_disposition;
    if (!in.display_matrix.empty())
      if (uint8_t* d = av_stream_new_side_data(vs_, AV_PKT_DATA_DISPLAYMATRIX, in.display_matrix.size()))
        std::memcpy(d, in.display_matrix.data(), in.display_matrix.size());
    copier_->add_streams(oc_);
  }

  int64_t pts_of(int64_t index) {
    int64_t pts = 0;
    if (opt_.input && opt_.input->take(index, &pts) && pts != AV_NOPTS_VALUE) {
      const int64_t shift = av_rescale_q(static_cast<int64_t>(std::llround(opt_.input->origin * 1e6)), {1, 1000000},
                                         opt_.input->time_base);
      pts -= shift;
    } else {
      pts = index;  // one tick per frame
      if (opt_.input) pts = av_rescale_q(index, {spec_.fps.den, spec_.fps.num}, opt_.input->time_base);
    }
    if (pts <= last_pts_) pts = last_pts_ + 1;  // encoders need strictly increasing timestamps
    last_pts_ = pts;
    return pts;
  }

  void send(AVFrame* f) {
    if (int e = avcodec_send_frame(enc_ctx_.c, f); e < 0)
      throw Error(ErrorKind::Output, std::string("encoding failed: ") + averr(e));
    while (true) {
      const int r = avcodec_receive_packet(enc_ctx_.c, pkt_.p);
      if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
      if (r < 0) throw Error(ErrorKind::Output, std::string("encoding failed: ") + averr(r));
      av_packet_rescale_ts(pkt_.p, enc_ctx_.c->time_base, vs_->time_base);
      pkt_.p->stream_index = vs_->index;
      if (copier_) {  // the other streams up to this packet's time, so the muxer can interleave
        const double t = seconds(pkt_.p->dts, vs_->time_base) + opt_.input->origin;
        copier_->pump(oc_, t);
      }
      if (int e = av_interleaved_write_frame(oc_, pkt_.p); e < 0)
        throw Error(ErrorKind::Output, "cannot write to '" + path_ + "': " + averr(e) +
                                           (fragmented_ ? " (the frames written before the last second stay playable)"
                                                        : " (the file is incomplete)"));
    }
  }

  std::string path_;
  LibavOutputOptions opt_;
  const AVCodec* enc_ = nullptr;
  std::vector<PixelFormat> accepted_;
  FrameSpec spec_;
  AVFormatContext* oc_ = nullptr;
  AVStream* vs_ = nullptr;
  CodecContext enc_ctx_;
  Frame frame_;
  Packet pkt_;
  int out_bits_ = 8;
  AVPixelFormat rgb_from_ = AV_PIX_FMT_NONE;  // packed RGB frames converted for the encoder
  SwsContext* sws_ = nullptr;
  int64_t last_pts_ = std::numeric_limits<int64_t>::min();
  std::unique_ptr<RateSlots> slots_;  // -r
  std::unique_ptr<StreamCopier> copier_;
  bool fragmented_ = false;  // written so that a run cut short leaves a playable file
  bool closed_ = false;
  bool header_written_ = false;
};

// libav's own messages go through vfpipe's log (so -q silences them), errors as warnings:
// vfpipe reports the failure itself, with what it means for the run.
void log_callback(void* avcl, int level, const char* fmt, va_list vl) {
  if (level > AV_LOG_ERROR) return;
  char line[1024];
  int prefix = 1;
  av_log_format_line(avcl, level, fmt, vl, line, sizeof line, &prefix);
  std::string s = line;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  if (!s.empty()) log::warn("libav: %s", s.c_str());
}
void init_libav() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_callback(log_callback); });
}

}  // namespace

std::unique_ptr<Source> open_libav_source(const std::string& url, const LibavInputOptions& opt) {
  init_libav();
  return std::make_unique<LibavSource>(url, opt);
}

double frame_seconds(LibavInput* in, int64_t index, Rational fps) {
  int64_t pts = 0;
  if (in && in->take(index, &pts) && pts != AV_NOPTS_VALUE) return seconds(pts, in->time_base) - in->origin;
  return fps.num > 0 ? static_cast<double>(index) * fps.den / fps.num : 0;
}

void keep_nvdec_decoders(int max_idle) {
#if VFPIPE_HAVE_NVDEC_DIRECT
  nvdec::enable_reuse(max_idle);
#else
  (void)max_idle;
#endif
}

std::string libav_decoder_of(const Source& src) {
  const auto in = libav_input_of(src);
  return in ? in->decoder : std::string();
}

std::shared_ptr<LibavInput> libav_input_of(const Source& src) {
  const auto* s = dynamic_cast<const LibavSource*>(&src);
  return s ? s->input() : nullptr;
}

std::string libav_hdr_transfer(const LibavInput& in) { return hdr_transfer_name(in.transfer); }

void libav_check_colour_tags(const VideoOptions& o) { (void)ColourTags(o); }

std::string libav_hdr_summary(LibavInput& in) {
  const LibavInput::Hdr hdr = in.hdr();
  std::string r;
  if (!hdr.mastering_display.empty()) {
    AVMasteringDisplayMetadata m;
    std::memcpy(&m, hdr.mastering_display.data(), sizeof m);
    r = "mastering display";
    if (m.has_luminance) r += log::format(" %g-%g cd/m2", av_q2d(m.min_luminance), av_q2d(m.max_luminance));
    if (m.has_primaries)
      r += log::format(", white point %.4f,%.4f", av_q2d(m.white_point[0]), av_q2d(m.white_point[1]));
  }
  if (!hdr.light_level.empty()) {
    AVContentLightMetadata l;
    std::memcpy(&l, hdr.light_level.data(), sizeof l);
    r +=
        log::format("%scontent light max %u cd/m2, frame average %u cd/m2", r.empty() ? "" : "; ", l.MaxCLL, l.MaxFALL);
  }
  return r;
}

std::vector<OtherStream> libav_other_streams(const LibavInput& in, const VideoOptions& keep, bool* mapped) {
  std::vector<OtherStream> v;
  for (const LibavInput::Stream& s : in.others) {
    if (!kept(keep, s.type)) continue;
    const char* type = av_get_media_type_string(s.type);
    v.push_back({log::format("%s stream #%d (%s)", type ? type : "unknown", s.index, avcodec_get_name(s.par->codec_id)),
                 drop_hint(s.type)});
  }
  if (mapped) *mapped = in.mapped;
  return v;
}

std::unique_ptr<Sink> open_libav_sink(const std::string& path, const LibavOutputOptions& opt) {
  init_libav();
  return std::make_unique<LibavSink>(path, opt);
}

}  // namespace vfp
