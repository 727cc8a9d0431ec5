#include "io/nvdec.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavcodec/bsf.h>
}

#include "core/error.hpp"
#include "core/log.hpp"

// The loader's messages go to vfpipe's debug log (the caller says why NVDEC is not used).
#define FFNV_LOG_FUNC(logctx, msg, ...) ::vfp::log::debug(msg, __VA_ARGS__)
#define FFNV_DEBUG_LOG_FUNC(logctx, msg, ...)
#include <ffnvcodec/dynlink_loader.h>

namespace vfp::nvdec {

namespace {

// Decode surfaces of every decoder: the most an H.264 or HEVC stream needs (a DPB of 16 and
// the pictures in flight), so that one decoder serves every stream of a format.
constexpr unsigned kSurfaces = 20;

struct Api {
  CudaFunctions* cu = nullptr;
  CuvidFunctions* cv = nullptr;
  std::string why;
};
// Loaded once and kept: libcuda and libnvcuvid stay mapped for the process.
const Api& api() {
  static const Api a = [] {
    Api r;
    if (cuda_load_functions(&r.cu, nullptr) < 0)
      r.why = "cannot load libcuda.so.1";
    else if (cuvid_load_functions(&r.cv, nullptr) < 0)
      r.why = "cannot load libnvcuvid.so.1 (NVIDIA's video decoder library, part of the driver)";
    return r;
  }();
  return a;
}

std::string cu_error(CUresult r) {
  const char* name = nullptr;
  if (api().cu && api().cu->cuGetErrorName && api().cu->cuGetErrorName(r, &name) == CUDA_SUCCESS && name) return name;
  return "CUDA error " + std::to_string(static_cast<int>(r));
}

// The decoder's context current on this thread for the scope (the callers' threads may
// have another one current, or none).
class ContextScope {
 public:
  explicit ContextScope(CUcontext c) : ok_(api().cu->cuCtxPushCurrent(c) == CUDA_SUCCESS) {}
  ~ContextScope() {
    CUcontext unused = nullptr;
    if (ok_) api().cu->cuCtxPopCurrent(&unused);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  bool ok_;
};

// What a decoder was made for: a finished stream's decoder serves a new one only if all match.
// Decoders output the whole coded picture (as libavcodec's NVDEC hwaccel has them do); the
// display area is cut from it when the picture is read, so it is not part of the key.
struct Key {
  CUcontext ctx = nullptr;
  int codec = 0;
  unsigned coded_w = 0, coded_h = 0;
  unsigned surfaces = 0;
  bool operator<(const Key& o) const {
    return std::tie(ctx, codec, coded_w, coded_h, surfaces) <
           std::tie(o.ctx, o.codec, o.coded_w, o.coded_h, o.surfaces);
  }
};

struct Pool {
  std::mutex mu;
  std::map<Key, std::vector<CUvideodecoder>> idle;
  int max_idle = 0;
  int64_t created = 0, reused = 0;
};
// Never destroyed: decoders must not be freed after the CUDA runtime's exit handlers ran
// (enable_reuse(0) frees the idle ones while the contexts live).
Pool& pool() {
  static Pool* p = new Pool;
  return *p;
}

void destroy(const Key& k, CUvideodecoder d) {
  ContextScope scope(k.ctx);
  api().cv->cuvidDestroyDecoder(d);
}

// What NVDEC decodes on the current context's GPU for a codec at 8-bit 4:2:0, asked once.
CUVIDDECODECAPS decoder_caps(CUcontext ctx, cudaVideoCodec codec) {
  static std::mutex mu;
  static std::map<std::pair<CUcontext, int>, CUVIDDECODECAPS> known;
  std::lock_guard<std::mutex> lk(mu);
  const auto key = std::make_pair(ctx, static_cast<int>(codec));
  if (auto f = known.find(key); f != known.end()) return f->second;
  CUVIDDECODECAPS caps{};
  caps.eCodecType = codec;
  caps.eChromaFormat = cudaVideoChromaFormat_420;
  caps.nBitDepthMinus8 = 0;
  if (!api().cv->cuvidGetDecoderCaps || api().cv->cuvidGetDecoderCaps(&caps) != CUDA_SUCCESS) {
    caps.bIsSupported = 1;  // cannot ask: the decoder's creation will tell
    caps.nMaxWidth = caps.nMaxHeight = 1u << 30;
    caps.nMinWidth = caps.nMinHeight = 0;
  }
  known[key] = caps;
  return caps;
}

// An idle decoder for `k`, or a new one; throws vfp::Error (Input) when NVDEC refuses.
CUvideodecoder acquire(const Key& k, cudaVideoCodec codec, bool* reused) {
  {
    std::lock_guard<std::mutex> lk(pool().mu);
    auto f = pool().idle.find(k);
    if (f != pool().idle.end() && !f->second.empty()) {
      CUvideodecoder d = f->second.back();
      f->second.pop_back();
      ++pool().reused;
      *reused = true;
      return d;
    }
  }
  *reused = false;
  const Api& a = api();
  const CUVIDDECODECAPS caps = decoder_caps(k.ctx, codec);
  if (!caps.bIsSupported) throw Error(ErrorKind::Input, "this GPU's NVDEC does not decode the stream's codec");
  if (k.coded_w > caps.nMaxWidth || k.coded_h > caps.nMaxHeight || k.coded_w < caps.nMinWidth ||
      k.coded_h < caps.nMinHeight)
    throw Error(ErrorKind::Input, log::format("NVDEC decodes %ux%u to %ux%u on this GPU", caps.nMinWidth,
                                              caps.nMinHeight, caps.nMaxWidth, caps.nMaxHeight));
  CUVIDDECODECREATEINFO ci{};
  ci.ulWidth = k.coded_w;
  ci.ulHeight = k.coded_h;
  ci.ulNumDecodeSurfaces = k.surfaces;
  ci.CodecType = codec;
  ci.ChromaFormat = cudaVideoChromaFormat_420;
  ci.ulCreationFlags = cudaVideoCreate_PreferCUVID;
  ci.bitDepthMinus8 = 0;
  ci.ulMaxWidth = k.coded_w;
  ci.ulMaxHeight = k.coded_h;
  ci.OutputFormat = cudaVideoSurfaceFormat_NV12;
  // Interlaced pictures come out as frames with their fields woven, as libavcodec gives them.
  ci.DeinterlaceMode = cudaVideoDeinterlaceMode_Weave;
  ci.ulTargetWidth = k.coded_w;
  ci.ulTargetHeight = k.coded_h;
  ci.ulNumOutputSurfaces = 2;
  CUvideodecoder d = nullptr;
  if (const CUresult r = a.cv->cuvidCreateDecoder(&d, &ci); r != CUDA_SUCCESS)
    throw Error(ErrorKind::Input, "NVDEC cannot make a decoder (" + cu_error(r) + ")");
  std::lock_guard<std::mutex> lk(pool().mu);
  ++pool().created;
  return d;
}

void release(const Key& k, CUvideodecoder d) {
  {
    std::lock_guard<std::mutex> lk(pool().mu);
    std::vector<CUvideodecoder>& v = pool().idle[k];
    if (static_cast<int>(v.size()) < pool().max_idle) {
      v.push_back(d);
      return;
    }
  }
  destroy(k, d);
}

}  // namespace

struct StreamDecoder::State {
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  cudaVideoCodec codec = cudaVideoCodec_H264;
  CUvideoparser parser = nullptr;
  CUvideodecoder dec = nullptr;
  Key key;
  int left = 0, top = 0, width = 0, height = 0;  // the display area in the coded picture
  bool reused = false;
  AVBSFContext* bsf = nullptr;
  AVPacket* in = nullptr;    // a reference to the caller's packet, for the filter to take
  AVPacket* out = nullptr;   // the filter's Annex B packets
  CUVIDEOFORMATEX seqhdr{};  // the parameter sets from the extradata, in Annex B
  std::deque<CUVIDPARSERDISPINFO> ready;
  bool ended = false;
  int64_t without_pts = 0;  // packets that had no timestamp
  std::string error;        // what a parser callback could not do

