// Every example filter string that `vfpipe filters NAME` prints runs as printed: through the
// real binary, on a small synthetic input, on the CPU (docs/adding-a-stage.md asks each new
// stage for examples; this keeps them true).
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "stages/builtin.hpp"
#include "test_util.hpp"

using namespace vfp;
using namespace vfp::test;

namespace {
// The -f "..." lines of `vfpipe filters NAME`.
std::vector<std::string> printed_examples(const std::string& name) {
  const CmdResult r = run_cmd(std::string(VFPIPE_BIN) + " filters " + name);
  EXPECT_EQ(r.rc, 0) << r.out;
  std::vector<std::string> out;
  std::istringstream in(r.out);
  const std::regex line(R"re(^\s+-f "(.*)"$)re");
  std::smatch m;
  for (std::string l; std::getline(in, l);)
    if (std::regex_match(l, m, line)) out.push_back(m[1]);
  return out;
}
}  // namespace

TEST(Examples, EveryPrintedFilterExampleRuns) {
  // Examples may name files: a kernel file and an output bitstream, in a folder of their own.
  const std::string dir = tmp_path("examples");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/kernel.txt") << "1 2 1\n2 4 2\n1 2 1\n";
  size_t n = 0;
  for (const StageInfo& s : registry().all()) {
    const std::vector<std::string> ex = printed_examples(s.name);
    EXPECT_EQ(ex.size(), s.examples.size()) << s.name << ": every declared example is printed";
    EXPECT_FALSE(ex.empty()) << s.name << " declares no example";
    for (const std::string& f : ex) {
      const CmdResult r = run_cmd("cd '" + dir + "' && " + VFPIPE_BIN +
                                  " run -q -d cpu -i synthetic=size=256x160:frames=2 -o null -f '" + f + "'");
      EXPECT_EQ(r.rc, 0) << s.name << ": -f \"" << f << "\"\n" << r.out;
      ++n;
    }
  }
  EXPECT_GE(n, registry().all().size());
  std::filesystem::remove_all(dir);
}
