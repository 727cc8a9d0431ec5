#include "batch/ledger.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "core/error.hpp"
#include "core/log.hpp"

namespace vfp::batch {

namespace fs = std::filesystem;

namespace {
std::mutex g_append_mu;

std::string shard_suffix(const Shard& s) {
  return s.count > 1 ? log::format(".shard-%d-of-%d", s.index, s.count) : std::string();
}

std::string abs_path(const std::string& p) {
  if (p == "null" || p == "-") return p;
  return fs::absolute(p).lexically_normal().string();
}

}  // namespace

std::string ledger_path(const std::string& dir, const Shard& shard) {
  return (fs::path(dir) / (std::string(kLedgerBase) + shard_suffix(shard) + ".jsonl")).string();
}
std::string report_path(const std::string& dir, const Shard& shard) {
  return (fs::path(dir) / (std::string(kLedgerBase) + shard_suffix(shard) + ".report.json")).string();
}
std::string clock_time(double s) {
  if (!(s >= 0) || s > 1e7) return "--:--";
  const long t = static_cast<long>(s + 0.5);
  return t >= 3600 ? log::format("%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60)
                   : log::format("%ld:%02ld", t / 60, t % 60);
}

std::string items_path(const std::string& dir) {
  return (fs::path(dir) / (std::string(kLedgerBase) + ".items.jsonl")).string();
}

std::string item_key(const Item& item) { return abs_path(item.input) + " -> " + abs_path(item.output); }

Ledger::Ledger(const std::string& path) : path_(path) {
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  fd_ = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(ErrorKind::Output, "cannot open the ledger '" + path + "': " + std::strerror(errno));
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    fd_ = -1;
    throw Error(ErrorKind::Output, "another vfpipe batch is running on '" + path +
                                       "' (same outputs, same shard): wait for it, or stop it first");
  }
  // A line cut short by a crash (power loss) would swallow the next record: end it first.
  if (const off_t size = lseek(fd_, 0, SEEK_END); size > 0) {
    char last = '\n';
    if (pread(fd_, &last, 1, size - 1) == 1 && last != '\n' && ::write(fd_, "\n", 1) != 1)
      throw Error(ErrorKind::Output, "cannot write the ledger '" + path + "': " + std::strerror(errno));
  }
}

Ledger::~Ledger() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

void Ledger::append(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  std::lock_guard<std::mutex> lk(g_append_mu);
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(ErrorKind::Output, "cannot write the ledger '" + path_ + "': " + std::strerror(errno));
    off += static_cast<size_t>(n);
  }
  fdatasync(fd_);
}

