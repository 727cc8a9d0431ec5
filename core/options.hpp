// Stage options: each stage declares its options once, bound to fields of its settings
// struct (FFmpeg's AVOption tables work the same way). The one declaration serves the
// filter-string parser, `vfpipe filters NAME`, --sendcmd and the display's live keys.
//
//   struct MedianSettings { int radius = 1; double percentile = 0.5; Border border; ... };
//   OptionTable<MedianSettings> t(Live::Yes);
//   t.integer("radius", &MedianSettings::radius, 1, 1, 127, "horizontal radius").aliases({"r"});
//   t.choice("border", &MedianSettings::border, Border::Replicate, {Border::Replicate, ...}, border_name, "...");
//   MedianSettings s = t.bind(options);   // every field from the validated values
#pragma once
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

namespace vfp {

struct OptionSpec {
  enum class Type { Int, Float, String, Choice, Bool };
  std::string name;
  Type type = Type::String;
  std::string default_value;  // textual; "" means "unset" for String options
  std::string help;
  double min = 0, max = 0;               // inclusive range for Int/Float
  std::vector<std::string> choices;      // Choice values
  std::vector<std::string> alias_names;  // other accepted keys (ffmpeg spellings)
  // Options this one replaces: when a live change (--sendcmd) gives this option, these go
  // back to their defaults (conv's file= and kernel= say the same thing two ways).
  std::vector<std::string> excluded = {};
  bool live = false;  // may change while the stream runs (--sendcmd, the display's keys)
  // Writes a validated value (as the parser normalised it) into the bound field of the
  // settings struct `settings` points to.
  std::function<void(void* settings, const std::string& value)> store = {};

  OptionSpec& aliases(std::vector<std::string> a) {
    alias_names = std::move(a);
    return *this;
  }
  OptionSpec& excludes(std::vector<std::string> e) {
    excluded = std::move(e);
    return *this;
  }
  OptionSpec& fixed() {  // cannot change while running, even in a live table
    live = false;
    return *this;
  }
};

// Validated option values of one stage instance, by canonical option name, as text (what
// the user wrote, normalised): kept for live merges, reports and the display.
class Options {
 public:
  void set(const std::string& name, const std::string& value, bool explicit_value);
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  bool is_explicit(const std::string& name) const;  // given by the user, not a default
  const std::string& str(const std::string& name) const;
  const std::map<std::string, std::string>& all() const { return values_; }
  std::string to_string() const;  // "key=value:key=value" of explicit values

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> explicit_;
};

std::string format_option_number(double v);  // "%g", as defaults are shown

enum class Live { No, Yes };

// The declaration of a settings struct S's options, in positional order.
template <class S>
class OptionTable {
 public:
  explicit OptionTable(Live live = Live::No) : live_(live == Live::Yes) {}

  // Fields may belong to a base of S (C): settings that extend a kernel's parameter struct.
  template <class T, class C>
  OptionSpec& integer(const char* name, T C::*field, long long def, double lo, double hi, std::string help) {
    static_assert(std::is_base_of<C, S>::value, "the field must belong to the settings struct");
    return add(name, OptionSpec::Type::Int, std::to_string(def), help, lo, hi, {}, [field](S& s, const std::string& v) {
      static_cast<C&>(s).*field = static_cast<T>(std::strtoll(v.c_str(), nullptr, 10));
    });
  }
  template <class T, class C>
  OptionSpec& number(const char* name, T C::*field, double def, double lo, double hi, std::string help) {
    static_assert(std::is_base_of<C, S>::value, "the field must belong to the settings struct");
    return add(name, OptionSpec::Type::Float, format_option_number(def), help, lo, hi, {},
               [field](S& s, const std::string& v) {
                 static_cast<C&>(s).*field = static_cast<T>(std::strtod(v.c_str(), nullptr));
               });
  }
  OptionSpec& text(const char* name, std::string S::*field, const std::string& def, std::string help) {
    return add(name, OptionSpec::Type::String, def, help, 0, 0, {},
               [field](S& s, const std::string& v) { s.*field = v; });
  }
  OptionSpec& flag(const char* name, bool S::*field, bool def, std::string help) {
    return add(name, OptionSpec::Type::Bool, def ? "1" : "0", help, 0, 0, {},
               [field](S& s, const std::string& v) { s.*field = v == "1"; });
  }
  // One of `values`, kept as its name.
  OptionSpec& choice(const char* name, std::string S::*field, const std::string& def, std::vector<std::string> values,
                     std::string help) {
    return add(name, OptionSpec::Type::Choice, def, help, 0, 0, std::move(values),
               [field](S& s, const std::string& v) { s.*field = v; });
  }
  // One of `values` of an enum, named by `name_of`.
  template <class E, class C>
  OptionSpec& choice(const char* name, E C::*field, E def, const std::vector<E>& values, const char* (*name_of)(E),
                     std::string help) {
    static_assert(std::is_base_of<C, S>::value, "the field must belong to the settings struct");
    std::vector<std::string> names;
    for (E e : values) names.push_back(name_of(e));
    return add(name, OptionSpec::Type::Choice, name_of(def), help, 0, 0, std::move(names),
               [field, values, name_of](S& s, const std::string& v) {
                 for (E e : values)
                   if (v == name_of(e)) static_cast<C&>(s).*field = e;
               });
  }

  const std::vector<OptionSpec>& specs() const { return specs_; }
  // The settings with every declared option's value (defaults where not given).
  S bind(const Options& o) const {
    S s{};
    for (const OptionSpec& spec : specs_) spec.store(&s, o.str(spec.name));
    return s;
  }

 private:
  OptionSpec& add(const char* name, OptionSpec::Type type, std::string def, std::string help, double lo, double hi,
                  std::vector<std::string> choices, std::function<void(S&, const std::string&)> store) {
    OptionSpec o;
    o.name = name;
    o.type = type;
    o.default_value = std::move(def);
    o.help = help;
    o.min = lo;
    o.max = hi;
    o.choices = std::move(choices);
    o.live = live_;
    o.store = [store](void* p, const std::string& v) { store(*static_cast<S*>(p), v); };
    specs_.push_back(std::move(o));
    return specs_.back();
  }
  bool live_;
  std::vector<OptionSpec> specs_;
};

}  // namespace vfp
