// End-to-end runs of the vfpipe binary.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fcntl.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "io/open.hpp"
#include "io/y4m.hpp"
#include "test_util.hpp"

using namespace vfp;
using namespace vfp::test;

namespace {
const std::string kBin = VFPIPE_BIN;
std::string data(const std::string& n) { return std::string(VFPIPE_TEST_DATA) + "/" + n; }
bool have_ffmpeg() { return run_cmd("ffmpeg -version").rc == 0; }
}  // namespace

TEST(Cli, HelpTeachesAndExitsZero) {
  CmdResult r = run_cmd(kBin + " --help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("Examples:"), std::string::npos);
  r = run_cmd(kBin + " run --help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("--filters"), std::string::npos);
  EXPECT_NE(r.out.find("yuv4mpegpipe"), std::string::npos);
  EXPECT_EQ(run_cmd(kBin).rc, 2);  // no subcommand
  EXPECT_EQ(run_cmd(kBin + " run --bogus").rc, 2);
  EXPECT_EQ(run_cmd(kBin + " run -i x --device gpu").rc, 2);
}

TEST(Cli, FiltersListsStagesAndOptions) {
  CmdResult r = run_cmd(kBin + " filters");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("null"), std::string::npos);
  EXPECT_NE(r.out.find("format"), std::string::npos);
  r = run_cmd(kBin + " filters format");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("pix_fmts"), std::string::npos);
  EXPECT_EQ(run_cmd(kBin + " filters nosuch").rc, 2);
  EXPECT_EQ(run_cmd(kBin + " filters synthetic").rc, 0);
  EXPECT_EQ(run_cmd(kBin + " info").rc, 0);
}

TEST(Cli, InvalidFilterStringPointsAtTheCharacter) {
  CmdResult r = run_cmd(kBin + " run -i synthetic -f 'null,format=pix_fmts=gray|nv13'");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("unsupported pixel format 'nv13'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  null,format=pix_fmts=gray|nv13\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n" + std::string(2 + 21, ' ') + "^^^^^^^^^"), std::string::npos) << r.out;
}

