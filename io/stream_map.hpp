// ffmpeg's -map for the simple cases of one input: which of the input's streams go into the
// output. vfpipe filters exactly one video stream; the other mapped streams are copied.
//
//   -map 0            every stream          -map 0:a      every audio stream
//   -map 0:v:1        the second video      -map 0:3      the stream with index 3
//   -map 0:s?         subtitles, if any     -map -0:a:1   all but the second audio stream
//
// Stream types: v (video), V (video that is not a cover picture), a, s, d (data), t
// (attachments). Maps apply in order; a negative map removes streams that earlier maps
// added; the output's copied streams keep the order the maps added them in.
#pragma once
#include <string>
#include <vector>

namespace vfp {

struct StreamMap {
  bool negative = false;  // -map -0:...: remove
  char type = 0;          // 'v', 'V', 'a', 's', 'd', 't', or 0: any type
  int index = -1;         // the N-th stream of the type (or of the input), -1: all of them
  bool optional = false;  // a trailing '?': no error when nothing matches
  std::string text;       // as given, for messages
};

// Parses one -map argument; throws vfp::ParseError pointing at the offending character.
StreamMap parse_stream_map(const std::string& text);

// What one stream of the input is, as far as -map cares.
struct StreamKind {
  char type = 'd';     // 'v', 'a', 's', 'd', 't'
  bool cover = false;  // a video stream that is an attached picture (cover art)
};

struct MappedStreams {
  int video = -1;           // the input stream that is filtered
  std::vector<int> copied;  // input streams copied to the output, in map order
};

// Applies the maps to the input's streams. Throws vfp::Error (Usage) when a map that is not
// optional matches nothing, or when the maps leave no video stream or more than one to filter.
MappedStreams resolve_stream_maps(const std::vector<StreamMap>& maps, const std::vector<StreamKind>& streams);

}  // namespace vfp
