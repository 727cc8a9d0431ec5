#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/filter_parser.hpp"
#include "stages/builtin.hpp"

using namespace vfp;

namespace {
// Returns the ParseError's position (and checks one is thrown).
size_t error_pos(const std::string& text, std::string* msg = nullptr) {
  try {
    build_stages(text);
  } catch (const ParseError& e) {
    if (msg) *msg = e.what();
    return e.pos();
  }
  ADD_FAILURE() << "no error for: " << text;
  return std::string::npos;
}

// A settings struct with one field of each option type, declared as stages declare theirs.
struct Demo {
  int radius = 0;
  double percentile = 0;
  std::string border, kernel;
  bool on = false;
};
const OptionTable<Demo>& demo_table() {
  static const OptionTable<Demo> t = [] {
    OptionTable<Demo> d;
    d.integer("radius", &Demo::radius, 1, 1, 127, "").aliases({"r"});
    d.number("percentile", &Demo::percentile, 0.5, 0, 1, "");
    d.choice("border", &Demo::border, "replicate", {"replicate", "reflect"}, "");
    d.text("kernel", &Demo::kernel, "", "");
    d.flag("on", &Demo::on, false, "");
    return d;
  }();
  return t;
}
std::vector<OptionSpec> demo_opts() { return demo_table().specs(); }
}  // namespace

TEST(FilterParser, SplitsFiltersAndOptions) {
  auto f = parse_filter_string("median=radius=2:radiusV=3,conv=gauss:size=7, null");
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].name, "median");
  ASSERT_EQ(f[0].args.size(), 2u);
  EXPECT_EQ(f[0].args[0].key, "radius");
  EXPECT_EQ(f[0].args[0].value, "2");
  EXPECT_EQ(f[0].args[1].key, "radiusV");
  EXPECT_EQ(f[1].name, "conv");
  EXPECT_EQ(f[1].args[0].key, "");  // positional
  EXPECT_EQ(f[1].args[0].value, "gauss");
  EXPECT_EQ(f[1].args[1].key, "size");
  EXPECT_EQ(f[2].name, "null");
  EXPECT_EQ(f[2].name_pos, 45u);
  EXPECT_TRUE(f[2].args.empty());
}

TEST(FilterParser, QuotesEscapesAndSpacesInValues) {
  auto f = parse_filter_string("conv=kernel=1 2 1 2 4 2 1 2 1:file='a,b:c.txt',x=a\\:b\\,c");
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].args[0].value, "1 2 1 2 4 2 1 2 1");
  EXPECT_EQ(f[0].args[1].value, "a,b:c.txt");
  EXPECT_EQ(f[1].name, "x");
  EXPECT_EQ(f[1].args[0].value, "a:b,c");
}

TEST(FilterParser, EmptyStringIsNoFilters) {
  EXPECT_TRUE(parse_filter_string("").empty());
  EXPECT_TRUE(parse_filter_string("   ").empty());
}

TEST(FilterParser, SyntaxErrorsPointAtTheCharacter) {
  EXPECT_EQ(error_pos("null,"), 4u);
  EXPECT_EQ(error_pos(",null"), 0u);
  EXPECT_EQ(error_pos("null,,null"), 5u);
  EXPECT_EQ(error_pos("format='gray"), 7u);
  EXPECT_EQ(error_pos("nu ll"), 0u);
  EXPECT_EQ(error_pos("format=x\\"), 8u);
  std::string msg;
  EXPECT_EQ(error_pos("null,f@o", &msg), 5u);
  EXPECT_NE(msg.find("not a valid filter name"), std::string::npos);
  // ffmpeg's filtergraph labels: pointed at, and said to be needless.
  EXPECT_EQ(error_pos("[0:v]median[out]", &msg), 0u);
  EXPECT_NE(msg.find("'[' starts a stream label"), std::string::npos) << msg;
  EXPECT_EQ(error_pos("median[a],conv", &msg), 6u);
}

