// vfpipe batch: the item list, templates, shards, GPU selection, the ledger and the runner
// (with a stand-in for the pipeline that writes files), then the binary end to end.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "batch/items.hpp"
#include "batch/ledger.hpp"
#include "batch/runner.hpp"
#include "batch/slurm.hpp"
#include "core/error.hpp"
#include "test_util.hpp"

using namespace vfp;
using namespace vfp::batch;
using namespace vfp::test;
namespace fs = std::filesystem;

namespace {

const std::string kBin = VFPIPE_BIN;

// A fresh folder for one test.
struct Folder {
  explicit Folder(const std::string& name) : path(tmp_path("batch_" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Folder() { fs::remove_all(path); }
  std::string operator/(const std::string& rel) const { return path + "/" + rel; }
  std::string path;
};

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}
// The ledger's records. Read while a batch writes it, the last line may be half written:
// `torn_ok` skips such a line, as vfpipe's own reader does.
std::vector<nlohmann::json> ledger_lines(const std::string& path, bool torn_ok = false) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const std::exception&) {
      if (!torn_ok) throw;
    }
  }
  return out;
}
// Files under `dir` whose name contains `part`.
std::vector<std::string> find(const std::string& dir, const std::string& part) {
  std::vector<std::string> out;
  for (auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().find(part) != std::string::npos) out.push_back(e.path().string());
  return out;
}

std::vector<std::string> inputs_of(const std::vector<Item>& items) {
  std::vector<std::string> v;
  for (const Item& it : items) v.push_back(it.input);
  return v;
}

}  // namespace

// ---------------------------------------------------------------- items

TEST(BatchItems, FoldersAreWalkedSortedWithTheirRelativeFolders) {
  Folder d("walk");
  write(d / "in/b.mp4", "bb");
  write(d / "in/a.MKV", "a");
  write(d / "in/sub/deep/c.y4m", "ccc");
  write(d / "in/notes.txt", "x");
  write(d / "in/.hidden.mp4", "x");
  write(d / "in/.vfpipe-part.x/y.mp4", "x");
  std::istringstream none;
  auto items = collect({d / "in"}, {}, {}, none);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].input, d / "in/a.MKV");  // extensions match without case
  EXPECT_EQ(items[1].input, d / "in/b.mp4");
  EXPECT_EQ(items[2].input, d / "in/sub/deep/c.y4m");
  EXPECT_EQ(items[2].relpath, "sub/deep");
  EXPECT_EQ(items[0].relpath, "");
  EXPECT_EQ(items[2].bytes, 3);
  EXPECT_EQ(items[2].index, 2);

  CollectOptions only_mp4;
  only_mp4.extensions = {"mp4"};
  EXPECT_EQ(collect({d / "in"}, {}, only_mp4, none).size(), 1u);
  CollectOptions flat;
  flat.recursive = false;
  EXPECT_EQ(collect({d / "in"}, {}, flat, none).size(), 2u);
}

TEST(BatchItems, GlobsListsAndStdin) {
  Folder d("lists");
  write(d / "v/x/1.mp4", "1");
  write(d / "v/y/2.mp4", "22");
  write(d / "v/y/3.mov", "333");
  std::istringstream none;
  auto g = collect({d / "v/*/*.mp4"}, {}, {}, none);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].relpath, "x");  // relative to the glob's fixed part
  EXPECT_EQ(g[1].relpath, "y");

  // Plain list: comments, blanks, CRLF, paths relative to the list's folder.
  write(d / "plain.txt", "# clips\r\nv/x/1.mp4\r\n\r\n  v/y/3.mov  \n");
  auto p = collect({}, {d / "plain.txt"}, {}, none);
  EXPECT_EQ(inputs_of(p), (std::vector<std::string>{d / "v/x/1.mp4", d / "v/y/3.mov"}));

  // CSV with per-item options, quoting, empty cells.
  write(d / "jobs.csv", "input,filters,crf\n\"v/x/1.mp4\",\"median=radius=2,conv=gauss\",20\nv/y/2.mp4,,\n");
  auto c = collect({}, {d / "jobs.csv"}, {}, none);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].options["filters"], "median=radius=2,conv=gauss");
  EXPECT_EQ(c[0].options["crf"], 20);
  EXPECT_TRUE(c[1].options.empty());

  // JSON Lines.
  write(d / "jobs.jsonl", "{\"input\": \"v/y/3.mov\", \"ss\": 1.5, \"an\": true}\n");
  auto j = collect({}, {d / "jobs.jsonl"}, {}, none);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_DOUBLE_EQ(j[0].options["ss"].get<double>(), 1.5);
  EXPECT_EQ(j[0].options["an"], true);

  // "-": a list on stdin; duplicates are kept once.
  std::istringstream in(d / "v/x/1.mp4\n" + d / "v/x/1.mp4\n");
  EXPECT_EQ(collect({"-", d / "v/x/1.mp4"}, {}, {}, in).size(), 1u);
}