  ~State() {
    if (parser) {
      ContextScope scope(ctx);
      api().cv->cuvidDestroyVideoParser(parser);
    }
    if (dec) release(key, dec);
    av_bsf_free(&bsf);
    av_packet_free(&in);
    av_packet_free(&out);
  }

  // The stream's format, at its start and whenever its sequence header changes. Returns the
  // decode surfaces to cycle through, or 0 to stop the parser (error holds why).
  static int CUDAAPI on_sequence(void* user, CUVIDEOFORMAT* f) {
    auto* s = static_cast<State*>(user);
    if (f->chroma_format != cudaVideoChromaFormat_420 || f->bit_depth_luma_minus8 != 0 ||
        f->bit_depth_chroma_minus8 != 0) {
      s->error = "the stream changed to a format other than 8-bit 4:2:0";
      return 0;
    }
    Key k;
    k.ctx = s->ctx;
    k.codec = static_cast<int>(f->codec);
    k.coded_w = f->coded_width;
    k.coded_h = f->coded_height;
    const auto& a = f->display_area;
    // 4:2:0 chroma: the area starts on even rows and columns (the codecs crop in pairs).
    if (a.left < 0 || a.top < 0 || (a.left | a.top) & 1 || a.right <= a.left || a.bottom <= a.top ||
        a.right > static_cast<int>(k.coded_w) || a.bottom > static_cast<int>(k.coded_h)) {
      s->error = "the stream's display area is not inside its coded picture";
      return 0;
    }
    s->left = a.left;
    s->top = a.top;
    s->width = a.right - a.left;
    s->height = a.bottom - a.top;
    k.surfaces = std::max<unsigned>(kSurfaces, f->min_num_decode_surfaces);
    if (s->dec && !(k < s->key) && !(s->key < k)) return static_cast<int>(k.surfaces);
    if (s->dec) {
      release(s->key, s->dec);
      s->dec = nullptr;
    }
    try {
      s->dec = acquire(k, f->codec, &s->reused);
    } catch (const Error& e) {
      s->error = e.what();
      return 0;
    }
    s->key = k;
    return static_cast<int>(k.surfaces);
  }
  static int CUDAAPI on_decode(void* user, CUVIDPICPARAMS* p) {
    auto* s = static_cast<State*>(user);
    if (!s->dec) return 0;
    if (const CUresult r = api().cv->cuvidDecodePicture(s->dec, p); r != CUDA_SUCCESS) {
      s->error = "NVDEC failed to decode a picture (" + cu_error(r) + ")";
      return 0;
    }
    return 1;
  }
  static int CUDAAPI on_display(void* user, CUVIDPARSERDISPINFO* d) {
    if (d) static_cast<State*>(user)->ready.push_back(*d);  // null: the end of the stream
    return 1;
  }

