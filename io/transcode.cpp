#include "io/transcode.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"

extern "C" {
#include <libavutil/channel_layout.h>
#include <libavutil/samplefmt.h>
}

namespace vfp {

namespace {

// A decoder for the input stream `par` (time base `tb`), opened; `what` names the stream's
// kind ("audio"), `drop` the option that leaves it out ("-an").
AVCodecContext* open_decoder(const AVCodecParameters* par, AVRational tb, const char* what, const char* drop) {
  const char* name = avcodec_get_name(par->codec_id);
  const AVCodec* dec = avcodec_find_decoder(par->codec_id);
  if (!dec) throw Error(ErrorKind::Input, log::format("no decoder for the input's %s %s (use %s)", name, what, drop));
  AVCodecContext* c = avcodec_alloc_context3(dec);
  if (!c || avcodec_parameters_to_context(c, par) < 0) {
    avcodec_free_context(&c);
    throw Error(ErrorKind::OutOfMemory, log::format("a %s decoder", what));
  }
  c->pkt_timebase = tb;
  if (int e = avcodec_open2(c, dec, nullptr); e < 0) {
    avcodec_free_context(&c);
    throw Error(ErrorKind::Input, log::format("cannot decode the input's %s %s: %s", name, what, averr(e).c_str()));
  }
  return c;
}

std::string layout_name(const AVChannelLayout& l) {
  char buf[64] = {0};
  if (av_channel_layout_describe(&l, buf, sizeof buf) < 0) return log::format("%d channels", l.nb_channels);
  return buf;
}

// A layout the resampler can map: one with only a channel count becomes that count's default.
void usable_layout(const AVChannelLayout& in, AVChannelLayout* out) {
  if (in.order == AV_CHANNEL_ORDER_UNSPEC || in.nb_channels == 0)
    av_channel_layout_default(out, in.nb_channels > 0 ? in.nb_channels : 2);
  else
    av_channel_layout_copy(out, &in);
}

// The rate the encoder takes nearest above the input's (Opus: 44.1 kHz -> 48 kHz).
int encoder_rate(const AVCodec* enc, int want) {
  if (!enc->supported_samplerates) return want;
  int above = 0, best_below = 0;
  for (const int* r = enc->supported_samplerates; *r; ++r) {
    if (*r == want) return want;
    if (*r > want && (above == 0 || *r < above)) above = *r;
    if (*r < want) best_below = std::max(best_below, *r);
  }
  return above ? above : best_below;
}

AVSampleFormat encoder_sample_format(const AVCodec* enc, AVSampleFormat want) {
  if (!enc->sample_fmts) return want;
  for (const AVSampleFormat* f = enc->sample_fmts; *f != AV_SAMPLE_FMT_NONE; ++f)
    if (*f == want) return want;
  return enc->sample_fmts[0];
}

// The input's layout if the encoder has it, else one of its layouts with as many channels,
// else its first.
void encoder_layout(const AVCodec* enc, const AVChannelLayout& want, AVChannelLayout* out) {
  if (!enc->ch_layouts) {
    av_channel_layout_copy(out, &want);
    return;
  }
  const AVChannelLayout* same_count = nullptr;
  for (const AVChannelLayout* l = enc->ch_layouts; l->nb_channels; ++l) {
    if (av_channel_layout_compare(l, &want) == 0) {
      av_channel_layout_copy(out, l);
      return;
    }
    if (!same_count && l->nb_channels == want.nb_channels) same_count = l;
  }
  av_channel_layout_copy(out, same_count ? same_count : &enc->ch_layouts[0]);
}

}  // namespace

const AVCodec* find_audio_encoder(const std::string& name, const AVOutputFormat* of) {
  const AVCodec* enc = nullptr;
  if (!name.empty()) {
    enc = avcodec_find_encoder_by_name(name.c_str());
    if (!enc || enc->type != AVMEDIA_TYPE_AUDIO)
      throw Error(ErrorKind::Usage, "-c:a " + name +
                                        ": no such audio encoder in this libavcodec (try aac, libopus, "
                                        "libvorbis, libmp3lame, flac, or copy)");
  } else {
    // The container's own choice (avcodec_find_encoder prefers a non-experimental encoder).
    enc = of->audio_codec != AV_CODEC_ID_NONE ? avcodec_find_encoder(of->audio_codec) : nullptr;
    if (!enc || avformat_query_codec(of, enc->id, FF_COMPLIANCE_NORMAL) != 1)
      for (const char* n : {"aac", "libopus", "libvorbis", "libmp3lame", "flac"}) {
        const AVCodec* c = avcodec_find_encoder_by_name(n);
        if (c && avformat_query_codec(of, c->id, FF_COMPLIANCE_NORMAL) == 1) {
          enc = c;
          break;
        }
      }
    if (!enc) throw Error(ErrorKind::Usage, std::string("no audio encoder for a ") + of->name + " file (use -an)");
  }
  if (avformat_query_codec(of, enc->id, FF_COMPLIANCE_NORMAL) == 0)
    throw Error(ErrorKind::Usage, std::string("-c:a ") + enc->name + ": a " + of->name + " file cannot hold " +
                                      avcodec_get_name(enc->id) + " audio");
  return enc;
}

StreamTranscoder::StreamTranscoder(const AVCodecParameters* in, AVRational in_tb, const AVCodec* enc)
    : par_(avcodec_parameters_alloc()), in_tb_(in_tb), enc_(enc), pkt_(av_packet_alloc()) {
  if (!par_ || !pkt_ || avcodec_parameters_copy(par_, in) < 0) {
    avcodec_parameters_free(&par_);
    av_packet_free(&pkt_);
    throw Error(ErrorKind::OutOfMemory, "a stream's converter");
  }
}

StreamTranscoder::~StreamTranscoder() {
  avcodec_free_context(&dec_);
  avcodec_free_context(&ctx_);
  av_packet_free(&pkt_);
  avcodec_parameters_free(&par_);
}

void StreamTranscoder::start(AVFormatContext* out, AVStream* st, const char* what, const char* drop) {
  out_ = out;
  st_ = st;
  dec_ = open_decoder(par_, in_tb_, what, drop);
  ctx_ = avcodec_alloc_context3(enc_);
  if (!ctx_) throw Error(ErrorKind::OutOfMemory, log::format("a %s encoder", what));
}

AudioTranscoder::AudioTranscoder(const AVCodecParameters* in, AVRational in_tb, const AVCodec* enc, AudioTarget target)
    : StreamTranscoder(in, in_tb, enc), target_(target) {
  frame_ = av_frame_alloc();
  converted_ = av_frame_alloc();
  chunk_ = av_frame_alloc();
  if (!frame_ || !converted_ || !chunk_) {
    av_frame_free(&frame_);
    av_frame_free(&converted_);
    av_frame_free(&chunk_);
    throw Error(ErrorKind::OutOfMemory, "an audio encoder");
  }
}

AudioTranscoder::~AudioTranscoder() {
  swr_free(&swr_);
  if (fifo_) av_audio_fifo_free(fifo_);
  av_frame_free(&frame_);
  av_frame_free(&converted_);
  av_frame_free(&chunk_);
  av_channel_layout_uninit(&swr_layout_);
}

void AudioTranscoder::open(AVFormatContext* out, AVStream* st) {
  start(out, st, "audio", "-an");
  AVChannelLayout want{};
  if (target_.channels > 0)
    av_channel_layout_default(&want, target_.channels);
  else
    usable_layout(dec_->ch_layout, &want);
  encoder_layout(enc_, want, &ctx_->ch_layout);
  av_channel_layout_uninit(&want);
  if (target_.channels > 0 && ctx_->ch_layout.nb_channels != target_.channels)
    throw Error(ErrorKind::Usage, log::format("-ac %d: the %s encoder does not take %d channels", target_.channels,
                                              enc_->name, target_.channels));
  ctx_->sample_rate = encoder_rate(enc_, target_.rate > 0        ? target_.rate
                                         : dec_->sample_rate > 0 ? dec_->sample_rate
                                                                 : 48000);
  if (target_.rate > 0 && ctx_->sample_rate != target_.rate) {
    std::string rates;
    for (const int* r = enc_->supported_samplerates; r && *r; ++r)
      rates += (rates.empty() ? "" : ", ") + std::to_string(*r);
    throw Error(ErrorKind::Usage,
                log::format("-ar %d: the %s encoder takes %s Hz", target_.rate, enc_->name, rates.c_str()));
  }
  ctx_->sample_fmt = encoder_sample_format(enc_, dec_->sample_fmt);
  ctx_->time_base = {1, ctx_->sample_rate};
  const AVCodecDescriptor* d = avcodec_descriptor_get(enc_->id);
  const bool lossless = d && (d->props & AV_CODEC_PROP_LOSSLESS);
  // Lossy encoders: -b:a, else 64 kb/s a channel (128 kb/s stereo), at most 320.
  if (!lossless)
    ctx_->bit_rate =
        target_.bitrate > 0 ? target_.bitrate : std::min<int64_t>(64000LL * ctx_->ch_layout.nb_channels, 320000);
  if (enc_->capabilities & AV_CODEC_CAP_EXPERIMENTAL) ctx_->strict_std_compliance = FF_COMPLIANCE_EXPERIMENTAL;
  if (out->oformat->flags & AVFMT_GLOBALHEADER) ctx_->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  if (int e = avcodec_open2(ctx_, enc_, nullptr); e < 0)
    throw Error(ErrorKind::Usage, std::string("the ") + enc_->name + " audio encoder refused " +
                                      std::to_string(ctx_->sample_rate) + " Hz " + layout_name(ctx_->ch_layout) + ": " +
                                      averr(e) + " (-c:a, -ar, -ac choose others)");
  if (avcodec_parameters_from_context(st->codecpar, ctx_) < 0) throw Error(ErrorKind::OutOfMemory, "an audio stream");
  st->codecpar->codec_tag = 0;
  st->time_base = ctx_->time_base;
  fifo_ = av_audio_fifo_alloc(ctx_->sample_fmt, ctx_->ch_layout.nb_channels, 4096);
  if (!fifo_) throw Error(ErrorKind::OutOfMemory, "an audio buffer");
}

void AudioTranscoder::send(const AVPacket* p) {
  const int e = avcodec_send_packet(dec_, p);
  if (e < 0 && e != AVERROR(EAGAIN) && e != AVERROR_EOF) {
    // A damaged packet costs its own samples only, as in ffmpeg.
    if (decode_errors_++ == 0)
      log::warn("audio stream #%d: a damaged %s packet left out (%s)", st_->index, avcodec_get_name(par_->codec_id),
                averr(e).c_str());
    return;
  }
  while (true) {
    const int r = avcodec_receive_frame(dec_, frame_);
    if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
    if (r < 0) {
      if (decode_errors_++ == 0)
        log::warn("audio stream #%d: a frame could not be decoded (%s)", st_->index, averr(r).c_str());
      continue;
    }
    decoded(frame_);
    av_frame_unref(frame_);
  }
}

void AudioTranscoder::configure_resampler(const AVFrame* f) {
  AVChannelLayout layout{};
  usable_layout(f->ch_layout, &layout);
  if (swr_ && f->sample_rate == swr_rate_ && f->format == swr_format_ &&
      av_channel_layout_compare(&layout, &swr_layout_) == 0) {
    av_channel_layout_uninit(&layout);
    return;
  }
  if (swr_) {  // the input changed: what the old one holds goes out first
    resample(nullptr);
    swr_free(&swr_);
  }
  if (swr_alloc_set_opts2(&swr_, &ctx_->ch_layout, ctx_->sample_fmt, ctx_->sample_rate, &layout,
                          static_cast<AVSampleFormat>(f->format), f->sample_rate, 0, nullptr) < 0 ||
      swr_init(swr_) < 0) {
    av_channel_layout_uninit(&layout);
    throw Error(ErrorKind::Input, log::format("cannot convert the input's audio (%d Hz, %s) for the %s encoder",
                                              f->sample_rate, layout_name(f->ch_layout).c_str(), enc_->name));
  }
  swr_rate_ = f->sample_rate;
  swr_format_ = f->format;
  av_channel_layout_uninit(&swr_layout_);
  swr_layout_ = layout;
}

void AudioTranscoder::decoded(AVFrame* f) {
  configure_resampler(f);
  if (next_pts_ == AV_NOPTS_VALUE) {
    // The first samples keep their time: audio that starts after the video stays in step.
    const int64_t ts = f->best_effort_timestamp != AV_NOPTS_VALUE ? f->best_effort_timestamp : f->pts;
    next_pts_ = ts != AV_NOPTS_VALUE ? av_rescale_q(ts, in_tb_, ctx_->time_base) : 0;
  }
  resample(f);
  drain_fifo(false);
}

void AudioTranscoder::make_buffer(AVFrame* f, int samples) {
  av_frame_unref(f);
  f->nb_samples = samples;
  f->format = ctx_->sample_fmt;
  av_channel_layout_copy(&f->ch_layout, &ctx_->ch_layout);
  f->sample_rate = ctx_->sample_rate;
  if (av_frame_get_buffer(f, 0) < 0) throw Error(ErrorKind::OutOfMemory, "an audio frame");
}

void AudioTranscoder::resample(const AVFrame* in) {
  const int cap = swr_get_out_samples(swr_, in ? in->nb_samples : 0);
  if (cap <= 0) return;
  make_buffer(converted_, cap);
  const int n = swr_convert(swr_, converted_->extended_data, cap,
                            in ? const_cast<const uint8_t**>(in->extended_data) : nullptr, in ? in->nb_samples : 0);
  if (n < 0) throw Error(ErrorKind::Input, "cannot convert the input's audio: " + averr(n));
  if (n > 0 && av_audio_fifo_write(fifo_, reinterpret_cast<void**>(converted_->extended_data), n) < n)
    throw Error(ErrorKind::OutOfMemory, "an audio buffer");
}

// Whole encoder frames from the buffer; with `all`, the rest as a last, shorter one.
void AudioTranscoder::drain_fifo(bool all) {
  const bool any_size = ctx_->frame_size <= 0 || (enc_->capabilities & AV_CODEC_CAP_VARIABLE_FRAME_SIZE);
  const int size = any_size ? 4096 : ctx_->frame_size;
  while (true) {
    const int have = av_audio_fifo_size(fifo_);
    if (have == 0 || (have < size && !all && !any_size)) return;
    const int n = std::min(have, size);
    // An encoder that needs whole frames to the end gets the last one padded with silence.
    const bool pad = n < size && !any_size && !(enc_->capabilities & AV_CODEC_CAP_SMALL_LAST_FRAME);
    make_buffer(chunk_, pad ? size : n);
    if (av_audio_fifo_read(fifo_, reinterpret_cast<void**>(chunk_->extended_data), n) < n)
      throw Error(ErrorKind::Internal, "the audio buffer gave fewer samples than it holds");
    if (pad) av_samples_set_silence(chunk_->extended_data, n, size - n, ctx_->ch_layout.nb_channels, ctx_->sample_fmt);
    chunk_->pts = next_pts_;
    next_pts_ += n;
    encode(chunk_);
  }
}

void AudioTranscoder::encode(AVFrame* f) {
  if (int e = avcodec_send_frame(ctx_, f); e < 0 && e != AVERROR_EOF)
    throw Error(ErrorKind::Output, std::string("audio encoding (") + enc_->name + ") failed: " + averr(e));
  while (true) {
    const int r = avcodec_receive_packet(ctx_, pkt_);
    if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
    if (r < 0) throw Error(ErrorKind::Output, std::string("audio encoding (") + enc_->name + ") failed: " + averr(r));
    av_packet_rescale_ts(pkt_, ctx_->time_base, st_->time_base);
    pkt_->stream_index = st_->index;
    if (int e = av_interleaved_write_frame(out_, pkt_); e < 0)
      throw Error(ErrorKind::Output, std::string("cannot write an audio packet: ") + averr(e));
  }
}

void AudioTranscoder::finish() {
  if (finished_ || !ctx_) return;
  finished_ = true;
  send(nullptr);  // the decoder's last frames
  if (swr_) resample(nullptr);
  drain_fifo(true);
  encode(nullptr);
  if (decode_errors_ > 1)
    log::warn("audio stream #%d: %lld damaged packets or frames left out", st_->index,
              static_cast<long long>(decode_errors_));
}

std::string AudioTranscoder::describe() const {
  std::string d =
      std::string("audio ") + avcodec_get_name(par_->codec_id) + " re-encoded as " + avcodec_get_name(enc_->id);
  if (!ctx_) return d;
  d += log::format(" (%d Hz %s", ctx_->sample_rate, layout_name(ctx_->ch_layout).c_str());
  if (ctx_->bit_rate > 0) d += log::format(", %lld kb/s", static_cast<long long>(ctx_->bit_rate / 1000));
  return d + ")";
}

bool text_subtitles(AVCodecID id) {
  const AVCodecDescriptor* d = avcodec_descriptor_get(id);
  return d && d->type == AVMEDIA_TYPE_SUBTITLE && (d->props & AV_CODEC_PROP_TEXT_SUB);
}

const AVCodec* find_subtitle_encoder(const std::string& name, const AVOutputFormat* of) {
  const AVCodec* enc = avcodec_find_encoder_by_name(name.c_str());
  if (!enc || enc->type != AVMEDIA_TYPE_SUBTITLE)
    throw Error(ErrorKind::Usage, "-c:s " + name +
                                      ": no such subtitle encoder in this libavcodec (try mov_text, webvtt, srt, "
                                      "ass, or copy)");
  if (avformat_query_codec(of, enc->id, FF_COMPLIANCE_NORMAL) != 1) {
    std::string holds;
    for (const char* n : {"mov_text", "webvtt", "srt", "ass"}) {
      const AVCodec* c = avcodec_find_encoder_by_name(n);
      if (c && avformat_query_codec(of, c->id, FF_COMPLIANCE_NORMAL) == 1)
        holds += std::string(holds.empty() ? "" : ", ") + n;
    }
    throw Error(ErrorKind::Usage,
                "-c:s " + name + ": the " + of->name + " output cannot hold " + name + " subtitles" +
                    (holds.empty() ? " (it holds no text subtitles; use .mkv, or -sn)" : " (it holds " + holds + ")"));
  }
  return enc;
}

const AVCodec* find_subtitle_converter(AVCodecID in, const AVOutputFormat* of) {
  if (!text_subtitles(in) || !avcodec_find_decoder(in)) return nullptr;
  // The container's default where it names one (WebM: WebVTT), else the text format it
  // holds (MP4 and MOV name none; they hold mov_text).
  for (const AVCodecID want :
       {of->subtitle_codec, AV_CODEC_ID_MOV_TEXT, AV_CODEC_ID_WEBVTT, AV_CODEC_ID_SUBRIP, AV_CODEC_ID_ASS}) {
    if (want == AV_CODEC_ID_NONE || !text_subtitles(want)) continue;
    const AVCodec* enc = avcodec_find_encoder(want);
    if (enc && avformat_query_codec(of, want, FF_COMPLIANCE_NORMAL) == 1) return enc;
  }
  return nullptr;
}

void SubtitleConverter::open(AVFormatContext* out, AVStream* st) {
  start(out, st, "subtitles", "-sn");
  ctx_->time_base = {1, 1000};  // events are timed in milliseconds
  // The styles of the decoded events (an ASS header), which the encoder needs to read them.
  if (dec_->subtitle_header_size > 0) {
    ctx_->subtitle_header = static_cast<uint8_t*>(av_mallocz(dec_->subtitle_header_size + 1));
    if (!ctx_->subtitle_header) throw Error(ErrorKind::OutOfMemory, "a subtitle header");
    std::memcpy(ctx_->subtitle_header, dec_->subtitle_header, dec_->subtitle_header_size);
    ctx_->subtitle_header_size = dec_->subtitle_header_size;
  }
  if (out->oformat->flags & AVFMT_GLOBALHEADER) ctx_->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  if (int e = avcodec_open2(ctx_, enc_, nullptr); e < 0)
    throw Error(ErrorKind::Output, std::string("the ") + enc_->name + " subtitle encoder refused the " +
                                       avcodec_get_name(par_->codec_id) + " subtitles: " + averr(e));
  if (avcodec_parameters_from_context(st->codecpar, ctx_) < 0) throw Error(ErrorKind::OutOfMemory, "a subtitle stream");
  st->time_base = ctx_->time_base;
}

void SubtitleConverter::send(const AVPacket* p) {
  AVSubtitle sub{};
  int got = 0;
  // The decoder does not keep the packet (the API's pointer is not const).
  const int e = avcodec_decode_subtitle2(dec_, &sub, &got, const_cast<AVPacket*>(p));
  if (e < 0 || !got) {
    if (e < 0 && errors_++ == 0)
      log::warn("subtitle stream #%d: a damaged %s event left out (%s)", st_->index, avcodec_get_name(par_->codec_id),
                averr(e).c_str());
    return;
  }
  struct Freed {
    AVSubtitle* s;
    ~Freed() { avsubtitle_free(s); }
  } freed{&sub};
  if (sub.num_rects == 0 || p->pts == AV_NOPTS_VALUE) return;  // nothing shown, or no time to show it at
  // The event's span: the decoder's, else the packet's duration.
  int64_t shown_ms = sub.end_display_time > sub.start_display_time && sub.end_display_time != UINT32_MAX
                         ? sub.end_display_time - sub.start_display_time
                         : av_rescale_q(p->duration, in_tb_, {1, 1000});
  const int64_t start_ms = av_rescale_q(p->pts, in_tb_, {1, 1000}) + sub.start_display_time;
  sub.end_display_time = static_cast<uint32_t>(std::max<int64_t>(shown_ms, 0));
  sub.start_display_time = 0;
  std::vector<uint8_t> buf(1 << 16);
  const int n = avcodec_encode_subtitle(ctx_, buf.data(), static_cast<int>(buf.size()), &sub);
  if (n <= 0) {
    if (errors_++ == 0)
      log::warn("subtitle stream #%d: an event the %s encoder cannot take left out", st_->index, enc_->name);
    return;
  }
  av_packet_unref(pkt_);
  if (av_new_packet(pkt_, n) < 0) throw Error(ErrorKind::OutOfMemory, "a subtitle packet");
  std::memcpy(pkt_->data, buf.data(), n);
  pkt_->pts = pkt_->dts = av_rescale_q(start_ms, {1, 1000}, st_->time_base);
  pkt_->duration = av_rescale_q(sub.end_display_time, {1, 1000}, st_->time_base);
  pkt_->stream_index = st_->index;
  if (int w = av_interleaved_write_frame(out_, pkt_); w < 0)
    throw Error(ErrorKind::Output, std::string("cannot write a subtitle packet: ") + averr(w));
}

void SubtitleConverter::finish() {
  if (errors_ > 1)
    log::warn("subtitle stream #%d: %lld damaged or unconvertible events left out", st_ ? st_->index : -1,
              static_cast<long long>(errors_));
}

std::string SubtitleConverter::describe() const {
  return std::string("subtitle ") + avcodec_get_name(par_->codec_id) + " converted to " + avcodec_get_name(enc_->id);
}

}  // namespace vfp