TEST(BatchItems, BadListsAndInputsSayWhere) {
  Folder d("badlists");
  std::istringstream none;
  const auto message = [&](const std::vector<std::string>& in, const std::vector<std::string>& lists) {
    try {
      collect(in, lists, {}, none);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({d / "missing.mp4"}, {}).find("no such file"), std::string::npos);
  EXPECT_NE(message({d / "*.nothing"}, {}).find("matches no file"), std::string::npos);
  write(d / "a.csv", "path,crf\nx.mp4,2\n");
  EXPECT_NE(message({}, {d / "a.csv"}).find("a.csv:1: the header row has no 'input' column"), std::string::npos);
  write(d / "b.csv", "input,crf\nx.mp4,2,3\n");
  EXPECT_NE(message({}, {d / "b.csv"}).find("b.csv:2: 3 fields, the header has 2"), std::string::npos);
  write(d / "c.jsonl", "{\"input\": \"x.mp4\"}\n{\"input\": 3}\n");
  EXPECT_NE(message({}, {d / "c.jsonl"}).find("c.jsonl:2"), std::string::npos);
  write(d / "d.jsonl", "{\"input\": \"x.mp4\", \"crf\": [1]}\n");
  EXPECT_NE(message({}, {d / "d.jsonl"}).find("\"crf\" must be"), std::string::npos);
  write(d / "e.csv", "input\n\"x.mp4\n");
  EXPECT_NE(message({}, {d / "e.csv"}).find("unterminated"), std::string::npos);
  fs::create_directories(d / "empty");
  EXPECT_NE(message({d / "empty"}, {}).find("no input files"), std::string::npos);
}

// ---------------------------------------------------------------- templates

TEST(BatchTemplate, FieldsExpandAndErrorsPointAtTheField) {
  Item it;
  it.input = "/data/clips/2024/day1.take.mp4";
  it.relpath = "2024";
  it.index = 7;
  EXPECT_EQ(expand_template("out/{relpath}/{stem}.mkv", it), "out/2024/day1.take.mkv");
  EXPECT_EQ(expand_template("out/{index:04}_{stem}.{ext}", it), "out/0007_day1.take.mp4");
  EXPECT_EQ(expand_template("{{x}}/{index}.y4m", it), "{x}/7.y4m");
  it.relpath = "";
  EXPECT_EQ(expand_template("out/{relpath}/{stem}.mkv", it), "out/day1.take.mkv");
  it.input = "a/b.y4m.gz";
  EXPECT_EQ(expand_template("{stem}|{ext}", it), "b|y4m.gz");

  EXPECT_NO_THROW(check_template("out/{relpath}/{stem}.mp4"));
  try {
    check_template("out/{stme}.mp4");
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_EQ(e.pos(), 4u);
    EXPECT_EQ(e.len(), 6u);
    EXPECT_NE(std::string(e.what()).find("unknown field {stme}"), std::string::npos);
  }
  EXPECT_THROW(check_template("out/{stem.mp4"), ParseError);
  EXPECT_THROW(check_template("out/}.mp4"), ParseError);
  EXPECT_THROW(check_template("{stem:3}.mp4"), ParseError);

  EXPECT_EQ(template_root("out/{relpath}/{stem}.mp4"), "out");
  EXPECT_EQ(template_root("/srv/a/b{stem}.mp4"), "/srv/a");
  EXPECT_EQ(template_root("{stem}.mp4"), ".");
}

TEST(BatchTemplate, TwoItemsNeverWriteOneFile) {
  std::vector<Item> items(2);
  items[0].input = "a/x.mp4";
  items[1].input = "b/x.mov";
  items[0].options = items[1].options = nlohmann::json::object();
  try {
    assign_outputs(items, "out/{stem}.mkv");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("would both write"), std::string::npos);
  }
  EXPECT_NO_THROW(assign_outputs(items, "out/{stem}.{ext}"));
  items[1].options["output"] = "special.mkv";  // a list's own output wins
  assign_outputs(items, "out/{stem}.mkv");
  EXPECT_EQ(items[1].output, "special.mkv");
  assign_outputs(items, "null");
  EXPECT_EQ(items[0].output, "null");
  std::vector<Item> self(1);
  self[0].input = "x.y4m";
  self[0].options = nlohmann::json::object();
  EXPECT_THROW(assign_outputs(self, "{stem}.y4m"), Error);
}

// ---------------------------------------------------------------- shards and GPUs

TEST(BatchShard, SharesAreDisjointCompleteAndBalancedBySize) {
  std::vector<Item> items;
  uint32_t seed = 12345;
  for (int i = 0; i < 200; ++i) {
    Item it;
    it.input = "clip" + std::to_string(i);
    seed = seed * 1664525u + 1013904223u;
    it.bytes = 1000 + (seed >> 8) % 1000000;  // mixed sizes
    it.index = i;
    items.push_back(it);
  }
  for (int n : {1, 3, 4, 7}) {
    std::set<std::string> all;
    int64_t lo = INT64_MAX, hi = 0;
    for (int i = 0; i < n; ++i) {
      const auto part = take_shard(items, Shard{i, n, "--shard"});
      EXPECT_EQ(inputs_of(part), inputs_of(take_shard(items, Shard{i, n, "--shard"})));  // deterministic
      int64_t bytes = 0;
      for (const Item& it : part) {
        EXPECT_TRUE(all.insert(it.input).second) << it.input << " in two shards";
        bytes += it.bytes;
      }
      for (size_t k = 1; k < part.size(); ++k) EXPECT_LT(part[k - 1].index, part[k].index);  // list order kept
      lo = std::min(lo, bytes);
      hi = std::max(hi, bytes);
    }
    EXPECT_EQ(all.size(), items.size());
    EXPECT_LT(static_cast<double>(hi - lo), 1.0e6 + 1) << n << " shards: the spread is at most one item";
  }
}