std::map<std::string, nlohmann::json> read_ledgers(const std::string& dir, std::map<std::string, int>* attempts) {
  std::map<std::string, nlohmann::json> latest;
  std::vector<fs::path> files;
  std::error_code ec;
  const std::string base = kLedgerBase;
  for (fs::directory_iterator it(dir.empty() ? "." : dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool own = name == base + ".jsonl";
    const bool shard =
        name.rfind(base + ".shard-", 0) == 0 && name.size() > 6 && name.compare(name.size() - 6, 6, ".jsonl") == 0;
    if (own || shard) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  // Records of all files, ordered by their time stamps: a later run of any shard wins.
  std::vector<nlohmann::json> all;
  for (const fs::path& f : files) {
    std::ifstream in(f);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      try {
        nlohmann::json j = nlohmann::json::parse(line);
        if (j.is_object() && j.contains("key") && j["key"].is_string()) all.push_back(std::move(j));
      } catch (const std::exception&) {
        log::debug("%s: a torn ledger line skipped", f.string().c_str());
      }
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a.value("time_ns", int64_t{0}) < b.value("time_ns", int64_t{0});
  });
  for (nlohmann::json& j : all) {
    const std::string key = j["key"].get<std::string>();
    if (attempts) ++(*attempts)[key];
    latest[key] = std::move(j);
  }
  return latest;
}

nlohmann::json make_report(const std::map<std::string, nlohmann::json>& latest, const std::vector<Item>* expected,
                           const nlohmann::json& extra) {
  nlohmann::json items = nlohmann::json::array();
  int64_t done = 0, failed = 0, missing = 0, frames = 0, timed = 0;
  double seconds = 0, lane_seconds = 0, timed_frame_seconds = 0;
  const auto add = [&](const nlohmann::json& r) {
    const std::string st = r.value("status", "");
    if (st == "done") ++done;
    if (st == "failed") ++failed;
    if (st == "missing") ++missing;
    frames += r.value("frames", int64_t{0});
    seconds += r.value("seconds", 0.0);
    if (st == "done" && r.value("lane_seconds", 0.0) > 0) {  // ledgers of older versions lack it
      ++timed;
      lane_seconds += r.value("lane_seconds", 0.0);
      timed_frame_seconds += r.value("seconds", 0.0);
    }
    items.push_back(r);
  };
  if (expected) {
    for (const Item& it : *expected) {
      auto f = latest.find(item_key(it));
      if (f != latest.end()) {
        add(f->second);
      } else {
        nlohmann::json m = {{"key", item_key(it)}, {"input", it.input}, {"output", it.output}, {"status", "missing"}};
        add(m);
      }
    }
  } else {
    for (const auto& [k, r] : latest) add(r);
  }
  nlohmann::json rep = extra.is_object() ? extra : nlohmann::json::object();
  rep["totals"] = {{"items", static_cast<int64_t>(items.size())},
                   {"done", done},
                   {"failed", failed},
                   {"missing", missing},
                   {"frames", frames},
                   {"item_seconds", seconds}};
  if (timed > 0)
    rep["totals"]["per_item"] = {{"items", timed},
                                 {"frames_seconds", timed_frame_seconds / static_cast<double>(timed)},
                                 {"lane_seconds", lane_seconds / static_cast<double>(timed)}};
  rep["items"] = std::move(items);
  return rep;
}

std::string report_text(const nlohmann::json& rep) {
  const nlohmann::json& t = rep["totals"];
  std::string out =
      log::format("batch: %lld items: %lld done, %lld failed", static_cast<long long>(t.value("items", 0)),
                  static_cast<long long>(t.value("done", 0)), static_cast<long long>(t.value("failed", 0)));
  if (t.value("missing", 0) > 0) out += log::format(", %lld not run", static_cast<long long>(t.value("missing", 0)));
  if (t.value("skipped", 0) > 0)
    out += log::format(" (%lld skipped: done before)", static_cast<long long>(t.value("skipped", 0)));
  if (t.value("abandoned", 0) > 0)
    out += log::format(", %lld abandoned", static_cast<long long>(t.value("abandoned", 0)));
  out += log::format("; %lld frames", static_cast<long long>(t.value("frames", 0)));
  if (rep.contains("wall_seconds")) {
    const double w = rep["wall_seconds"].get<double>();
    out += " in " + clock_time(w);
    if (w > 0 && t.value("frames_this_run", int64_t{0}) > 0)
      out += log::format(" (%.0f frames/s)", static_cast<double>(t.value("frames_this_run", int64_t{0})) / w);
  }
  out += "\n";
  // Short items on a GPU spend much of their pipeline's time opening and closing (the
  // decoder, buffers): say so when that is a third or more, since it bounds the batch.
  if (t.contains("per_item")) {
    const double f = t["per_item"].value("frames_seconds", 0.0), l = t["per_item"].value("lane_seconds", 0.0);
    if (l > 0 && f < l * (2.0 / 3.0))
      out += log::format(
          "  an item took %.2f s on its pipeline for %.2f s of frames: opening and closing items is %.0f%% of the "
          "pipelines' time (longer items amortise it)\n",
          l, f, 100.0 * (1.0 - f / l));
  }
  for (const nlohmann::json& r : rep["items"]) {
    const std::string st = r.value("status", "");
    if (st == "failed") {
      out += "  failed: " + r.value("input", std::string()) + ": " + r.value("error", std::string());
      if (r.contains("partial")) out += " (frames kept in " + r["partial"].get<std::string>() + ")";
      out += "\n";
    } else if (st == "missing") {
      out += "  not run: " + r.value("input", std::string()) + "\n";
    }
  }
  return out;
}

void write_items(const std::string& path, const std::vector<Item>& items) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    for (const Item& it : items) {
      nlohmann::json j = it.options.is_object() ? it.options : nlohmann::json::object();
      j["input"] = abs_path(it.input);    // tasks may start in another folder
      j["output"] = abs_path(it.output);  // the template, expanded once for every shard
      j["relpath"] = it.relpath;
      j["bytes"] = it.bytes;
      out << j.dump() << "\n";
    }
    out.close();
    if (!out) throw Error(ErrorKind::Output, "cannot write the item list '" + path + "'");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error(ErrorKind::Output, "cannot write the item list '" + path + "': " + ec.message());
}

}  // namespace vfp::batch
