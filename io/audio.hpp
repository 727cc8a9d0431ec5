// Re-encoding one audio stream of a video input for the output (-c:a, and audio that the
// output's container cannot hold as it is): decode, convert to the encoder's sample format,
// rate and layout (libswresample), re-frame to the encoder's frame size, encode, mux.
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

// libav's text for an error code (shared by io/libav.cpp and io/audio.cpp).
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

class AudioTranscoder {
 public:
  // `in`/`in_tb`: the input stream's parameters and time base (copied).
  AudioTranscoder(const AVCodecParameters* in, AVRational in_tb, const AVCodec* enc, AudioTarget target);
  ~AudioTranscoder();
  AudioTranscoder(const AudioTranscoder&) = delete;
  AudioTranscoder& operator=(const AudioTranscoder&) = delete;

  // Opens the decoder, encoder and resampler and describes the stream `st` of `out`
  // (before the header is written).
  void open(AVFormatContext* out, AVStream* st);
  // One packet of the input stream, timestamps in the input's time base with `origin`
  // seconds (the run's start) already taken off; what the encoder gives is written to `out`.
  void send(const AVPacket* p);
  // Drains the decoder, the resampler and the encoder (at the end of the run).
  void finish();
  // "aac 48 kHz stereo -> opus 96 kb/s".
  std::string describe() const;

 private:
  void decoded(AVFrame* f);
  void encode(AVFrame* f);
  void configure_resampler(const AVFrame* f);
  // `f` as an empty frame of `samples` in the encoder's format.
  void make_buffer(AVFrame* f, int samples);
  // `in` (null: what the resampler still holds) converted into the buffer.
  void resample(const AVFrame* in);
  void drain_fifo(bool all);

  AVCodecParameters* par_ = nullptr;
  AVRational in_tb_;
  const AVCodec* enc_;
  AudioTarget target_;
  AVCodecContext* dec_ = nullptr;
  AVCodecContext* ctx_ = nullptr;  // the encoder
  SwrContext* swr_ = nullptr;
  AVAudioFifo* fifo_ = nullptr;
  AVFrame* frame_ = nullptr;      // decoded
  AVFrame* converted_ = nullptr;  // resampled
  AVFrame* chunk_ = nullptr;      // one encoder frame
  AVPacket* pkt_ = nullptr;
  AVFormatContext* out_ = nullptr;
  AVStream* st_ = nullptr;
  // The resampler's input as configured: a decoder may change it mid-stream.
  int swr_rate_ = 0;
  int swr_format_ = -1;
  AVChannelLayout swr_layout_{};
  int64_t next_pts_ = AV_NOPTS_VALUE;  // encoder time base (1 / sample rate)
  int64_t decode_errors_ = 0;
  bool finished_ = false;
};

}  // namespace vfp