TEST(BatchShard, FromTheCommandLineSlurmAndKubernetes) {
  EXPECT_EQ(parse_shard("3/8").index, 3);
  EXPECT_EQ(parse_shard("3/8").count, 8);
  for (const char* bad : {"8/8", "-1/4", "1/0", "1", "a/b", "1/2x"}) EXPECT_THROW(parse_shard(bad), Error) << bad;

  std::map<std::string, std::string> env;
  const auto get = [&](const char* n) -> const char* {
    auto f = env.find(n);
    return f == env.end() ? nullptr : f->second.c_str();
  };
  Shard s = shard_from_env(get, 0);
  EXPECT_EQ(s.count, 1);
  env = {{"SLURM_ARRAY_TASK_ID", "5"}, {"SLURM_ARRAY_TASK_COUNT", "4"}, {"SLURM_ARRAY_TASK_MIN", "2"}};
  s = shard_from_env(get, 0);  // --array=2-5: task 5 is the last of four
  EXPECT_EQ(s.index, 3);
  EXPECT_EQ(s.count, 4);
  EXPECT_EQ(s.source, "SLURM_ARRAY_TASK_ID");
  env = {{"JOB_COMPLETION_INDEX", "2"}};
  EXPECT_THROW(shard_from_env(get, 0), Error);  // the count is needed
  s = shard_from_env(get, 6);
  EXPECT_EQ(s.index, 2);
  EXPECT_EQ(s.count, 6);
  env["VFPIPE_SHARD_COUNT"] = "3";
  EXPECT_EQ(shard_from_env(get, 0).count, 3);
  env = {{"JOB_COMPLETION_INDEX", "7"}, {"VFPIPE_SHARD_COUNT", "3"}};
  EXPECT_THROW(shard_from_env(get, 0), Error);
  env = {{"SLURM_ARRAY_TASK_ID", "x"}, {"SLURM_ARRAY_TASK_COUNT", "4"}};
  EXPECT_THROW(shard_from_env(get, 0), Error);
}

