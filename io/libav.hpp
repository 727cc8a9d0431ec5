// Video files and streams through FFmpeg's libraries (libavformat, libavcodec, libswscale,
// libswresample): demux + decode into the frame's own format, encode + mux with the codec and
// quality the user asks for, and everything else the input had carried over: audio, subtitle
// and data streams (copied; audio re-encoded with -c:a or where the container cannot hold
// it), per-frame timestamps (variable frame rate too), the colour description, and metadata
// (docs/video-io.md).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/stream_map.hpp"
#include "pipeline/source.hpp"

namespace vfp {

bool have_libav();

// What a libav source shares with the sink of the same run: the input's streams to copy,
// its time base and per-frame timestamps, colour description and metadata.
struct LibavInput;

struct LibavInputOptions {
  double start = 0;      // -ss: seconds into the input where the run begins
  double duration = -1;  // -t: seconds to process (< 0: to the end)
  // A file that ends before the frames its index lists (truncated, damaged) is an error
  // after the frames it has are delivered; with this, a warning.
  bool ignore_errors = false;
  // NVDEC through libavcodec's CUDA hwaccel: "auto" (when the codec, the profile and the
  // GPU allow; otherwise the CPU decoder, with one line), "cuda" (NVDEC or an error), "none".
  std::string hwaccel = "none";
  // The CUDA backend runs the chain: NVDEC's frames may stay in GPU memory (split into the
  // stream's planar format there; Source::can_fill_device). Else they are copied to host memory.
  bool gpu_frames = false;
  // The CUDA backend runs the chain: NVDEC works in the CUDA runtime's context of the GPU,
  // whether its frames stay there or not (a context of libav's own would be a second one;
  // libav's own way to share the runtime's refuses it once the runtime has started it).
  bool runtime_context = false;
  int threads = 0;  // the CPU decoder's threads (0: libavcodec picks, by the cores)
  // -map: the video stream to filter and the streams to copy (empty: the best video stream,
  // and every other stream the output can hold).
  std::vector<StreamMap> map;
};
// Throws vfp::Error (Input) for a missing, unreadable or unsupported input.
std::unique_ptr<Source> open_libav_source(const std::string& url, const LibavInputOptions& opt);
// Starts libav's NVDEC device for `gpu` ahead of the first file (the one a CUDA-backend
// source uses: on the runtime's context), so that a batch's lanes do not queue behind its
// creation inside their first item. False, with `why`, when NVDEC cannot be had there.
bool prepare_nvdec(int gpu, std::string* why);
// The input a source reads, or null when it is not a libav source.
std::shared_ptr<LibavInput> libav_input_of(const Source& src);
// Keep up to `max_idle` NVDEC decoders per GPU and stream format when a file ends, for the
// next file of the same format (0: off, the default; what is kept is freed). Making a
// decoder is serialised by the driver across all GPUs (about 85 ms on an H200): for vfpipe
// batch, whose files are mostly of one format. Only NVDEC's own path (io/nvdec.hpp) keeps them.
void keep_nvdec_decoders(int max_idle);
// What decodes a libav source's video ("cpu", "nvdec (libavcodec)", "nvdec", "nvdec (reused)":
// a decoder an earlier file left, vfpipe batch); "" for other sources. Known after the first frame.
std::string libav_decoder_of(const Source& src);
// Frame `index`'s time in seconds from the start of the run: its timestamp in the input
// (variable rate too; read once: the output that writes the frame asks), else index / fps.
double frame_seconds(LibavInput* in, int64_t index, Rational fps);

// The encoder's quality settings and what to carry over from the input (the run's -o options).
struct VideoOptions {
  int crf = -1;              // -crf (codecs that have it)
  std::string preset;        // -preset
  int64_t bitrate = 0;       // -b:v, bits per second
  int gop = -1;              // -g
  std::string codec_params;  // -x264-params / -x265-params / -svtav1-params: key=value:...
  // Options of the video encoder by name (-tune, -profile:v, -level, -maxrate, -bufsize, -bf).
  std::vector<std::pair<std::string, std::string>> encoder_options;
  // -metadata: the output file's tags, over the input's (an empty value removes one).
  std::vector<std::pair<std::string, std::string>> metadata;
  bool audio = true;           // carry the input's audio over (-an: false)
  bool subtitles = true;       // its subtitles (-sn: false)
  bool data = true;            // its data streams (-dn: false)
  std::string audio_codec;     // -c:a: "" (copied where the container holds it, else re-encoded
                               // to its own audio codec), "copy", or an encoder (aac, libopus, ...)
  std::string subtitle_codec;  // -c:s: "" (copied where the container holds them, else text
                               // converted to its own text format), "copy", or an encoder
  int64_t audio_bitrate = 0;   // -b:a, bits per second (0: 64 kb/s a channel, lossy encoders)
  int audio_rate = 0;          // -ar, samples per second (0: the input's); re-encodes
  int audio_channels = 0;      // -ac (0: the input's); re-encodes
  Rational aspect{0, 1};       // -aspect: the display aspect ratio (0: the frames' own)
  // -color_primaries, -color_trc, -colorspace, -color_range: tags in libavutil's names ("" =
  // the input's); the samples are not converted.
  std::string color_primaries, color_trc, colorspace, color_range;
  Rational rate{0, 1};                // -r: constant output rate, frames duplicated or dropped by
                                      // their timestamps (0: the input's own timing)
  int bits = 0;                       // -pix_fmt yuv420p10le: the encoder's depth (0: the input's)
  int input_bits = 0;                 // the input's depth where below 16 (Source::sample_bits())
  int threads = 0;                    // the encoder's threads (0: libavcodec picks, by the cores)
  std::string movflags;               // -movflags for MP4/MOV (default: fragmented, a fragment a second)
  std::shared_ptr<LibavInput> input;  // streams, timestamps, colour and metadata to carry over
};
// One of the input's streams besides the filtered video: "audio stream #1 (aac)", and the
// option that leaves it out ("-an to drop audio").
struct OtherStream {
  std::string name, drop;
};
// Those `keep` keeps (not audio with -an, ...), and whether -map chose them (else: every
// other stream).
std::vector<OtherStream> libav_other_streams(const LibavInput& in, const VideoOptions& keep, bool* mapped);
// Throws vfp::Error (Usage) naming the valid tags when a colour tag of `o` (-colorspace and
// the rest) is not one of libavutil's names.
void libav_check_colour_tags(const VideoOptions& o);
// "PQ" or "HLG" where the input's video has an HDR transfer, else "".
std::string libav_hdr_transfer(const LibavInput& in);
// The input's HDR10 metadata in words ("mastering display 0.0001-1000 cd/m2, content light
// max 1000 cd/m2, frame average 400 cd/m2"), or "" where it has none. The frames' own
// metadata is known once the first frame is decoded.
std::string libav_hdr_summary(LibavInput& in);

struct LibavOutputOptions : VideoOptions {
  std::string codec;      // -c:v: an encoder name (libx264, libx265, libsvtav1, ffv1, ...); "" = by container
  bool lossless = false;  // a lossless encoder (ffv1 by default)
};
// Throws vfp::Error (Usage) for an unknown container or encoder, (Output) if it cannot write.
std::unique_ptr<Sink> open_libav_sink(const std::string& path, const LibavOutputOptions& opt);

}  // namespace vfp
