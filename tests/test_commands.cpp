// --sendcmd files: parsing (CRLF, binary bytes, directories, order), the up-front check of
// every command against the chain, and applying commands whose frame was dropped.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.hpp"
#include "core/filter_parser.hpp"
#include "pipeline/commands.hpp"
#include "test_util.hpp"

using namespace vfp;
using namespace vfp::test;

namespace {
std::string write_file(const std::string& name, const std::string& text) {
  const std::string p = tmp_path(name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}
Chain chain_of(const std::string& filters) {
  return Chain::build(build_stages(filters), {PixelFormat::YUV420P, 64, 48, {25, 1}}, {});
}
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage) << e.what();
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Sendcmd, ParsesCrlfAndSortsByFrame) {
  const std::string p = write_file("cmds_crlf.txt", "# comment\r\n9 conv kernel=sharpen\r\n2 #0 radius=2\r\n\r\n");
  std::vector<Command> c = load_commands(p);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].frame, 2);
  EXPECT_EQ(c[0].target, "#0");
  EXPECT_EQ(c[0].args, "radius=2");
  EXPECT_EQ(c[1].args, "kernel=sharpen");  // no '\r' left
  std::remove(p.c_str());
}

TEST(Sendcmd, RejectsDirectoriesBinaryAndBadFrames) {
  EXPECT_THROW(load_commands(::testing::TempDir()), Error);
  const std::string bin = write_file("cmds_bin.txt", std::string("2 conv \x01\x1b[31mred", 16));
  const std::string msg = error_of([&] { load_commands(bin); });
  EXPECT_NE(msg.find("\\x01"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\x1b'), std::string::npos) << "raw control bytes in the message";
  const std::string big = write_file("cmds_big.txt", "99999999999999999999 conv size=3\n");
  EXPECT_NE(error_of([&] { load_commands(big); }).find("not a frame number"), std::string::npos);
  std::remove(bin.c_str());
  std::remove(big.c_str());
}

// Values the filter refuses fail before the first frame, naming the file and line.
TEST(Sendcmd, EveryCommandIsCheckedAgainstTheFilterUpFront) {
  Chain chain = chain_of("median,conv=gauss");
  const std::pair<const char*, const char*> bad[] = {
      {"3 conv size=4\n", "must be odd"},
      {"3 conv size=33\n", "31x31"},
      {"3 conv kernel='1 2 x'\n", "not a number"},
      {"3 conv planes=0\n", "planes=0"},
      {"2 conv file=/nonexistent/k.txt\n", "cannot open kernel file"},
      {"2 median radius=999\n", "radius"},
      {"2 wavelet threshold=3\n", "no filter 'wavelet'"},
      // Evolving options: the second command alone is fine, but not after the first.
      {"2 conv kernel='1 2 1 2 4 2 1 2 1'\n5 conv size=5\n", "needs 25 taps"},
  };
  for (auto [text, want] : bad) {
    const std::string p = write_file("cmds_bad.txt", text);
    std::vector<Command> c = load_commands(p);
    const std::string msg = error_of([&] { validate_commands(c, chain); });
    EXPECT_NE(msg.find(want), std::string::npos) << text << " -> " << msg;
    EXPECT_NE(msg.find("cmds_bad.txt:"), std::string::npos) << msg;
  }
  // file= replaces an earlier kernel= (and back), as a fresh filter string would.
  const std::string k = write_file("kernel3.txt", "1 2 1\n2 4 2\n1 2 1\n");
  const std::string ok = write_file("cmds_ok.txt", "2 conv file=" + k + "\n4 conv kernel=sharpen\n");
  std::vector<Command> c = load_commands(ok);
  EXPECT_NO_THROW(validate_commands(c, chain));
  for (const auto& p : {k, ok}) std::remove(p.c_str());
}

// Options that the declaration does not mark live are refused before the first frame.
TEST(Sendcmd, OptionsThatCannotChangeLiveAreRefusedUpFront) {
  Chain chain = chain_of("format=gray,mmp=lambda=40");
  for (const char* text : {"2 mmp lambda=80\n", "2 format pix_fmts=yuv444p\n"}) {
    const std::string p = write_file("cmds_fixed.txt", text);
    std::vector<Command> c = load_commands(p);
    const std::string msg = error_of([&] { validate_commands(c, chain); });
    EXPECT_NE(msg.find("cannot change while running"), std::string::npos) << text << " -> " << msg;
    std::remove(p.c_str());
  }
}

// With the live policy a frame can be dropped: its commands apply with the next frame.
TEST(Sendcmd, CommandsOfDroppedFramesApplyWithTheNextOne) {
  Chain chain = chain_of("median");
  const std::string p = write_file("cmds_drop.txt", "3 median radius=4\n");
  std::vector<Command> c = load_commands(p);
  validate_commands(c, chain);
  EXPECT_FALSE(commands_due(c, 2));  // what the engine asks before it waits for earlier frames
  apply_commands(c, 2, chain);
  EXPECT_EQ(chain.step(0).stage->options().str("radius"), "1");
  EXPECT_TRUE(commands_due(c, 5));
  apply_commands(c, 5, chain);  // frames 3 and 4 never submitted
  EXPECT_FALSE(commands_due(c, 6));
  EXPECT_EQ(chain.step(0).stage->options().str("radius"), "4");
  EXPECT_TRUE(c[0].applied);
  std::remove(p.c_str());
}

// The summary line says which commands applied from which frame and which the run ended
// before, by file and line; long lists are cut after four.
TEST(Sendcmd, SummaryNamesAppliedAndUnreachedCommands) {
  Chain chain = chain_of("median");
  EXPECT_EQ(commands_summary({}), "");
  const std::string p = write_file("cmds_summary.txt", "3 median radius=4\n50 median radius=2\n");
  std::vector<Command> c = load_commands(p);
  validate_commands(c, chain);
  apply_commands(c, 5, chain);  // frames 3 and 4 dropped: applied before frame 5
  EXPECT_EQ(commands_summary(c),
            "sendcmd: 1 of 2 commands applied: frame 5 median radius=4 (the steps above are "
            "named as the chain started); 1 not reached (the run ended before their frame): " +
                p + ":2 (frame 50 median radius=2)");
  std::string many;
  for (int f = 1; f <= 6; ++f) many += std::to_string(f) + " median radius=" + std::to_string(f) + "\n";
  const std::string q = write_file("cmds_many.txt", many);
  std::vector<Command> m = load_commands(q);
  validate_commands(m, chain);
  apply_commands(m, 6, chain);
  const std::string line = commands_summary(m);
  EXPECT_EQ(line.rfind("sendcmd: 6 of 6 commands applied: frame 6 median radius=1, frame 6 median radius=2, ", 0), 0)
      << line;
  EXPECT_NE(line.find("radius=4, ... (the steps"), std::string::npos) << line;
  EXPECT_EQ(line.find("radius=5"), std::string::npos) << line;
  std::remove(p.c_str());
  std::remove(q.c_str());
}
