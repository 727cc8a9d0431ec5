#include "io/stream_map.hpp"

#include <algorithm>
#include <cctype>

#include "core/error.hpp"

namespace vfp {

namespace {

const char* type_word(char t) {
  switch (t) {
    case 'v':
      return "video";
    case 'V':
      return "non-cover video";
    case 'a':
      return "audio";
    case 's':
      return "subtitle";
    case 'd':
      return "data";
    case 't':
      return "attachment";
    default:
      return "";
  }
}

bool matches(const StreamMap& m, const StreamKind& k) {
  if (m.type == 0) return true;
  if (m.type == 'V') return k.type == 'v' && !k.cover;
  return k.type == m.type;
}

// A decimal number at text[*at]; false if there is none (or it is absurdly long).
bool read_number(const std::string& text, size_t* at, int* out) {
  size_t i = *at;
  int v = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) && i - *at < 6)
    v = v * 10 + (text[i++] - '0');
  if (i == *at || (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])))) return false;
  *at = i;
  *out = v;
  return true;
}

}  // namespace

StreamMap parse_stream_map(const std::string& text) {
  StreamMap m;
  m.text = text;
  auto bad = [&](const std::string& why, size_t pos) {
    throw ParseError("-map: " + why + " (e.g. 0, 0:v, 0:a:1, 0:s?, -0:a:1)", text, std::min(pos, text.size()));
  };
  size_t i = 0;
  if (i < text.size() && text[i] == '-') m.negative = true, ++i;
  int file = 0;
  const size_t file_at = i;
  if (!read_number(text, &i, &file)) bad("expected the input's number, 0", i);
  if (file != 0) bad("vfpipe has one input, number 0", file_at);
  size_t end = text.size();
  if (end > i && text[end - 1] == '?') m.optional = true, --end;
  if (i == end) return m;
  if (text[i] != ':') bad("expected ':' after the input's number", i);
  ++i;
  if (i < end && std::string("vVasdt").find(text[i]) != std::string::npos) {
    m.type = text[i++];
    if (i == end) return m;
    if (text[i] != ':') bad("expected ':' and a stream number after the type", i);
    ++i;
  } else if (i < end && std::isalpha(static_cast<unsigned char>(text[i]))) {
    bad(std::string("unknown stream type '") + text[i] + "' (v, V, a, s, d, t)", i);
  }
  if (!read_number(text, &i, &m.index)) bad("expected a stream number", i);
  if (i != end) bad(std::string("unexpected '") + text[i] + "'", i);
  return m;
}

MappedStreams resolve_stream_maps(const std::vector<StreamMap>& maps, const std::vector<StreamKind>& streams) {
  std::vector<int> chosen;
  for (const StreamMap& m : maps) {
    std::vector<int> hit;
    int nth = 0;
    for (size_t s = 0; s < streams.size(); ++s) {
      if (!matches(m, streams[s])) continue;
      if (m.index < 0 || m.index == nth) hit.push_back(static_cast<int>(s));
      ++nth;
    }
    if (hit.empty() && !m.optional && !m.negative) {
      const std::string what = m.type ? std::string(type_word(m.type)) + " stream" : std::string("stream");
      throw Error(ErrorKind::Usage, "-map " + m.text + ": the input has no such stream (" + std::to_string(nth) + " " +
                                        what + (nth == 1 ? "" : "s") + "; add '?' to make it optional)");
    }
    for (int s : hit) {
      auto at = std::find(chosen.begin(), chosen.end(), s);
      if (m.negative && at != chosen.end()) chosen.erase(at);
      if (!m.negative && at == chosen.end()) chosen.push_back(s);
    }
  }
  MappedStreams out;
  std::string videos;
  int count = 0;
  for (int s : chosen) {
    const StreamKind& k = streams[static_cast<size_t>(s)];
    if (k.type == 'v' && !k.cover) {
      if (out.video < 0) out.video = s;
      videos += (count++ ? ", #" : "#") + std::to_string(s);
    } else {
      out.copied.push_back(s);
    }
  }
  if (count == 0) throw Error(ErrorKind::Usage, "-map: no video stream to filter is mapped (add -map 0:v:0)");
  if (count > 1)
    throw Error(ErrorKind::Usage,
                "-map: vfpipe filters one video stream, and streams " + videos + " are mapped (choose one with 0:v:N)");
  return out;
}

}  // namespace vfp
