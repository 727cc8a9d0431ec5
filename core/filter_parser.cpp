#include "core/filter_parser.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iterator>

#include "core/error.hpp"
#include "core/log.hpp"

namespace vfp {

namespace {

class Lexer {
 public:
  explicit Lexer(const std::string& t) : t_(t) {}
  bool done() const { return i_ >= t_.size(); }
  char peek() const { return done() ? '\0' : t_[i_]; }
  size_t pos() const { return i_; }
  void skip_ws() {
    while (!done() && std::isspace(static_cast<unsigned char>(t_[i_]))) ++i_;
  }
  // Reads a token up to one of `stops` (unescaped, unquoted). Returns unescaped text.
  std::string token(const char* stops, size_t* start, size_t* len) {
    *start = i_;
    std::string out;
    while (!done()) {
      char c = t_[i_];
      if (c == '\\') {
        if (i_ + 1 >= t_.size()) throw ParseError("invalid filter string: '\\' at the end escapes nothing", t_, i_);
        out += t_[i_ + 1];
        i_ += 2;
        continue;
      }
      if (c == '\'') {
        size_t q = i_;
        ++i_;
        while (!done() && t_[i_] != '\'') out += t_[i_++];
        if (done()) throw ParseError("invalid filter string: unterminated quote", t_, q);
        ++i_;
        continue;
      }
      bool stop = false;
      for (const char* s = stops; *s; ++s)
        if (c == *s) stop = true;
      if (stop) break;
      out += c;
      ++i_;
    }
    *len = i_ - *start;
    return out;
  }
  void advance() { ++i_; }

 private:
  const std::string& t_;
  size_t i_ = 0;
};

std::string trim(const std::string& s, size_t* lead) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  if (lead) *lead = a;
  return s.substr(a, b - a);
}

bool valid_name(const std::string& n) {
  if (n.empty()) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string r;
  for (size_t i = 0; i < v.size(); ++i) r += (i ? sep : "") + v[i];
  return r;
}

// Normalises and checks one value against its spec; throws ParseError at the value.
std::string check_value(const OptionSpec& o, const FilterArg& a, const std::string& text, const std::string& what) {
  const std::string& v = a.value;
  auto fail = [&](const std::string& why) {
    throw ParseError(log::format("invalid value '%s' for option '%s' of %s: %s", v.c_str(), o.name.c_str(),
                                 what.c_str(), why.c_str()),
                     text, a.value_pos, a.value_len);
  };
  switch (o.type) {
    case OptionSpec::Type::Int: {
      errno = 0;
      char* end = nullptr;
      long long x = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno == ERANGE) fail("expected an integer");
      if (x < o.min || x > o.max) fail(log::format("out of range %g..%g", o.min, o.max));
      return std::to_string(x);
    }
    case OptionSpec::Type::Float: {
      errno = 0;
      char* end = nullptr;
      double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x)) fail("expected a number");
      if (x < o.min || x > o.max) fail(log::format("out of range %g..%g", o.min, o.max));
      return v;
    }
    case OptionSpec::Type::Choice:
      for (const auto& c : o.choices)
        if (c == v) return v;
      fail("expected one of " + join(o.choices, ", "));
      break;
    case OptionSpec::Type::Bool:
      if (v == "1" || v == "true" || v == "yes" || v == "on") return "1";
      if (v == "0" || v == "false" || v == "no" || v == "off") return "0";
      fail("expected a boolean (1/0, true/false, yes/no, on/off)");
      break;
    case OptionSpec::Type::String:
      return v;
  }
  return v;
}

}  // namespace

std::vector<FilterSpec> parse_filter_string(const std::string& text) {
  std::vector<FilterSpec> out;
  if (trim(text, nullptr).empty()) return out;
  Lexer lx(text);
  while (true) {
    FilterSpec f;
    size_t start, len, lead;
    std::string raw = lx.token("=,", &start, &len);
    f.name = trim(raw, &lead);
    f.name_pos = start + lead;
    if (f.name.empty()) throw ParseError("invalid filter string: expected a filter name", text, start);
    if (!valid_name(f.name)) {
      // ffmpeg's filtergraph labels ([0:v]median[out]): a linear chain needs none.
      const size_t label = f.name.find('[');
      if (label != std::string::npos)
        throw ParseError(
            "invalid filter string: '[' starts a stream label, which vfpipe's chain does not take (it "
            "is one linear chain from the input's video to the output: write median,conv=gauss)",
            text, f.name_pos + label, 1);
      throw ParseError("invalid filter string: '" + f.name + "' is not a valid filter name", text, f.name_pos,
                       f.name.size());
    }
    if (lx.peek() == '=') {
      lx.advance();
      bool seen_named = false;
      while (true) {
        FilterArg a;
        size_t s1, l1;
        std::string first = lx.token("=:,", &s1, &l1);
        if (lx.peek() == '=') {
          lx.advance();
          size_t klead;
          a.key = trim(first, &klead);
          a.key_pos = s1 + klead;
          if (!valid_name(a.key))
            throw ParseError("invalid filter string: bad option name '" + a.key + "' in '" + f.name + "'", text, s1,
                             l1);
          a.value = lx.token(":,", &a.value_pos, &a.value_len);
          seen_named = true;
        } else {
          a.value = first;
          a.value_pos = s1;
          a.value_len = l1;
          a.key_pos = s1;
          if (seen_named)
            throw ParseError(
                "invalid filter string: positional value '" + first + "' after a named option in '" + f.name + "'",
                text, s1, l1);
        }
        f.args.push_back(std::move(a));
        if (lx.peek() == ':') {
          lx.advance();
          continue;
        }
        break;
      }
    }
    out.push_back(std::move(f));
    if (lx.done()) break;
    if (lx.peek() == ',') {
      lx.advance();
      if (lx.done())
        throw ParseError("invalid filter string: trailing ',' with no filter after it", text, text.size() - 1);
      continue;
    }
    throw ParseError(log::format("invalid filter string: unexpected '%c'", lx.peek()), text, lx.pos());
  }
  return out;
}