TEST(Cli, BadInputsGiveOneClearErrorAndNonZeroExit) {
  struct Case {
    std::string args, expect;
    int rc;
  };
  std::string trunc = tmp_path("trunc.y4m");
  {
    std::ifstream in(data("testsrc2_67x45_yuv420p.y4m"), std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(trunc, std::ios::binary) << s.substr(0, s.size() - 1000);
  }
  std::string out_trunc = tmp_path("out_trunc.y4m");
  for (const Case& c : std::vector<Case>{
           {"-i /no/such/file.mp4", "not found", 1},
           {"-i /no/such/file.y4m", "cannot open input", 1},
           {"-i synthetic=size=0x0", "invalid frame size 0x0", 1},
           {"-i synthetic -o /no/such/dir/out.y4m", "cannot open output", 1},
           {"-i synthetic --pix-fmt nv12", "unsupported pixel format 'nv12'", 2},
           {"-i " + data("testsrc2_67x45_yuv420p.y4m") + " -o x.y4m --pix-fmt rgb24", "cannot take pixel format", 2},
           {"-i " + trunc + " -o " + out_trunc, "truncated Y4M: frame 4", 1},
       }) {
    CmdResult r = run_cmd(kBin + " run --no-progress " + c.args);
    EXPECT_EQ(r.rc, c.rc) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  }
  // The frames before the truncation were written and the file is complete.
  Y4mSource partial(out_trunc);
  HostFrame f(partial.spec(), false);
  int n = 0;
  while (partial.read(f)) ++n;
  EXPECT_EQ(n, 4);
  std::remove(trunc.c_str());
  std::remove(out_trunc.c_str());
}

TEST(Cli, RunWritesOutputSummaryAndReport) {
  std::string out = tmp_path("run.y4m"), rep = tmp_path("report.json");
  CmdResult r = run_cmd(kBin +
                        " run --device cpu -i 'synthetic=size=96x64:frames=20:noise=gauss' "
                        "-f 'format=gray,null' -o " +
                        out + " --report " + rep + " --report-frames");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("20 frames in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("format(yuv420p->gray)"), std::string::npos);
  EXPECT_NE(r.out.find("end-to-end"), std::string::npos);
  Y4mSource s(out);
  EXPECT_EQ(s.spec().format, PixelFormat::GRAY8);
  std::ifstream rf(rep);
  auto j = nlohmann::json::parse(rf);
  EXPECT_EQ(j["frames_out"], 20);
  EXPECT_EQ(j["frames"].size(), 20u);
  EXPECT_EQ(j["backend"], "cpu");
  std::remove(out.c_str());
  std::remove(rep.c_str());
}

TEST(Cli, Y4mThroughStdinAndStdout) {
  std::string out = tmp_path("pipe.y4m");
  CmdResult r =
      run_cmd("cat " + data("testsrc2_67x45_yuv444p.y4m") + " | " + kBin + " run -q -i - -f null -o - > " + out);
  ASSERT_EQ(r.rc, 0) << r.out;
  std::ifstream a(data("testsrc2_67x45_yuv444p.y4m"), std::ios::binary), b(out, std::ios::binary);
  std::string sa((std::istreambuf_iterator<char>(a)), {}), sb((std::istreambuf_iterator<char>(b)), {});
  EXPECT_EQ(sa.substr(sa.find('\n')), sb.substr(sb.find('\n')));  // same frames
  std::remove(out.c_str());
}

TEST(Cli, ComposesWithFfmpegPipes) {
  if (!have_ffmpeg()) GTEST_SKIP() << "ffmpeg not installed";
  std::string out = tmp_path("ff.mkv");
  // ffmpeg -> vfpipe -> ffmpeg, then compare frame checksums of input and output.
  std::string src = "-f lavfi -i testsrc2=size=161x91:rate=25 -frames:v 15 -pix_fmt yuv420p";
  CmdResult r = run_cmd("ffmpeg -v error " + src + " -f yuv4mpegpipe - | " + kBin +
                        " run -q -i - -f null -o - | ffmpeg -v error -y -i - -c:v ffv1 " + out);
  ASSERT_EQ(r.rc, 0) << r.out;
  CmdResult a = run_cmd("ffmpeg -v error " + src + " -f framemd5 -");
  CmdResult b = run_cmd("ffmpeg -v error -i " + out + " -f framemd5 -");
  auto hashes = [](const std::string& s) {
    std::vector<std::string> h;
    std::istringstream in(s);
    std::string line;
    while (std::getline(in, line))
      if (!line.empty() && line[0] != '#') h.push_back(line.substr(line.rfind(',') + 1));
    return h;
  };
  EXPECT_EQ(hashes(a.out).size(), 15u);
  EXPECT_EQ(hashes(a.out), hashes(b.out));
  std::remove(out.c_str());
}

TEST(Cli, SigintFinishesAndLeavesAPlayableFile) {
  std::string out = have_opencv() ? tmp_path("sigint.mp4") : tmp_path("sigint.y4m");
  std::string log = tmp_path("sigint.log"), progress = tmp_path("sigint.progress");
  std::remove(progress.c_str());
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(kBin.c_str(), kBin.c_str(), "run", "--device", "cpu", "--no-progress", "-progress", progress.c_str(), "-i",
          "synthetic=size=160x120:frames=0:realtime=1:rate=50", "-o", out.c_str(), nullptr);
    _exit(127);
  }
  // The signal comes once 15 frames are through (the progress file says so every 0.5 s):
  // a fixed delay left too few on a loaded machine under the sanitizers, where starting the
  // process takes most of a second.
  const auto frames_done = [&] {
    std::ifstream in(progress);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const size_t at = text.rfind("frame=");
    return at == std::string::npos ? 0 : std::atoi(text.c_str() + at + 6);
  };
  for (int waited = 0; frames_done() < 15 && waited < 30000; waited += 50)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(pid, SIGINT);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 130);
  std::ifstream lf(log);
  std::string text((std::istreambuf_iterator<char>(lf)), {});
  EXPECT_NE(text.find("stopped by signal 2"), std::string::npos) << text;
  auto src = open_source(out, {});
  HostFrame f(src->spec(), false);
  int n = 0;
  while (src->read(f)) ++n;
  EXPECT_GT(n, 10);  // at least the 15 the progress file counted before the signal
  std::remove(out.c_str());
  std::remove(log.c_str());
  std::remove(progress.c_str());
}