TEST(BatchGpus, SelectionWithAFakeDeviceCount) {
  EXPECT_EQ(parse_gpus("all", 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(parse_gpus("all", 0), std::vector<int>{});
  EXPECT_EQ(parse_gpus("none", 8), std::vector<int>{});
  EXPECT_EQ(parse_gpus("2,0", 4), (std::vector<int>{2, 0}));
  try {
    parse_gpus("0,5", 2);
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_EQ(e.pos(), 2u);
    EXPECT_NE(std::string(e.what()).find("no GPU 5 (this machine has 2)"), std::string::npos);
  }
  try {  // the usual reason for fewer GPUs than the machine has is named
    parse_gpus("0,1", 1, "0");
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_EQ(e.pos(), 2u);
    EXPECT_NE(std::string(e.what()).find("no GPU 1 (1 visible to CUDA: CUDA_VISIBLE_DEVICES=0)"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_gpus("0,0", 2), ParseError);
  EXPECT_THROW(parse_gpus("0,,1", 2), ParseError);
  EXPECT_THROW(parse_gpus("gpu1", 2), ParseError);
  // Pipelines interleave over the GPUs; the CPU gets its own count.
  EXPECT_EQ(pipeline_devices({0, 1}, 3, 0), (std::vector<int>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(pipeline_devices({2}, 2, 0), (std::vector<int>{2, 2}));
  EXPECT_EQ(pipeline_devices({}, 3, 2), (std::vector<int>{-1, -1}));
  std::vector<int> eight;
  for (int g = 0; g < 8; ++g) eight.push_back(g);
  EXPECT_EQ(pipeline_devices(parse_gpus("all", 8), 4, 0).size(), 32u);
}

// ---------------------------------------------------------------- ledger

// The summary says when opening and closing items takes a third or more of the pipelines'
// time (short clips on a GPU), from the records' lane and frame seconds.
TEST(BatchLedger, SummaryNamesTheItemsSetupWhenItDominates) {
  const auto report = [](double frames_s, double lane_s) {
    std::map<std::string, nlohmann::json> latest;
    for (int i = 0; i < 4; ++i)
      latest["k" + std::to_string(i)] = {{"key", "k" + std::to_string(i)},
                                         {"input", "c.mp4"},
                                         {"status", "done"},
                                         {"frames", 120},
                                         {"seconds", frames_s},
                                         {"lane_seconds", lane_s}};
    latest["old"] = {{"key", "old"}, {"input", "o.mp4"}, {"status", "done"}, {"frames", 10}, {"seconds", 9.0}};
    return make_report(latest, nullptr, nlohmann::json::object());
  };
  const nlohmann::json slow = report(0.19, 0.5);
  EXPECT_EQ(slow["totals"]["per_item"]["items"], 4);  // the record without lane time is left out
  const std::string text = report_text(slow);
  EXPECT_NE(text.find("an item took 0.50 s on its pipeline for 0.19 s of frames: opening and closing items is 62%"),
            std::string::npos)
      << text;
  EXPECT_EQ(report_text(report(0.45, 0.5)).find("opening and closing"), std::string::npos);
}

TEST(BatchLedger, NewestRecordWinsAndASecondWriterIsRefused) {
  Folder d("ledger");
  {
    Ledger a(ledger_path(d.path, Shard{}));
    a.append({{"key", "k1"}, {"status", "failed"}, {"time_ns", 1}});
    a.append({{"key", "k1"}, {"status", "done"}, {"time_ns", 3}});
    EXPECT_THROW(Ledger(ledger_path(d.path, Shard{})), Error);  // locked
  }
  const std::string shard = ledger_path(d.path, Shard{1, 2, "--shard"});
  {
    Ledger s(shard);
    EXPECT_NE(s.path().find("vfpipe-batch.shard-1-of-2.jsonl"), std::string::npos);
    s.append({{"key", "k2"}, {"status", "done"}, {"time_ns", 2}});
    s.append({{"key", "k1"}, {"status", "failed"}, {"time_ns", 0}});  // older than the other file's
  }
  std::ofstream(shard, std::ios::app) << "{\"key\": \"k3\", \"sta";           // cut short by a crash
  Ledger(shard).append({{"key", "k4"}, {"status", "done"}, {"time_ns", 4}});  // on a line of its own
  std::map<std::string, int> attempts;
  auto latest = read_ledgers(d.path, &attempts);
  EXPECT_EQ(latest.size(), 3u);
  EXPECT_EQ(latest["k4"]["status"], "done");
  EXPECT_EQ(latest["k1"]["status"], "done");
  EXPECT_EQ(attempts["k1"], 3);
  EXPECT_EQ(latest["k2"]["status"], "done");
}

// ---------------------------------------------------------------- runner

namespace {

// A stand-in for the pipeline: writes "OUT:<input>" to the output, fails inputs named
// "fail*", damages "damaged*" (writes, then fails), and counts its calls.
struct FakeWork {
  std::mutex mu;
  std::map<std::string, int> calls;
  std::atomic<int> running{0}, max_running{0};
  int flaky_failures = 0;  // "flaky*" inputs fail this many times first
  int sleep_ms = 0;

  ItemResult operator()(const ItemJob& job) {
    const int now = ++running;
    int m = max_running.load();
    while (now > m && !max_running.compare_exchange_weak(m, now)) {
    }
    int call;
    {
      std::lock_guard<std::mutex> lk(mu);
      call = ++calls[job.item->input];
    }
    const std::string name = fs::path(job.item->input).filename().string();
    ItemResult r;
    job.progress->total.store(10);
    for (int i = 0; i < 10; ++i) {
      if (job.stop->load()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms / 10));
      job.progress->frames.store(i + 1);
    }
    if (name.rfind("unreadable", 0) == 0) {  // as the source's open throws it
      --running;
      throw Error(ErrorKind::Input, "cannot open input '" + job.item->input + "': Invalid data");
    }
    if (job.write_to != "null") write(job.write_to, "OUT:" + job.item->input);
    r.frames = 10;
    if (name.rfind("fail", 0) == 0) {
      r.error = "cannot decode";
      r.frames = 0;
    } else if (name.rfind("damaged", 0) == 0) {
      r.error = "damaged after frame 4";
      r.input_error = true;
      r.frames = 4;
    } else if (name.rfind("flaky", 0) == 0 && call <= flaky_failures) {
      r.error = "transient";
    } else {
      r.ok = true;
    }
    --running;
    return r;
  }
};

std::vector<Item> make_items(const Folder& d, const std::vector<std::string>& names, const std::string& tmpl) {
  std::vector<Item> items;
  for (const std::string& n : names) {
    write(d / ("in/" + n), n);
    Item it;
    it.input = d / ("in/" + n);
    it.bytes = 10;
    it.options = nlohmann::json::object();
    items.push_back(it);
  }
  for (size_t i = 0; i < items.size(); ++i) items[i].index = static_cast<int64_t>(i);
  assign_outputs(items, d / tmpl);
  return items;
}

BatchConfig quiet_config(const Folder& d, int lanes) {
  BatchConfig c;
  c.devices.assign(static_cast<size_t>(lanes), -1);
  c.ledger_dir = d / "out";
  c.progress = ProgressMode::None;
  c.retries = 0;
  return c;
}

}  // namespace

TEST(BatchRunner, EveryItemOnceOutputsRenamedFailuresRecorded) {
  Folder d("runner");
  std::vector<std::string> names;
  for (int i = 0; i < 40; ++i) names.push_back("clip" + std::to_string(i) + ".mp4");
  names.push_back("fail.mp4");
  names.push_back("damaged.mp4");
  auto items = make_items(d, names, "out/{stem}.mkv");
  FakeWork work;
  work.sleep_ms = 40;  // 4 ms a frame: the four pipelines overlap
  BatchConfig cfg = quiet_config(d, 4);
  auto s = run_batch(items, cfg, std::ref(work));
  EXPECT_EQ(s.done, 40);
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.exit_status(), 1);
  EXPECT_GE(work.max_running.load(), 2) << "pipelines run concurrently";
  EXPECT_LE(work.max_running.load(), 4);
  for (const auto& [in, n] : work.calls) EXPECT_EQ(n, 1) << in;
  for (int i = 0; i < 40; ++i) {
    const std::string out = d / ("out/clip" + std::to_string(i) + ".mkv");
    EXPECT_EQ(test::read_file(out), "OUT:" + d / ("in/clip" + std::to_string(i) + ".mp4"));
  }
  EXPECT_FALSE(fs::exists(d / "out/fail.mkv"));
  EXPECT_FALSE(fs::exists(d / "out/damaged.mkv"));
  EXPECT_TRUE(fs::exists(d / "out/damaged.partial.mkv"));  // the frames around the damage
  EXPECT_TRUE(find(d.path, ".vfpipe-part").empty());
  // The ledger and the report.
  auto lines = ledger_lines(d / "out/vfpipe-batch.jsonl");
  EXPECT_EQ(lines.size(), 42u);
  auto rep = nlohmann::json::parse(test::read_file(d / "out/vfpipe-batch.report.json"));
  EXPECT_EQ(rep["totals"]["done"], 40);
  EXPECT_EQ(rep["totals"]["failed"], 2);
  const std::string text = report_text(rep);
  EXPECT_NE(text.find("failed: " + d / "in/fail.mp4" + ": cannot decode"), std::string::npos) << text;
  EXPECT_NE(text.find("frames kept in"), std::string::npos) << text;

  // Again: done items are skipped; failed ones are tried again.
  FakeWork again;
  auto s2 = run_batch(items, cfg, std::ref(again));
  EXPECT_EQ(s2.skipped, 40);
  EXPECT_EQ(again.calls.size(), 2u);
  EXPECT_EQ(ledger_lines(d / "out/vfpipe-batch.jsonl").back()["attempt"], 2);
  // Killed after the ledger said done but before the rename: the next run renames it.
  fs::rename(d / "out/clip5.mkv", temporary_output(d / "out/clip5.mkv"));
  FakeWork renamer;
  EXPECT_EQ(run_batch(items, cfg, std::ref(renamer)).skipped, 40);
  EXPECT_EQ(renamer.calls.count(d / "in/clip5.mp4"), 0u);
  EXPECT_EQ(test::read_file(d / "out/clip5.mkv"), "OUT:" + d / "in/clip5.mp4");
  // A done item whose output was deleted is done again.
  fs::remove(d / "out/clip3.mkv");
  FakeWork third;
  run_batch(items, cfg, std::ref(third));
  EXPECT_EQ(third.calls.count(d / "in/clip3.mp4"), 1u);
  EXPECT_TRUE(fs::exists(d / "out/clip3.mkv"));
}

TEST(BatchRunner, RetriesThenGivesUp) {
  Folder d("retries");
  auto items = make_items(d, {"flaky.mp4", "fail.mp4", "unreadable.mp4"}, "out/{stem}.mkv");
  FakeWork work;
  work.flaky_failures = 2;
  BatchConfig cfg = quiet_config(d, 1);
  cfg.retries = 2;
  auto s = run_batch(items, cfg, std::ref(work));
  EXPECT_EQ(s.done, 1);
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(work.calls[d / "in/flaky.mp4"], 3);
  EXPECT_EQ(work.calls[d / "in/fail.mp4"], 3);
  // A local file that cannot be read would fail the same way again: one attempt.
  EXPECT_EQ(work.calls[d / "in/unreadable.mp4"], 1);
  EXPECT_TRUE(fs::exists(d / "out/flaky.mkv"));
}

TEST(BatchRunner, ExistingOutputsAreRefusedSkippedOrOverwritten) {
  Folder d("existing");
  auto items = make_items(d, {"a.mp4"}, "out/{stem}.mkv");
  write(d / "out/a.mkv", "precious");
  FakeWork w1;
  BatchConfig cfg = quiet_config(d, 1);
  auto s = run_batch(items, cfg, std::ref(w1));
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(test::read_file(d / "out/a.mkv"), "precious");
  EXPECT_NE(s.report["items"][0]["error"].get<std::string>().find("-y: overwrite"), std::string::npos);
  cfg.existing = Existing::Skip;
  FakeWork w2;
  EXPECT_EQ(run_batch(items, cfg, std::ref(w2)).skipped, 1);
  EXPECT_EQ(test::read_file(d / "out/a.mkv"), "precious");
  cfg.existing = Existing::Overwrite;
  FakeWork w3;
  EXPECT_EQ(run_batch(items, cfg, std::ref(w3)).done, 1);
  EXPECT_EQ(test::read_file(d / "out/a.mkv"), "OUT:" + d / "in/a.mp4");
  // --redo processes a done item again.
  cfg.existing = Existing::Refuse;
  cfg.redo = true;
  FakeWork w4;
  EXPECT_EQ(run_batch(items, cfg, std::ref(w4)).done, 1);
  EXPECT_EQ(w4.calls.size(), 1u);
}

TEST(BatchRunner, ImageSequencesAreWrittenAsAWholeFolder) {
  Folder d("sequence");
  auto items = make_items(d, {"a.mp4", "damaged.mp4"}, "out/{stem}/%04d.png");
  EXPECT_EQ(temporary_output(items[0].output), d / "out/.vfpipe-part.a/%04d.png");
  EXPECT_EQ(partial_output(items[1].output), d / "out/damaged.partial");
  ItemFn fn = [](const ItemJob& job) {
    ItemResult r;
    for (int i = 1; i <= 3; ++i) {
      char name[64];
      std::snprintf(name, sizeof name, fs::path(job.write_to).filename().c_str(), i);
      write((fs::path(job.write_to).parent_path() / name).string(), "png");
    }
    r.frames = 3;
    r.ok = job.item->input.find("damaged") == std::string::npos;
    r.input_error = !r.ok;
    r.error = r.ok ? "" : "damaged";
    return r;
  };
  auto s = run_batch(items, quiet_config(d, 1), fn);
  EXPECT_EQ(s.done, 1);
  EXPECT_TRUE(fs::exists(d / "out/a/0003.png"));
  EXPECT_TRUE(fs::exists(d / "out/damaged.partial/0001.png"));
  EXPECT_FALSE(fs::exists(d / "out/damaged"));
  EXPECT_TRUE(find(d.path, ".vfpipe-part").empty());
}

TEST(BatchRunner, FirstSignalFinishesRunningItemsSecondAbandonsThem) {
  for (int signals : {1, 2}) {
    Folder d("signals" + std::to_string(signals));
    std::vector<std::string> names;
    for (int i = 0; i < 12; ++i) names.push_back("c" + std::to_string(i) + ".mp4");
    auto items = make_items(d, names, "out/{stem}.mkv");
    std::atomic<int> count{0}, sig{0};
    BatchConfig cfg = quiet_config(d, 2);
    cfg.signal_count = &count;
    cfg.stop_signal = &sig;
    std::atomic<int> started{0};
    ItemFn fn = [&](const ItemJob& job) {
      if (++started == 3) {  // the third item: Ctrl-C (once or twice) while two run
        sig = SIGINT;
        count = signals;
      }
      ItemResult r;
      for (int i = 0; i < 40 && !job.stop->load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      write(job.write_to, "x");
      r.frames = 1;
      r.ok = true;
      return r;
    };
    auto s = run_batch(items, cfg, fn);
    EXPECT_EQ(s.stopped_by, SIGINT);
    EXPECT_EQ(s.exit_status(), 130);
    EXPECT_LT(started.load(), 12) << "no new item after the signal";
    if (signals == 1) {
      EXPECT_EQ(s.abandoned, 0);
      EXPECT_EQ(s.done, started.load());  // what ran, finished
    } else {
      EXPECT_GE(s.abandoned, 1);
      EXPECT_EQ(s.done + s.abandoned, started.load());
    }
    EXPECT_TRUE(find(d.path, ".vfpipe-part").empty()) << "nothing partial stays";
    int finals = 0;
    for (int i = 0; i < 12; ++i) finals += fs::exists(d / ("out/c" + std::to_string(i) + ".mkv"));
    EXPECT_EQ(finals, s.done);
    EXPECT_GT(s.report["totals"]["missing"].get<int>(), 0);  // not run: listed
  }
}

TEST(BatchSlurm, ScriptIsAnArrayOfShards) {
  SlurmOptions o;
  o.vfpipe = "/opt/vf pipe/vfpipe";
  o.workdir = "/work";
  o.config = "/work/out/vfpipe-batch.job.toml";
  o.items = "/work/out/vfpipe-batch.items.jsonl";
  o.log_dir = "/work/out";
  o.shards = 16;
  o.array_max = 4;
  o.partition = "gpu";
  o.gpus_per_task = 1;
  o.time = "02:00:00";
  o.sbatch_args = {"--mem=16G"};
  const std::string s = sbatch_script(o);
  EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u);
  for (const char* line : {"#SBATCH --array=0-15%4\n", "#SBATCH --partition=gpu\n", "#SBATCH --gpus-per-task=1\n",
                           "#SBATCH --time=02:00:00\n", "#SBATCH --mem=16G\n", "#SBATCH --chdir=/work\n",
                           "#SBATCH --output=/work/out/slurm-%A_%a.out\n"})
    EXPECT_NE(s.find(line), std::string::npos) << line << s;
  EXPECT_NE(s.find("exec '/opt/vf pipe/vfpipe' --config /work/out/vfpipe-batch.job.toml batch --list"),
            std::string::npos)
      << s;
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote("plain/path-1.mp4"), "plain/path-1.mp4");
  EXPECT_EQ(shell_quote(""), "''");
}

// ---------------------------------------------------------------- the binary

namespace {

// A small Y4M clip (gray ramps) without running vfpipe: fast enough for hundreds.
void write_y4m(const std::string& path, int w, int h, int frames, int seed) {
  std::string s = "YUV4MPEG2 W" + std::to_string(w) + " H" + std::to_string(h) + " F25:1 Ip A1:1 C444\n";
  for (int f = 0; f < frames; ++f) {
    s += "FRAME\n";
    for (int p = 0; p < 3; ++p)
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) s += static_cast<char>((x * 7 + y * 3 + f * 11 + p * 50 + seed * 13) & 255);
  }
  write(path, s);
}

}  // namespace

TEST(BatchCli, TwoHundredClipsKilledMidwayThenResumedDoEachOnce) {
  Folder d("cli200");
  for (int i = 0; i < 200; ++i)
    write_y4m(d / ("clips/" + std::string(i % 3 == 0 ? "x/" : "y/") + "c" + std::to_string(i) + ".y4m"),
              16 + 8 * (i % 9), 8 + 8 * (i % 5), 2 + i % 7, i);
  write(d / "clips/x/corrupt.y4m", "YUV4MPEG2 W0 H-3 nonsense\n");
  const std::string cmd = kBin + " batch " + d / "clips" + " -f median=radius=2 -o '" + d / "out/{relpath}/{stem}.y4m" +
                          "' --device cpu --jobs 2 --retries 0 --progress plain";
  // Killed (SIGKILL: no clean-up at all) once a quarter of the items are in the ledger.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd + " >/dev/null 2>&1").c_str(), nullptr);
    _exit(127);
  }
  const std::string ledger = d / "out/vfpipe-batch.jsonl";
  size_t at_kill = 0;
  for (int i = 0; i < 20000; ++i) {
    at_kill = fs::exists(ledger) ? ledger_lines(ledger, true).size() : 0;
    if (at_kill >= 50) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_GE(at_kill, 50u);
  const size_t lines_after_kill = ledger_lines(ledger, true).size();  // SIGKILL may tear the last line
  EXPECT_LT(lines_after_kill, 201u) << "killed before the end";

  const CmdResult r = run_cmd(cmd);
  EXPECT_EQ(r.rc, 1) << r.out;  // the corrupt clip
  EXPECT_NE(r.out.find("skipped"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("failed: " + d / "clips/x/corrupt.y4m"), std::string::npos) << r.out;
  std::map<std::string, int> done;
  for (const auto& j : ledger_lines(ledger, true))
    if (j["status"] == "done") ++done[j["input"].get<std::string>()];
  EXPECT_EQ(done.size(), 200u);
  for (const auto& [in, n] : done) EXPECT_EQ(n, 1) << in << " done " << n << " times";
  EXPECT_TRUE(find(d / "out", ".vfpipe-part").empty()) << "no temporary file stays";
  EXPECT_TRUE(find(d / "out", ".partial").empty());
  EXPECT_FALSE(fs::exists(d / "out/x/corrupt.y4m"));
  // Each output is the same as `vfpipe run`'s.
  for (int i : {0, 1, 77, 199}) {
    const std::string rel = std::string(i % 3 == 0 ? "x/" : "y/") + "c" + std::to_string(i) + ".y4m";
    const CmdResult one = run_cmd(kBin + " run -q --device cpu -i " + d / ("clips/" + rel) +
                                  " -f median=radius=2 -y -o " + d / "ref.y4m");
    ASSERT_EQ(one.rc, 0) << one.out;
    EXPECT_TRUE(test::read_file(d / "ref.y4m") == test::read_file(d / ("out/" + rel))) << rel;
  }
  // A third run has nothing left but the corrupt clip.
  const CmdResult again = run_cmd(cmd);
  EXPECT_NE(again.out.find("200 skipped: done before"), std::string::npos) << again.out;
}

TEST(BatchCli, PerItemOptionsShardsAndUsageErrors) {
  Folder d("cliopts");
  write_y4m(d / "a.y4m", 32, 16, 3, 1);
  write_y4m(d / "b.y4m", 32, 16, 3, 2);
  write(d / "jobs.csv", "input,filters,frames\na.y4m,median=radius=1,2\nb.y4m,,\n");
  CmdResult r = run_cmd(kBin + " batch --list " + d / "jobs.csv" + " -f null -o '" + d / "out/{stem}.y4m" +
                        "' --device cpu --progress none");
  ASSERT_EQ(r.rc, 0) << r.out;
  CmdResult ref =
      run_cmd(kBin + " run -q --device cpu -i " + d / "a.y4m" + " -f median=radius=1 -n 2 -o " + d / "ra.y4m");
  ASSERT_EQ(ref.rc, 0) << ref.out;
  ref = run_cmd(kBin + " run -q --device cpu -i " + d / "b.y4m" + " -f null -o " + d / "rb.y4m");
  ASSERT_EQ(ref.rc, 0) << ref.out;
  EXPECT_TRUE(test::read_file(d / "out/a.y4m") ==
              test::read_file(d / "ra.y4m"));  // the item's own filters and frame count
  EXPECT_TRUE(test::read_file(d / "out/b.y4m") == test::read_file(d / "rb.y4m"));  // the command line's (null)

  // Shards of one list cover it once.
  for (const char* s : {"0/2", "1/2"}) {
    r = run_cmd(kBin + " batch " + d / "a.y4m " + d / "b.y4m" + " -o '" + d / "sh/{stem}.y4m" +
                "' --device cpu --progress none --shard " + s);
    EXPECT_EQ(r.rc, 0) << r.out;
  }
  EXPECT_TRUE(fs::exists(d / "sh/a.y4m") && fs::exists(d / "sh/b.y4m"));
  // Each pipeline's codecs get a share of the cores (--codec-threads overrides it).
  const auto rec = ledger_lines(d / "sh/vfpipe-batch.shard-0-of-2.jsonl").at(0);
  EXPECT_GE(rec["details"]["codec_threads"].get<int>(), 1) << rec.dump();
  EXPECT_EQ(ledger_lines(d / "sh/vfpipe-batch.shard-0-of-2.jsonl").size(), 1u);
  EXPECT_EQ(ledger_lines(d / "sh/vfpipe-batch.shard-1-of-2.jsonl").size(), 1u);
  r = run_cmd(kBin + " batch --merge-reports " + d / "sh");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("2 items: 2 done, 0 failed"), std::string::npos) << r.out;

  // An input that breaks after some frames: the item fails, its frames are kept as
  // NAME.partial.EXT, never under the final name; --ignore-input-errors accepts it.
  write_y4m(d / "full.y4m", 32, 16, 6, 3);
  const std::string full = test::read_file(d / "full.y4m");
  write(d / "cut/broken.y4m", full.substr(0, full.size() - 700));
  r = run_cmd(kBin + " batch " + d / "cut" + " -o '" + d / "cut-out/{stem}.y4m' --device cpu --progress none");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_FALSE(fs::exists(d / "cut-out/broken.y4m"));
  ASSERT_TRUE(fs::exists(d / "cut-out/broken.partial.y4m")) << r.out;
  EXPECT_NE(test::read_file(d / "cut-out/broken.partial.y4m").find("FRAME"), std::string::npos);
  r = run_cmd(kBin + " batch " + d / "cut" + " -o '" + d / "cut-out/{stem}.y4m' --device cpu --progress none " +
              "--ignore-input-errors");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(fs::exists(d / "cut-out/broken.y4m"));
  EXPECT_FALSE(fs::exists(d / "cut-out/broken.partial.y4m"));

  // Usage errors: exit 2, before anything runs.
  const auto usage_error = [](const std::string& cmd, const std::string& says) {
    const CmdResult u = run_cmd(cmd);
    EXPECT_EQ(u.rc, 2) << cmd << ": " << u.out;
    EXPECT_NE(u.out.find(says), std::string::npos) << cmd << ": " << u.out;
  };
  usage_error(kBin + " batch " + d / "a.y4m" + " -o '" + d / "u/{stme}.y4m'", "^^^^^^");
  usage_error(kBin + " batch " + d / "a.y4m", "-o is required");
  write(d / "bad.csv", "input,speed\na.y4m,11\n");
  usage_error(kBin + " batch --list " + d / "bad.csv" + " -o '" + d / "u/{stem}.y4m'",
              "bad.csv:2: unknown per-item option 'speed'");
  write(d / "bad_ar.csv", "input,ar\na.y4m,5\n");  // the per-item audio keys are range-checked
  usage_error(kBin + " batch --list " + d / "bad_ar.csv" + " -o '" + d / "u/{stem}.y4m'",
              "bad_ar.csv:2: 'ar' must be in 1000..768000");
  write(d / "bad_aspect.csv", "input,aspect\na.y4m,16x9\n");  // checked before any item runs
  usage_error(kBin + " batch --list " + d / "bad_aspect.csv" + " -o '" + d / "u/{stem}.y4m'",
              "bad_aspect.csv:2: -aspect: expected a display aspect ratio such as 16:9");
  write(d / "bad_r.csv", "input,r\na.y4m,fast\n");
  usage_error(kBin + " batch --list " + d / "bad_r.csv" + " -o '" + d / "u/{stem}.y4m'",
              "bad_r.csv:2: -r: expected a frame rate");
  if (VFPIPE_HAVE_LIBAV) {
    write(d / "bad_tag.csv", "input,colorspace\na.y4m,bt710\n");
    usage_error(kBin + " batch --list " + d / "bad_tag.csv" + " -o '" + d / "u/{stem}.mkv'",
                "bad_tag.csv:2: -colorspace bt710: not a tag");
  }
  write(d / "badf.csv", "input,filters\na.y4m,median=radius=x\n");
  usage_error(kBin + " batch --list " + d / "badf.csv" + " -o '" + d / "u/{stem}.y4m'", "badf.csv:2");
  // A stage's own file would be written by every item: refused, on the command line and per item.
  usage_error(kBin + " batch " + d / "a.y4m " + d / "b.y4m" + " -f mmp=lambda=40:file=" + d / "one.mmp" + " -o '" +
                  d / "u/{stem}.y4m' --device cpu",
              "every item of a batch would write over");
  write(d / "mf.csv", "input,filters\na.y4m,mmp=lambda=40:file=x.mmp\n");
  usage_error(kBin + " batch --list " + d / "mf.csv" + " -o '" + d / "u/{stem}.y4m' --device cpu", "mf.csv:2");
  EXPECT_FALSE(fs::exists(d / "one.mmp") || fs::exists(d / "x.mmp"));
  r = run_cmd(kBin + " batch " + d / "a.y4m" + " -o '" + d / "u/{stem}.y4m' --gpus 7 --device cpu --dry-run");
  EXPECT_EQ(r.rc, 0) << r.out;  // the CPU backend does not look at --gpus
  EXPECT_FALSE(fs::exists(d / "u"));
}

TEST(BatchCli, SigintFinishesTheRunningItemsAndExits130) {
  Folder d("clisig");
  // Paced synthetic inputs (a list may name any vfpipe input): 0.5 s each.
  std::string list;
  for (int i = 0; i < 6; ++i)
    list += "synthetic=size=32x16:frames=25:realtime=1:rate=50:seed=" + std::to_string(i) + "\n";
  write(d / "list.txt", list);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string c = "exec " + kBin + " batch --list " + d / "list.txt" + " -o '" + d / "out/{index}.y4m" +
                          "' --device cpu --jobs 2 --progress plain > " + d / "log.txt" + " 2>&1";
    execl("/bin/sh", "sh", "-c", c.c_str(), nullptr);
    _exit(127);
  }
  // The signal goes once the batch has started (its first line; the handlers are installed
  // before it), not after a fixed time: a loaded machine starts the program slower.
  for (int i = 0; i < 200 && test::read_file(d / "log.txt").find("pipelines") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  kill(pid, SIGINT);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st)) << test::read_file(d / "log.txt");
  EXPECT_EQ(WEXITSTATUS(st), 130) << test::read_file(d / "log.txt");
  const std::string log = test::read_file(d / "log.txt");
  EXPECT_NE(log.find("finishing 2 running item(s)"), std::string::npos) << log;
  // The two that were running are complete (25 frames each); nothing else started.
  EXPECT_TRUE(fs::exists(d / "out/0.y4m") && fs::exists(d / "out/1.y4m")) << log;
  EXPECT_FALSE(fs::exists(d / "out/2.y4m"));
  EXPECT_TRUE(find(d / "out", ".vfpipe-part").empty());
  const std::string y = test::read_file(d / "out/0.y4m");
  size_t frames = 0;
  for (size_t p = y.find("FRAME"); p != std::string::npos; p = y.find("FRAME", p + 5)) ++frames;
  EXPECT_EQ(frames, 25u);
}
