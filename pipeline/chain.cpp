#include "pipeline/chain.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/log.hpp"
#include "stages/builtin.hpp"

namespace vfp {

namespace {
bool contains(const std::vector<PixelFormat>& v, PixelFormat f) { return std::find(v.begin(), v.end(), f) != v.end(); }

// The format to convert to before a stage that does not take `from`: the accepted format
// that keeps the most of it (colour before gray, full chroma before subsampled).
PixelFormat pick_conversion(PixelFormat from, const std::vector<PixelFormat>& accepted) {
  using F = PixelFormat;
  std::vector<F> pref;
  // A 16-bit frame first tries its own layout at 8 bits, then what that layout would.
  if (is_16bit(from)) {
    pref.push_back(with_depth(from, 8));
    from = with_depth(from, 8);
  }
  switch (from) {
    case F::BGR24:
      pref.insert(pref.end(), {F::RGB24, F::YUV444P, F::YUV420P, F::GRAY8});
      break;
    case F::RGB24:
      pref.insert(pref.end(), {F::BGR24, F::YUV444P, F::YUV420P, F::GRAY8});
      break;
    case F::YUV444P:
      pref.insert(pref.end(), {F::BGR24, F::RGB24, F::YUV420P, F::GRAY8});
      break;
    case F::YUV420P:
      pref.insert(pref.end(), {F::YUV444P, F::BGR24, F::RGB24, F::GRAY8});
      break;
    default:
      pref.insert(pref.end(), {F::YUV420P, F::YUV444P, F::BGR24, F::RGB24});
      break;
  }
  for (F f : pref)
    if (contains(accepted, f)) return f;
  return accepted.front();
}
}  // namespace

Chain Chain::build(std::vector<std::unique_ptr<Stage>> stages, const FrameSpec& input,
                   const std::vector<PixelFormat>& sink_formats, std::optional<PixelFormat> forced_out,
                   const Registry& reg) {
  Chain c;
  c.input_ = input;
  FrameSpec cur = input;
  auto add = [&](std::unique_ptr<Stage> st, bool inserted) {
    Step s;
    s.in = cur;
    s.out = st->configure(cur);
    s.out.fps = cur.fps;
    validate_spec(s.out, ("output of " + st->label()).c_str());
    s.stage = std::move(st);
    s.inserted = inserted;
    cur = s.out;
    c.steps_.push_back(std::move(s));
  };
  for (auto& st : stages) {
    const StageInfo* info = reg.find(st->name());
    if (info && !info->formats.empty() && !contains(info->formats, cur.format)) {
      const PixelFormat to = pick_conversion(cur.format, info->formats);
      log::debug("inserting a conversion %s -> %s before '%s'", pix_fmt_name(cur.format), pix_fmt_name(to),
                 st->name().c_str());
      // Said, not done silently: a 10-bit video loses its extra precision here for good.
      if (is_16bit(cur.format) && !is_16bit(to))
        log::warn(
            "'%s' works on 8-bit samples: the %s frames are rounded to 8 bits before it (median, conv, "
            "wavelet, format and null keep 16 bits)",
            st->name().c_str(), pix_fmt_name(cur.format));
      add(make_format_stage(to), true);
    }
    add(std::move(st), false);
  }
  PixelFormat want = cur.format;
  if (forced_out)
    want = *forced_out;
  else if (!sink_formats.empty() && !contains(sink_formats, cur.format))
    want = sink_formats.front();
  if (!sink_formats.empty() && !contains(sink_formats, want))
    throw Error(ErrorKind::Usage, log::format("the output cannot take pixel format '%s'", pix_fmt_name(want)));
  if (want != cur.format) {
    if (is_16bit(cur.format) && !is_16bit(want) && !forced_out)
      log::warn("the output takes 8-bit samples: the %s frames are rounded to 8 bits for it", pix_fmt_name(cur.format));
    add(make_format_stage(want), true);
  }
  c.output_ = cur;
  return c;
}

bool Chain::all_cuda() const {
  for (const auto& s : steps_)
    if (!s.stage->passthrough() && !s.stage->has_cuda()) return false;
  return true;
}

std::string Chain::describe() const {
  if (steps_.empty()) return "(no filters)";
  std::string r;
  for (size_t i = 0; i < steps_.size(); ++i) {
    if (i) r += " -> ";
    r += steps_[i].stage->label();
  }
  return r;
}

}  // namespace vfp