TEST(Cli, SendcmdChangesOptionsFromTheGivenFrame) {
  const std::string cmds = tmp_path("cmds.txt"), out = tmp_path("sendcmd.y4m"), a = tmp_path("a.y4m"),
                    b = tmp_path("b.y4m");
  std::ofstream(cmds) << "# frame filter options\n5 conv kernel=box:size=5\n7 #0 radius=2\n";
  const std::string src = " run -q --device cpu -i 'synthetic=size=96x64:frames=10:noise=gauss' ";
  ASSERT_EQ(run_cmd(kBin + src + "-f 'median,conv=identity' --sendcmd " + cmds + " -o " + out).rc, 0);
  ASSERT_EQ(run_cmd(kBin + src + "-f 'median,conv=identity' -o " + a).rc, 0);
  ASSERT_EQ(run_cmd(kBin + src + "-f 'median,conv=box:size=5' -o " + b).rc, 0);
  const std::string c = tmp_path("c.y4m");
  ASSERT_EQ(run_cmd(kBin + src + "-f 'median=radius=2,conv=box:size=5' -o " + c).rc, 0);
  Y4mSource so(out), sa(a), sb(b), sc(c);
  HostFrame fo(so.spec(), false), fa(so.spec(), false), fb(so.spec(), false), fc(so.spec(), false);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(so.read(fo) && sa.read(fa) && sb.read(fb) && sc.read(fc));
    const HostFrame& want = i < 5 ? fa : (i < 7 ? fb : fc);
    EXPECT_TRUE(fo.same_pixels(want)) << "frame " << i;
  }
  // The summary names what applied; a command past the input's end is a warning, not lost.
  std::ofstream(cmds) << "5 conv kernel=box:size=5\n70 #0 radius=2\n";
  CmdResult r = run_cmd(kBin + " run --device cpu -i 'synthetic=size=96x64:frames=10:noise=gauss' " +
                        "-f 'median,conv=identity' --sendcmd " + cmds + " -o null");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("warning: sendcmd: 1 of 2 commands applied: frame 5 conv kernel=box:size=5"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("1 not reached (the run ended before their frame): " + cmds + ":2 (frame 70 #0 radius=2)"),
            std::string::npos)
      << r.out;
  // Mistakes in the file are reported with file:line before anything runs.
  std::ofstream(cmds) << "3 conv kernal=box\n";
  r = run_cmd(kBin + src + "-f conv --sendcmd " + cmds + " -o " + out + " -y");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find(cmds + ":1: unknown option 'kernal'"), std::string::npos) << r.out;
  std::ofstream(cmds) << "3 blur radius=1\n";
  r = run_cmd(kBin + src + "-f conv --sendcmd " + cmds + " -o " + out + " -y");
  EXPECT_NE(r.out.find("no filter 'blur' in the chain"), std::string::npos) << r.out;
  for (const auto& f : {cmds, out, a, b, c}) std::remove(f.c_str());
}