TEST(FilterParser, UnknownFilterAndOptionArePointedAt) {
  std::string msg;
  EXPECT_EQ(error_pos("null,blur=3", &msg), 5u);
  EXPECT_NE(msg.find("unknown filter 'blur'"), std::string::npos);
  EXPECT_EQ(msg.find("container"), std::string::npos);
  // ffmpeg's -f mp4 (a container) typed as vfpipe's -f (filters): the message says which is which.
  EXPECT_EQ(error_pos("mp4", &msg), 0u);
  EXPECT_NE(msg.find("vfpipe's -f is the filter chain (ffmpeg's -vf)"), std::string::npos) << msg;
  EXPECT_EQ(error_pos("null,format=pix=gray", &msg), 12u);
  EXPECT_NE(msg.find("unknown option 'pix'"), std::string::npos);
  EXPECT_EQ(error_pos("format=gray:yuv420p", &msg), 12u);
  EXPECT_NE(msg.find("too many values"), std::string::npos);
  EXPECT_EQ(error_pos("format=pix_fmts=gray:pix_fmt=gray", &msg), 21u);
  EXPECT_NE(msg.find("given twice"), std::string::npos);
  EXPECT_EQ(error_pos("null,format=pix_fmts=gray|nv12", &msg), 21u);
  EXPECT_NE(msg.find("nv12"), std::string::npos);
}

TEST(FilterParser, BindValidatesTypesAndRanges) {
  auto specs = demo_opts();
  auto bind = [&](const std::string& t) {
    auto f = parse_filter_string(t);
    return bind_options(specs, f.at(0), t, "filter 'demo'");
  };
  Options o = bind("demo=3:0.25:reflect");
  const Demo d = demo_table().bind(o);  // typed fields from the one declaration
  EXPECT_EQ(d.radius, 3);
  EXPECT_DOUBLE_EQ(d.percentile, 0.25);
  EXPECT_EQ(d.border, "reflect");
  EXPECT_FALSE(d.on);
  EXPECT_TRUE(o.is_explicit("radius"));
  EXPECT_FALSE(o.is_explicit("on"));
  Options o2 = bind("demo=r=5:on=yes");
  const Demo d2 = demo_table().bind(o2);
  EXPECT_EQ(d2.radius, 5);
  EXPECT_TRUE(d2.on);
  EXPECT_EQ(d2.border, "replicate");  // default
  EXPECT_EQ(o2.str("on"), "1");       // normalised text

  auto pos_of = [&](const std::string& t) -> size_t {
    try {
      bind(t);
    } catch (const ParseError& e) {
      return e.pos();
    }
    return std::string::npos;
  };
  EXPECT_EQ(pos_of("demo=radius=0"), 12u);    // below range
  EXPECT_EQ(pos_of("demo=radius=2.5"), 12u);  // not an integer
  EXPECT_EQ(pos_of("demo=radius=abc"), 12u);
  EXPECT_EQ(pos_of("demo=1:percentile=2"), 18u);
  EXPECT_EQ(pos_of("demo=border=wrap"), 12u);
  EXPECT_EQ(pos_of("demo=on=maybe"), 8u);
  EXPECT_EQ(pos_of("demo=radius=2:3"), 14u);  // positional after named
  EXPECT_EQ(pos_of("demo=percentile=nan"), 16u);
}

TEST(FilterParser, BuildsRegisteredStages) {
  auto st = build_stages("null, format=pix_fmts=gray");
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0]->name(), "null");
  EXPECT_EQ(st[1]->name(), "format");
  auto aliases = build_stages("passthrough,convert=yuv444p");
  EXPECT_EQ(aliases[0]->name(), "null");
  EXPECT_EQ(aliases[1]->name(), "format");
}

TEST(FilterParser, PrettyErrorUnderlinesTheProblem) {
  try {
    build_stages("null,format=bogus");
    FAIL();
  } catch (const ParseError& e) {
    std::string p = e.pretty();
    EXPECT_NE(p.find("null,format=bogus\n"), std::string::npos);
    EXPECT_NE(p.find("\n" + std::string(14, ' ') + "^^^^^"), std::string::npos) << p;
  }
}
