#include "io/synthetic.hpp"

#include <chrono>
#include <cmath>
#include <thread>

#include "core/error.hpp"
#include "core/filter_parser.hpp"
#include "core/log.hpp"
#include "core/parallel.hpp"
#include "cpu/convert.hpp"

namespace vfp {

namespace {
// The options as declared; parse_synthetic() resolves size, rate and format.
struct SyntheticSettings : SyntheticParams {
  std::string size, rate, format;
};

const OptionTable<SyntheticSettings>& synthetic_table() {
  using S = SyntheticSettings;
  static const OptionTable<S> table = [] {
    OptionTable<S> t;
    t.text("size", &S::size, "640x360", "frame size WxH (or hd720, hd1080, 4k)").aliases({"s"});
    t.text("rate", &S::rate, "25", "frame rate (25, 29.97, 30000/1001)").aliases({"r", "fps"});
    t.integer("frames", &S::frames, 250, 0, 1e12, "number of frames, 0 = endless").aliases({"n"});
    t.text("format", &S::format, "yuv420p", "pixel format").aliases({"pix_fmt"});
    t.choice("noise", &S::noise, "none", {"none", "gauss", "saltpepper"}, "added noise");
    t.number("sigma", &S::sigma, 15, 0, 255, "Gaussian noise standard deviation (levels)");
    t.number("density", &S::density, 0.05, 0, 1, "salt-and-pepper fraction of samples");
    t.integer("seed", &S::seed, 1, 0, 4294967295.0, "noise seed");
    t.integer("cache", &S::cache, 0, 0, 4096, "pre-render N frames and cycle them (no per-frame copy)");
    t.flag("realtime", &S::realtime, false, "deliver frames at the frame rate");
    return t;
  }();
  return table;
}
}  // namespace

const std::vector<OptionSpec>& synthetic_options() { return synthetic_table().specs(); }

namespace {
bool parse_size(const std::string& s, int* w, int* h) {
  struct Named {
    const char* n;
    int w, h;
  };
  static const Named named[] = {{"qvga", 320, 240},     {"vga", 640, 480},       {"hd720", 1280, 720},
                                {"hd1080", 1920, 1080}, {"1080p", 1920, 1080},   {"720p", 1280, 720},
                                {"4k", 3840, 2160},     {"uhd2160", 3840, 2160}, {"2160p", 3840, 2160}};
  for (const auto& n : named)
    if (s == n.n) {
      *w = n.w;
      *h = n.h;
      return true;
    }
  size_t x = s.find('x');
  if (x == std::string::npos || x == 0 || x + 1 >= s.size()) return false;
  char* e1 = nullptr;
  char* e2 = nullptr;
  std::string a = s.substr(0, x), b = s.substr(x + 1);
  long lw = std::strtol(a.c_str(), &e1, 10), lh = std::strtol(b.c_str(), &e2, 10);
  if (*e1 || *e2 || lw < 0 || lh < 0 || lw > 1000000 || lh > 1000000) return false;
  *w = static_cast<int>(lw);
  *h = static_cast<int>(lh);
  return true;
}

// splitmix64: a small, well-mixed hash for reproducible per-sample noise.
inline uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

SyntheticParams parse_synthetic(const std::string& text) {
  auto specs = parse_filter_string(text);
  if (specs.size() != 1)
    throw ParseError("a synthetic source takes one 'synthetic=key=value:...' spec", text,
                     specs.size() > 1 ? specs[1].name_pos : 0);
  const FilterSpec& f = specs[0];
  const SyntheticSettings o =
      synthetic_table().bind(bind_options(synthetic_options(), f, text, "the synthetic source"));
  SyntheticParams p = o;
  auto at = [&](const std::string& key) -> std::pair<size_t, size_t> {
    for (const auto& a : f.args)
      if (a.key == key || (a.key.empty())) return {a.value_pos, a.value_len};
    return {f.name_pos, f.name.size()};
  };
  if (!parse_size(o.size, &p.spec.width, &p.spec.height))
    throw ParseError("synthetic: bad size '" + o.size + "' (expected WxH, e.g. 1280x720)", text, at("size").first,
                     at("size").second);
  if (!parse_frame_rate(o.rate, &p.spec.fps))
    throw ParseError("synthetic: bad rate '" + o.rate + "'", text, at("rate").first, at("rate").second);
  if (!parse_pix_fmt(o.format, &p.spec.format) || is_16bit(p.spec.format))
    throw ParseError("synthetic: unsupported format '" + o.format + "' (supported: " + pix_fmt_list(8) +
                         "; for 16 bits add a filter, "
                         "e.g. -f format=gray16le)",
                     text, at("format").first, at("format").second);
  validate_spec(p.spec, "synthetic source");
  return p;
}

SyntheticSource::SyntheticSource(const SyntheticParams& p) : p_(p) {
  validate_spec(p_.spec, "synthetic source");
  if (p_.noise == "gauss") {
    // Inverse-CDF-free table: Box-Muller over a fixed mt19937 stream (fully specified by
    // the C++ standard, so every machine renders the same noise).
    std::mt19937 rng(12345);
    gauss_.resize(1 << 16);
    for (size_t i = 0; i < gauss_.size(); i += 2) {
      double u1 = (rng() + 1.0) / 4294967297.0, u2 = (rng() + 0.5) / 4294967296.0;
      double r = std::sqrt(-2.0 * std::log(u1));
      gauss_[i] = static_cast<float>(r * std::cos(2 * M_PI * u2));
      gauss_[i + 1] = static_cast<float>(r * std::sin(2 * M_PI * u2));
    }
  }
  if (p_.cache > 0) {
    check_host_memory(
        static_cast<size_t>(p_.cache) * FrameLayout::of(p_.spec).total_bytes,
        log::format("synthetic cache=%d (%d pre-rendered %s frames)", p_.cache, p_.cache, p_.spec.describe().c_str()));
    for (int i = 0; i < p_.cache; ++i) {
      auto f = std::make_shared<HostFrame>(p_.spec, p_.pinned);
      render(i, *f);
      cached_.push_back(f);
    }
  }
}

std::string SyntheticSource::describe() const {
  std::string r = "synthetic";
  if (p_.noise == "gauss") r += log::format(" + gaussian noise (sigma %.1f)", p_.sigma);
  if (p_.noise == "saltpepper") r += log::format(" + salt-and-pepper noise (%.1f%%)", p_.density * 100);
  return r;
}

void SyntheticSource::render(int64_t t, HostFrame& dst) const {
  const int W = p_.spec.width, H = p_.spec.height;
  FrameSpec rgb_spec = p_.spec;
  rgb_spec.format = PixelFormat::BGR24;
  if (!rgb_) rgb_ = std::make_unique<HostFrame>(rgb_spec, false);
  ImageView v = rgb_->view();
  const double tt = static_cast<double>(t);
  const int half_w = W / 2, half_h = H / 2;  // integer centre, then the double offset
  const int cx = static_cast<int>(half_w + W / 3.0 * std::cos(tt * 0.05));
  const int cy = static_cast<int>(half_h + H / 4.0 * std::sin(tt * 0.08));
  const int rad = std::max(1, std::min(W, H) / 8);
  const int bars_h = H / 4;
  const int chk_y0 = H - H / 5, chk_x0 = static_cast<int>((t * 4) % std::max(1, W));
  const int chk_w = std::max(1, W / 5);
  static const uint8_t bars[8][3] = {{255, 255, 255}, {0, 255, 255}, {255, 255, 0}, {0, 255, 0},
                                     {255, 0, 255},   {0, 0, 255},   {255, 0, 0},   {0, 0, 0}};
  // Rows are independent (the noise is seeded per plane and row): stripes on the CPU pool.
  parallel_rows(H, 16, [&](int y0, int y1) {
    for (int y = y0; y < y1; ++y) {
      uint8_t* row = v.row(0, y);
      for (int x = 0; x < W; ++x) {
        uint8_t b, g, r;
        if (y < bars_h) {
          const uint8_t* c = bars[std::min(7, x * 8 / std::max(1, W))];
          b = c[0];
          g = c[1];
          r = c[2];
        } else {
          r = static_cast<uint8_t>((x * 256 / std::max(1, W) + 2 * t) & 255);
          g = static_cast<uint8_t>(y * 256 / std::max(1, H));
          b = static_cast<uint8_t>(((x + y) / 2 + t) & 255);
          int dx = x - cx, dy = y - cy;
          if (dx * dx + dy * dy <= rad * rad) {
            r = 250;
            g = 240;
            b = 230;
          }
          int rx = (x - chk_x0 + W) % std::max(1, W);
          if (y >= chk_y0 && rx < chk_w) {
            bool on = (((rx >> 3) + ((y - chk_y0) >> 3)) & 1) != 0;
            r = g = b = on ? 235 : 20;
          }
        }
        row[3 * x] = b;
        row[3 * x + 1] = g;
        row[3 * x + 2] = r;
      }
    }
  });
  convert_cpu(v, dst.view());
  if (p_.noise == "none") return;
  ImageView d = dst.view();
  const int bpp = is_packed_rgb(d.format) ? 3 : 1;
  const uint64_t base = mix(p_.seed * 0x100000001b3ull ^ static_cast<uint64_t>(t));
  const uint64_t thresh = static_cast<uint64_t>(p_.density * 18446744073709551615.0);
  for (int pl = 0; pl < plane_count(d.format); ++pl) {
    parallel_rows(d.ph[pl], 16, [&](int y0, int y1) {
      for (int y = y0; y < y1; ++y) {
        uint8_t* row = d.row(pl, y);
        uint64_t h = mix(base + (static_cast<uint64_t>(pl) << 40) + static_cast<uint64_t>(y));
        for (int x = 0; x < d.pw[pl] * bpp; ++x) {
          h = mix(h);
          if (p_.noise == "gauss") {
            float n = gauss_[h & 0xffff] * static_cast<float>(p_.sigma);
            int val = static_cast<int>(std::lround(row[x] + n));
            row[x] = static_cast<uint8_t>(val < 0 ? 0 : (val > 255 ? 255 : val));
          } else if (h < thresh) {
            row[x] = (h >> 17) & 1 ? 255 : 0;
          }
        }
      }
    });
  }
}

void SyntheticSource::pace() {
  if (!p_.realtime) return;
  if (start_ns_ == 0) start_ns_ = now_ns();
  int64_t due = start_ns_ + static_cast<int64_t>(next_ * 1e9 / p_.spec.fps.value());
  int64_t wait = due - now_ns();
  if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
}

bool SyntheticSource::read(HostFrame& dst) {
  if (p_.frames > 0 && next_ >= p_.frames) return false;
  pace();
  // Three threads (worker, completion, sink) must not wait for a core behind the render.
  if (!pool_) pool_ = std::make_unique<PoolShare>(3);
  pool_->run([&] { render(next_, dst); });
  ++next_;
  return true;
}

FramePtr SyntheticSource::next_frame() {
  if (p_.frames > 0 && next_ >= p_.frames) return nullptr;
  pace();
  FramePtr f = cached_[static_cast<size_t>(next_ % static_cast<int64_t>(cached_.size()))];
  ++next_;
  return f;
}

}  // namespace vfp