// NaN and infinity pass CLI11's range checks (every comparison with NaN is false): every
// floating-point option must reject them with one line and status 2, never crash.
TEST(Cli, NonFiniteNumbersAreUsageErrors) {
  const std::string out = tmp_path("nan.mmp");
  for (const std::string args : {" mmp encode 'synthetic=size=16x16:frames=1' --lambda nan -o " + out,
                                 " mmp encode 'synthetic=size=16x16:frames=1' --lambda -nan -o " + out,
                                 " mmp encode 'synthetic=size=16x16:frames=1' --lambda inf -o " + out,
                                 std::string(" run -i synthetic=size=16x16:frames=1 --fps nan -o null"),
                                 std::string(" run -i synthetic=size=16x16:frames=1 --fps 1e999 -o null"),
                                 std::string(" --threads 2 run -i synthetic=size=16x16:frames=1 --g2g-period -inf"),
                                 std::string(" profile --compare a.json b.json --fail-above nan")}) {
    CmdResult r = run_cmd(kBin + args);
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("vfpipe: error:"), std::string::npos) << args << "\n" << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(Cli, ThreadsOptionSetsThePool) {
  CmdResult r = run_cmd(kBin + " --threads 3 info");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("CPU pool: 3 threads"), std::string::npos) << r.out;
  r = run_cmd(kBin + " info --threads 1");  // after the subcommand too
  EXPECT_NE(r.out.find("CPU pool: 1 threads"), std::string::npos) << r.out;
  EXPECT_EQ(run_cmd(kBin + " --threads -1 info").rc, 2);
  // The same bytes with one thread and with several.
  const std::string a = tmp_path("threads1.y4m"), b = tmp_path("threads3.y4m");
  const std::string common =
      " run -q --no-progress --device cpu -i 'synthetic=size=333x201:frames=3:noise=gauss' "
      "-f 'median=radius=2,conv=gauss:size=5,wavelet=db4:levels=2' -o ";
  ASSERT_EQ(run_cmd(kBin + " --threads 1" + common + a).rc, 0);
  ASSERT_EQ(run_cmd(kBin + " --threads 3" + common + b).rc, 0);
  EXPECT_EQ(run_cmd("cmp " + a + " " + b).rc, 0);
  std::remove(a.c_str());
  std::remove(b.c_str());
}

// Large buffers ask for the memory first: a clear error and status 1 instead of the OOM
// killer (cache=4096 at 4K needs 50 GB) or a crash under an address-space limit.
TEST(Cli, MemoryHungryRequestsFailClearly) {
  // 4096 frames of 16384x8192 yuv420p: 786 GiB, more than any machine here.
  CmdResult r = run_cmd(kBin + " run -q -i synthetic=size=16384x8192:frames=1:cache=4096 -o null");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("not enough memory for synthetic cache=4096"), std::string::npos) << r.out;
  if (!VFPIPE_ASAN) {  // AddressSanitizer's shadow memory needs more address space than that
    r = run_cmd("ulimit -v 700000; " + kBin + " run -q --device cpu -i synthetic=size=4k:frames=1:cache=64 -o null");
    EXPECT_EQ(r.rc, 1) << r.out;
    EXPECT_NE(r.out.find("not enough memory"), std::string::npos) << r.out;
  }
  EXPECT_THROW(check_host_memory(size_t(1) << 60, "a test"), Error);
  EXPECT_NO_THROW(check_host_memory(1 << 20, "a test"));
}