Options bind_options(const std::vector<OptionSpec>& specs, const FilterSpec& f, const std::string& text,
                     const std::string& what) {
  Options opts;
  std::vector<bool> given(specs.size(), false);
  size_t positional = 0;
  for (const auto& a : f.args) {
    int idx = -1;
    if (a.key.empty()) {
      if (positional >= specs.size())
        throw ParseError(log::format("too many values for %s (it takes %zu option%s)", what.c_str(), specs.size(),
                                     specs.size() == 1 ? "" : "s"),
                         text, a.value_pos, a.value_len);
      idx = static_cast<int>(positional++);
    } else {
      for (size_t i = 0; i < specs.size() && idx < 0; ++i) {
        if (specs[i].name == a.key) idx = static_cast<int>(i);
        for (const auto& al : specs[i].alias_names)
          if (al == a.key) idx = static_cast<int>(i);
      }
      if (idx < 0) {
        std::vector<std::string> names;
        for (const auto& s : specs) names.push_back(s.name);
        throw ParseError(log::format("unknown option '%s' for %s (options: %s)", a.key.c_str(), what.c_str(),
                                     names.empty() ? "none" : join(names, ", ").c_str()),
                         text, a.key_pos, a.key.size());
      }
    }
    const OptionSpec& o = specs[static_cast<size_t>(idx)];
    if (given[static_cast<size_t>(idx)])
      throw ParseError("option '" + o.name + "' given twice for " + what, text, a.key_pos,
                       a.key.empty() ? a.value_len : a.key.size());
    given[static_cast<size_t>(idx)] = true;
    opts.set(o.name, check_value(o, a, text, what), true);
  }
  for (size_t i = 0; i < specs.size(); ++i)
    if (!given[i]) opts.set(specs[i].name, specs[i].default_value, false);
  return opts;
}

std::vector<std::unique_ptr<Stage>> build_stages(const std::string& text, const Registry& reg) {
  std::vector<std::unique_ptr<Stage>> stages;
  for (const auto& f : parse_filter_string(text)) {
    const StageInfo* info = reg.find(f.name);
    if (!info) {
      std::vector<std::string> names;
      for (const auto& s : reg.all()) names.push_back(s.name);
      // ffmpeg's -f names the container; vfpipe's -f is the filter chain (ffmpeg's -vf).
      static const char* const kContainers[] = {"mp4",    "mov", "mkv",          "matroska", "webm",
                                                "avi",    "y4m", "yuv4mpegpipe", "rawvideo", "image2",
                                                "mpegts", "flv", "gif",          "png",      "h264"};
      const bool container = std::find_if(std::begin(kContainers), std::end(kContainers),
                                          [&](const char* c) { return f.name == c; }) != std::end(kContainers);
      throw ParseError(
          log::format("unknown filter '%s' (available: %s; see 'vfpipe filters')%s", f.name.c_str(),
                      join(names, ", ").c_str(),
                      container ? ". vfpipe's -f is the filter chain (ffmpeg's -vf): the output's container "
                                  "comes from its file name (-o out.mp4)"
                                : ""),
          text, f.name_pos, f.name.size());
    }
    Options opts = bind_options(info->options, f, text, "filter '" + info->name + "'");
    std::unique_ptr<Stage> st;
    try {
      st = reg.create(*info, opts);
    } catch (const ParseError&) {
      throw;
    } catch (const OptionError& e) {
      // Point at the value of the option the stage rejected (named or positional).
      size_t positional = 0;
      for (const auto& a : f.args) {
        std::string key = a.key;
        if (key.empty() && positional < info->options.size()) key = info->options[positional++].name;
        bool match = key == e.option();
        for (const auto& o : info->options)
          if (o.name == e.option())
            for (const auto& al : o.alias_names) match = match || key == al;
        if (match) throw ParseError(e.what(), text, a.value_pos, a.value_len);
      }
      throw ParseError(e.what(), text, f.name_pos, f.name.size());
    } catch (const Error& e) {
      // Semantic errors raised by the stage (e.g. inconsistent options) point at the filter.
      throw ParseError(std::string(e.what()), text, f.name_pos, f.name.size());
    }
    stages.push_back(std::move(st));
  }
  return stages;
}

}  // namespace vfp
