// Streams of a video input that the output gets converted rather than copied. Audio
// re-encoded (-c:a, and audio that the output's container cannot hold as it is): decode,
// convert to the encoder's sample format, rate and layout (libswresample), re-frame to the
// encoder's frame size, encode, mux. Text subtitles the container cannot hold as they are:
// decoded to their events and encoded in a text format it holds.
// Internal to io/libav.cpp (it speaks libav's types).
#pragma once
#include <cstdint>
#include <string>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/audio_fifo.h>
#include <libswresample/swresample.h>
}

namespace vfp {

// libav's text for an error code (shared by io/libav.cpp and io/transcode.cpp).
inline std::string averr(int e) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(e, buf, sizeof buf);
  return buf;
}

// The encoder `name` asks for (-c:a), or with an empty name the container's own audio
// encoder (AAC for MP4, Opus for WebM, ...). Throws vfp::Error (Usage) for an unknown or
// non-audio encoder, or one the container cannot hold.
const AVCodec* find_audio_encoder(const std::string& name, const AVOutputFormat* of);

// What the re-encoded audio should be; 0: as the input (rate, channels) or a default by
// channel count (bit rate, lossy encoders).
struct AudioTarget {
  int64_t bitrate = 0;  // -b:a
  int rate = 0;         // -ar
  int channels = 0;     // -ac
};

// A stream of the input that the output gets converted rather than copied (audio
// re-encoded, text subtitles in the container's own format).
class StreamTranscoder {
 public:
  virtual ~StreamTranscoder();
  StreamTranscoder(const StreamTranscoder&) = delete;
  StreamTranscoder& operator=(const StreamTranscoder&) = delete;
  // Opens the decoder and encoder and describes the stream `st` of `out` (before the header
  // is written).
  virtual void open(AVFormatContext* out, AVStream* st) = 0;
  // One packet of the input stream, timestamps in the input's time base with `origin`
  // seconds (the run's start) already taken off; what the encoder gives is written to `out`.
  virtual void send(const AVPacket* p) = 0;
  // Drains what the decoder and encoder still hold (at the end of the run).
  virtual void finish() = 0;
  // "audio aac re-encoded as opus (...)", "subtitle subrip converted to mov_text".
  virtual std::string describe() const = 0;

 protected:
  // `in`/`in_tb`: the input stream's parameters and time base (copied); `enc` the encoder.
  StreamTranscoder(const AVCodecParameters* in, AVRational in_tb, const AVCodec* enc);
  // For open(): keeps `out` and `st`, opens the decoder (dec_) and makes the encoder's
  // context (ctx_). `what` names the stream's kind ("audio"), `drop` its -an/-sn option.
  void start(AVFormatContext* out, AVStream* st, const char* what, const char* drop);

  AVCodecParameters* par_ = nullptr;
  AVRational in_tb_;
  const AVCodec* enc_;
  AVCodecContext* dec_ = nullptr;
  AVCodecContext* ctx_ = nullptr;  // the encoder
  AVPacket* pkt_ = nullptr;        // what the encoder gives
  AVFormatContext* out_ = nullptr;
  AVStream* st_ = nullptr;
};

class AudioTranscoder final : public StreamTranscoder {
 public:
  AudioTranscoder(const AVCodecParameters* in, AVRational in_tb, const AVCodec* enc, AudioTarget target);
  ~AudioTranscoder() override;

  void open(AVFormatContext* out, AVStream* st) override;  // and the resampler
  void send(const AVPacket* p) override;
  void finish() override;  // the decoder, the resampler and the encoder
  std::string describe() const override;

 private:
  void decoded(AVFrame* f);
  void encode(AVFrame* f);
  void configure_resampler(const AVFrame* f);
  // `f` as an empty frame of `samples` in the encoder's format.
  void make_buffer(AVFrame* f, int samples);
  // `in` (null: what the resampler still holds) converted into the buffer.
  void resample(const AVFrame* in);
  void drain_fifo(bool all);

  AudioTarget target_;
  SwrContext* swr_ = nullptr;
  AVAudioFifo* fifo_ = nullptr;
  AVFrame* frame_ = nullptr;      // decoded
  AVFrame* converted_ = nullptr;  // resampled
  AVFrame* chunk_ = nullptr;      // one encoder frame
  // The resampler's input as configured: a decoder may change it mid-stream.
  int swr_rate_ = 0;
  int swr_format_ = -1;
  AVChannelLayout swr_layout_{};
  int64_t next_pts_ = AV_NOPTS_VALUE;  // encoder time base (1 / sample rate)
  int64_t decode_errors_ = 0;
  bool finished_ = false;
};

// The encoder that puts text subtitles of codec `in` into the container `of` when it
// cannot hold them as they are (SubRip into MP4 becomes mov_text, as ffmpeg's -c:s
// mov_text does): a text subtitle format the container holds; null when there is none
// (AVI) or the input is not text (bitmap subtitles).
const AVCodec* find_subtitle_converter(AVCodecID in, const AVOutputFormat* of);

// The subtitle encoder -c:s names (mov_text, webvtt, srt, ass, ...). Throws vfp::Error
// (Usage) for an unknown or non-subtitle encoder, or one the container cannot hold.
const AVCodec* find_subtitle_encoder(const std::string& name, const AVOutputFormat* of);

// Whether subtitles of codec `id` are text (SubRip, ASS, WebVTT, mov_text, ...), which can
// be converted into one another, rather than bitmaps.
bool text_subtitles(AVCodecID id);

// Text subtitles decoded to their events and encoded again in the output's codec, one
// packet an event, at the event's time.
class SubtitleConverter final : public StreamTranscoder {
 public:
  SubtitleConverter(const AVCodecParameters* in, AVRational in_tb, const AVCodec* enc)
      : StreamTranscoder(in, in_tb, enc) {}

  void open(AVFormatContext* out, AVStream* st) override;
  void send(const AVPacket* p) override;
  void finish() override;
  std::string describe() const override;

 private:
  int64_t errors_ = 0;
};

}  // namespace vfp