// `live` plays a file (here the synthetic source, which keeps no time of its own) at its
// frame rate, as a player does, so its frames are shown, not dropped; --no-realtime reads
// it as fast as the chain goes; -re paces `run` too.
TEST(Cli, LivePlaysAFileAtItsRate) {
  auto timed = [](const std::string& cmd, double* seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    CmdResult r = run_cmd(cmd);
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  };
  double s = 0;
  CmdResult r = timed(kBin + " live --no-display -i synthetic=size=32x16:frames=6:rate=20 -o null", &s);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_GE(s, 0.25) << r.out;  // frame 5 at 5 / 20 s
  EXPECT_NE(r.out.find("at its 20 frames/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("6 frames in"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("dropped"), std::string::npos) << r.out;
  // Paced, 40 frames at 2 frames/s would take 19.5 s.
  r = timed(kBin + " live --no-display --no-realtime -i synthetic=size=32x16:frames=40:rate=2 -o null", &s);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_LT(s, 10) << r.out;
  r = timed(kBin + " run -re -i synthetic=size=32x16:frames=6:rate=20 -o null", &s);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_GE(s, 0.25) << r.out;
  r = run_cmd(kBin + " run -re --no-realtime -i synthetic=size=32x16:frames=1 -o null");
  EXPECT_EQ(r.rc, 2) << r.out;
}

// ffmpeg habits are accepted: -hide_banner, -nostdin and -stats, which mean nothing here
// (CLI11 alone would read -hide_banner as -h -i -d ...), -filter:v for -vf, -threads N for
// the codecs' threads (not -t hreads).
TEST(Cli, FfmpegHabitsWithoutMeaningAreAccepted) {
  const CmdResult r = run_cmd(
      kBin + " run -hide_banner -nostdin -stats -threads 2 -i synthetic=size=32x16:frames=3 -filter:v median -o null");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("median(3x3)"), std::string::npos) << r.out;
  EXPECT_EQ(run_cmd(kBin + " -hide_banner info").rc, 0);
  // -i names the input of every command, as in ffmpeg, besides the positional input.
  const std::string mmp = tmp_path("habits.mmp");
  const CmdResult e = run_cmd(kBin + " mmp encode -y -i synthetic=size=16x16:frames=1 -o " + mmp);
  ASSERT_EQ(e.rc, 0) << e.out;
  EXPECT_EQ(run_cmd(kBin + " mmp info -i " + mmp).rc, 0);
  EXPECT_EQ(run_cmd(kBin + " mmp decode -y -i " + mmp + " -o " + mmp + ".y4m").rc, 0);
  EXPECT_EQ(run_cmd(kBin + " compress -y -i " + mmp + ".y4m").rc, 0);
  for (const std::string& f : {mmp, mmp + ".y4m", mmp + ".y4m.gz"}) std::remove(f.c_str());
}

// ffmpeg options whose meaning vfpipe lacks are refused in one plain line (not as CLI11's
// reading of -vn as -v -n), and camera options are not dropped silently on other inputs.
TEST(Cli, FfmpegOptionsWithoutAMeaningHereAreRefusedPlainly) {
  const std::string in = " -i synthetic=size=32x16:frames=3";
  const struct {
    const char* args;
    const char* says;
  } cases[] = {{" -vn -o null", "-vn: vfpipe writes the video it filters"},
               {" -s 16x8 -o null", "-s: vfpipe does not scale frames"},
               {" --size 16x8 -o null", "--size asks a camera for a capture size"},
               {" --fps 10 -o null", "--fps sets an image sequence's rate or asks a camera for one"},
               {" -c copy -o null", "-c copy: vfpipe encodes the video it filters"},
               {" -ss 1 -o null", "-ss 1: the input has 3 frames (0.12 s at 25 fps), so nothing is left"},
               {" -t 0 -o null", "-t 0: an empty time window"},
               {" -i synthetic -o null", "-i given 2 times: vfpipe run filters one input"},
               {" -loop 1 -o null", "-loop: vfpipe reads its input once"},
               {" -o null out.y4m", "two outputs, -o null and out.y4m"},
               {" -codec copy -o null", "-codec copy: vfpipe encodes the video it filters"}};
  for (const auto& c : cases) {
    const CmdResult r = run_cmd(kBin + " run" + in + c.args);
    EXPECT_EQ(r.rc, 2) << c.args << ": " << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("not expected"), std::string::npos) << r.out;
  }
  CmdResult r = run_cmd(kBin + " run -i synthetic=size=32x16:frames=30 -vframes 4 -o null");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("4 frames in"), std::string::npos) << r.out;
  // -c NAME is the video's encoder (the only stream vfpipe encodes); -c:s too is said unused.
  r = run_cmd(kBin + " run -i synthetic=size=32x16:frames=1 -c ffv1 -c:s mov_text -o null");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("-c:v, -c:s: the null output writes no encoded video"), std::string::npos) << r.out;
  // The output last, without -o, as ffmpeg takes it.
  const std::string y4m = tmp_path("habit.y4m");
  r = run_cmd(kBin + " run -q -i synthetic=size=32x16:frames=3:rate=10 -f median " + y4m);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(read_file(y4m).rfind("YUV4MPEG2 W32 H16 F10:1 ", 0), 0u);
  // -framerate is an image sequence's rate (reading images needs OpenCV).
  if (have_opencv()) {
    const std::string seq = tmp_path("habit_%03d.png");
    ASSERT_EQ(run_cmd(kBin + " run -q -i synthetic=size=32x16:frames=3 " + seq).rc, 0);
    r = run_cmd(kBin + " run -q -y -framerate 12 -i " + seq + " -f median " + y4m);
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(read_file(y4m).rfind("YUV4MPEG2 W32 H16 F12:1 ", 0), 0u);
    for (int i = 0; i < 3; ++i) std::remove(log::format(seq.c_str(), i).c_str());
  }
  std::remove(y4m.c_str());
  // ffmpeg's -f null - is vfpipe's null filter and Y4M on stdout: on a terminal (script(1)
  // gives the run one) that is refused, not written; through a pipe it is the frames.
  if (run_cmd("script --version").rc == 0) {
    r = run_cmd("script -qec '" + kBin + " run -i synthetic=size=16x16:frames=1 -f null -' /dev/null");
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find("Y4M on stdout, which is a terminal here"), std::string::npos) << r.out;
  }
  r = run_cmd(kBin + " run -q -i synthetic=size=16x16:frames=1 -f null - | head -c 9");
  EXPECT_EQ(r.out, "YUV4MPEG2");
}