  void parse(const uint8_t* data, int size, int64_t pts, unsigned long flags) {
    CUVIDSOURCEDATAPACKET p{};
    p.payload = data;
    p.payload_size = static_cast<unsigned long>(size);
    p.flags = flags;
    if (pts != AV_NOPTS_VALUE) {
      p.flags |= CUVID_PKT_TIMESTAMP;
      p.timestamp = pts;
    } else if (!(flags & CUVID_PKT_ENDOFSTREAM)) {
      ++without_pts;
    }
    const CUresult r = api().cv->cuvidParseVideoData(parser, &p);
    if (!error.empty()) throw Error(ErrorKind::Input, "NVDEC: " + error);
    if (r != CUDA_SUCCESS) throw Error(ErrorKind::Input, "NVDEC's parser failed (" + cu_error(r) + ")");
  }
};

bool supports(const AVCodecParameters* par, std::string* why) {
  auto no = [why](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (const char* e = std::getenv("VFPIPE_NVDEC_DIRECT"); e && std::string(e) == "0")
    return no("VFPIPE_NVDEC_DIRECT=0");
  if (par->codec_id != AV_CODEC_ID_H264 && par->codec_id != AV_CODEC_ID_HEVC) return no("not H.264 or HEVC");
  if (par->format != AV_PIX_FMT_YUV420P && par->format != AV_PIX_FMT_YUVJ420P) return no("not 8-bit 4:2:0");
  if (par->width <= 0 || par->height <= 0) return no("the stream's size is not known");
  if (!api().why.empty()) return no(api().why);
  return true;
}

StreamDecoder::StreamDecoder(const AVCodecParameters* par, void* cuda_ctx, void* stream)
    : s_(std::make_shared<State>()) {
  std::string why;
  if (!supports(par, &why)) throw Error(ErrorKind::Input, "NVDEC's own path: " + why);
  State& s = *s_;
  s.ctx = static_cast<CUcontext>(cuda_ctx);
  s.stream = static_cast<CUstream>(stream);
  s.codec = par->codec_id == AV_CODEC_ID_H264 ? cudaVideoCodec_H264 : cudaVideoCodec_HEVC;
  // The parser reads Annex B (start codes, parameter sets in band); MP4 and Matroska store
  // length-prefixed NAL units with the parameter sets in the extradata.
  const AVBitStreamFilter* f =
      av_bsf_get_by_name(s.codec == cudaVideoCodec_H264 ? "h264_mp4toannexb" : "hevc_mp4toannexb");
  s.in = av_packet_alloc();
  s.out = av_packet_alloc();
  if (!f || !s.in || !s.out || av_bsf_alloc(f, &s.bsf) < 0 || avcodec_parameters_copy(s.bsf->par_in, par) < 0)
    throw Error(ErrorKind::Input, "NVDEC's own path: the Annex B bitstream filter is missing from this libavcodec");
  s.bsf->time_base_in = AVRational{1, 1};  // timestamps pass through unchanged
  if (int e = av_bsf_init(s.bsf); e < 0)
    throw Error(ErrorKind::Input, "NVDEC's own path: cannot start the Annex B filter for this stream");
  CUVIDPARSERPARAMS pp{};
  // The parameter sets before the first packet: the filter repeats them in band only before
  // IDR pictures, and a run that starts with -ss may start at another keyframe.
  const AVCodecParameters* annexb = s.bsf->par_out;
  if (annexb->extradata_size > 0 && static_cast<size_t>(annexb->extradata_size) <= sizeof(s.seqhdr.raw_seqhdr_data)) {
    std::memcpy(s.seqhdr.raw_seqhdr_data, annexb->extradata, static_cast<size_t>(annexb->extradata_size));
    s.seqhdr.format.seqhdr_data_length = static_cast<unsigned>(annexb->extradata_size);
    pp.pExtVideoInfo = &s.seqhdr;
  }
  pp.CodecType = s.codec;
  pp.ulMaxNumDecodeSurfaces = kSurfaces;
  pp.ulErrorThreshold = 100;  // damaged pictures are decoded as well as they can be, as libavcodec does
  pp.ulMaxDisplayDelay = 1;   // the next picture's decoding overlaps the mapping of this one
  pp.pUserData = &s;
  pp.pfnSequenceCallback = &State::on_sequence;
  pp.pfnDecodePicture = &State::on_decode;
  pp.pfnDisplayPicture = &State::on_display;
  ContextScope scope(s.ctx);
  // Sizes NVDEC does not take go to libavcodec (which decodes them on the CPU), before any
  // packet: a stream cannot change decoders once it has started.
  const CUVIDDECODECAPS caps = decoder_caps(s.ctx, s.codec);
  const auto w = static_cast<unsigned>(par->width), h = static_cast<unsigned>(par->height);
  if (!caps.bIsSupported || w < caps.nMinWidth || h < caps.nMinHeight || w > caps.nMaxWidth || h > caps.nMaxHeight)
    throw Error(ErrorKind::Input, log::format("NVDEC's own path: %ux%u is outside the %ux%u to %ux%u this GPU decodes",
                                              w, h, caps.nMinWidth, caps.nMinHeight, caps.nMaxWidth, caps.nMaxHeight));
  if (const CUresult r = api().cv->cuvidCreateVideoParser(&s.parser, &pp); r != CUDA_SUCCESS)
    throw Error(ErrorKind::Input, "NVDEC cannot make a video parser (" + cu_error(r) + ")");
}

StreamDecoder::~StreamDecoder() = default;

bool StreamDecoder::reused_decoder() const { return s_->reused; }

int StreamDecoder::send(const AVPacket* packet) {
  State& s = *s_;
  if (s.ended) return AVERROR_EOF;
  ContextScope scope(s.ctx);
  int e = 0;
  if (packet) {
    if ((e = av_packet_ref(s.in, packet)) < 0) return e;
    e = av_bsf_send_packet(s.bsf, s.in);
  } else {
    e = av_bsf_send_packet(s.bsf, nullptr);
  }
  if (e < 0) {
    av_packet_unref(s.in);
    return e;
  }
  while ((e = av_bsf_receive_packet(s.bsf, s.out)) >= 0) {
    try {
      s.parse(s.out->data, s.out->size, s.out->pts, 0);
    } catch (...) {
      av_packet_unref(s.out);
      throw;
    }
    av_packet_unref(s.out);
  }
  if (e != AVERROR(EAGAIN) && e != AVERROR_EOF) return e;
  if (!packet) {
    s.parse(nullptr, 0, AV_NOPTS_VALUE, CUVID_PKT_ENDOFSTREAM);
    s.ended = true;
  }
  return 0;
}

int StreamDecoder::receive(Picture* out) {
  State& s = *s_;
  if (s.ready.empty()) return s.ended ? AVERROR_EOF : AVERROR(EAGAIN);
  const CUVIDPARSERDISPINFO d = s.ready.front();
  s.ready.pop_front();
  ContextScope scope(s.ctx);
  CUVIDPROCPARAMS vp{};
  vp.progressive_frame = d.progressive_frame;
  vp.top_field_first = d.top_field_first;
  vp.second_field = 0;
  vp.unpaired_field = d.repeat_first_field < 0;
  vp.output_stream = s.stream;
  unsigned long long ptr = 0;
  unsigned pitch = 0;
  if (const CUresult r = api().cv->cuvidMapVideoFrame(s.dec, d.picture_index, &ptr, &pitch, &vp); r != CUDA_SUCCESS)
    throw Error(ErrorKind::Input, "NVDEC cannot map a decoded picture (" + cu_error(r) + ")");
  const uint64_t p = pitch;
  out->luma = ptr + p * static_cast<uint64_t>(s.top) + static_cast<uint64_t>(s.left);
  out->chroma = ptr + p * (s.key.coded_h + static_cast<uint64_t>(s.top / 2)) + static_cast<uint64_t>(s.left);
  out->pitch = pitch;
  out->width = s.width;
  out->height = s.height;
  out->pts = d.timestamp;
  out->has_pts = s.without_pts == 0;
  // The mapping holds the stream's state: its decoder goes back to the pool only when no
  // picture of it is mapped any more.
  out->mapping =
      std::shared_ptr<void>(reinterpret_cast<void*>(static_cast<uintptr_t>(ptr)), [st = s_, dec = s.dec](void* p) {
        ContextScope unmap_scope(st->ctx);
        api().cv->cuvidUnmapVideoFrame(dec, static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p)));
      });
  return 0;
}

void enable_reuse(int max_idle) {
  std::vector<std::pair<Key, CUvideodecoder>> drop;
  {
    std::lock_guard<std::mutex> lk(pool().mu);
    pool().max_idle = std::max(0, max_idle);
    for (auto& [k, v] : pool().idle)
      while (static_cast<int>(v.size()) > pool().max_idle) {
        drop.emplace_back(k, v.back());
        v.pop_back();
      }
  }
  if (!drop.empty() && api().cv)
    for (auto& [k, d] : drop) destroy(k, d);
}

Stats stats() {
  std::lock_guard<std::mutex> lk(pool().mu);
  return {pool().created, pool().reused};
}

}  // namespace vfp::nvdec