// A video file's encoder options given for an output without an encoder (Y4M, null) are
// said to be ignored, as ffmpeg warns of options no stream used.
TEST(Cli, VideoFileOptionsOnOtherOutputsAreSaid) {
  const std::string y4m = tmp_path("unused.y4m");
  CmdResult r = run_cmd(kBin + " run -y -i synthetic=size=16x16:frames=1 -crf 20 -preset fast -o " + y4m);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("-crf, -preset: '" + y4m + "' writes no encoded video and ignores them"), std::string::npos)
      << r.out;
  r = run_cmd(kBin + " run -i synthetic=size=16x16:frames=1 -tune film");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("the null output writes no encoded video and ignores it"), std::string::npos) << r.out;
  r = run_cmd(kBin + " run -y -i synthetic=size=16x16:frames=1 -o " + y4m);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("ignores"), std::string::npos) << r.out;
  std::remove(y4m.c_str());
}

// Rough edges a new user met: each gives one clear line and the right status.
TEST(Cli, RoughEdgesGiveClearErrors) {
  CmdResult r = run_cmd(kBin + " compress " + ::testing::TempDir());
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("is a directory"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  // live's documented default input is camera=0 (none here: a camera error, not a usage one).
  r = run_cmd(kBin + " live --no-display -n 1 -q");
  EXPECT_EQ(r.out.find("--input is required"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("camera"), std::string::npos) << r.out;
  // A frame rate a Y4M header cannot carry is refused up front.
  r = run_cmd(kBin + " run -i synthetic=size=16x16:frames=1 --fps 1e308 -o null");
  EXPECT_EQ(r.rc, 2) << r.out;
}

// -progress FILE: ffmpeg's machine-readable progress, ending with progress=end and the
// frame count.
TEST(Cli, ProgressFileForScripts) {
  const std::string file = tmp_path("progress.txt");
  const CmdResult r =
      run_cmd(kBin + " run -q --device cpu -i synthetic=size=64x48:rate=25:frames=30 -f median -progress " + file);
  ASSERT_EQ(r.rc, 0) << r.out;
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t last = text.rfind("frame=");
  ASSERT_NE(last, std::string::npos) << text;
  const std::string block = text.substr(last);
  EXPECT_EQ(block.find("frame=30\n"), 0u) << block;
  EXPECT_NE(block.find("out_time_us=1200000\n"), std::string::npos) << block;
  EXPECT_NE(block.find("progress=end\n"), std::string::npos) << block;
  std::remove(file.c_str());
}
