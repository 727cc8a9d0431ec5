#include "batch/runner.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "batch/ledger.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace vfp::batch {

namespace fs = std::filesystem;

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
std::string iso_time() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}
std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// An image-sequence output (frames/{stem}/%06d.png) is written as a whole folder.
bool is_pattern(const std::string& out) { return fs::path(out).filename().string().find('%') != std::string::npos; }
fs::path unit_of(const std::string& out) { return is_pattern(out) ? fs::path(out).parent_path() : fs::path(out); }

bool present(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}
void remove_all_quiet(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
}
// "clip.y4m.gz" -> {"clip", ".y4m.gz"}
std::pair<std::string, std::string> split_ext(const std::string& name) {
  const std::string two = ".y4m.gz";
  if (name.size() > two.size() && name.compare(name.size() - two.size(), two.size(), two) == 0)
    return {name.substr(0, name.size() - two.size()), two};
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0) return {name, ""};
  return {name.substr(0, dot), name.substr(dot)};
}

}  // namespace

std::string temporary_output(const std::string& output) {
  if (output == "null") return output;
  const fs::path u = unit_of(output);
  const fs::path tmp = u.parent_path() / (".vfpipe-part." + u.filename().string());
  return (is_pattern(output) ? tmp / fs::path(output).filename() : tmp).string();
}

std::string partial_output(const std::string& output) {
  const fs::path u = unit_of(output);
  if (is_pattern(output)) return u.string() + ".partial";
  const auto [stem, ext] = split_ext(u.filename().string());
  return (u.parent_path() / (stem + ".partial" + ext)).string();
}

namespace {

// One concurrent pipeline: what it runs now, for the display and for abandoning.
struct Lane {
  int device = -1;
  std::atomic<const Item*> item{nullptr};
  ItemProgress progress;
  std::atomic<int> stop{0};
  std::atomic<int64_t> started_ns{0};
};

class Batch {
 public:
  Batch(const std::vector<Item>& items, const BatchConfig& cfg, const ItemFn& fn)
      : items_(items), cfg_(cfg), fn_(fn), ledger_(ledger_path(cfg.ledger_dir, cfg.shard)) {
    latest_ = read_ledgers(cfg.ledger_dir, &attempts_);
    for (const Item& it : items_) total_bytes_ += std::max<int64_t>(it.bytes, 1);
    mode_ = cfg.progress;
    if (cfg.quiet) mode_ = ProgressMode::None;
    if (mode_ == ProgressMode::Auto) mode_ = isatty(2) ? ProgressMode::Terminal : ProgressMode::Plain;
    for (int d : cfg.devices) {
      lanes_.push_back(std::make_unique<Lane>());
      lanes_.back()->device = d;
    }
  }

  BatchSummary run() {
    start_ns_ = now_ns();
    if (mode_ == ProgressMode::Terminal) log::set_writer([this](const std::string& line) { print_above(line); });
    if (mode_ != ProgressMode::None)
      say(log::format("vfpipe batch: %zu items%s, %zu pipelines (%s); ledger %s", items_.size(),
                      cfg_.shard.count > 1 ? log::format(" in shard %d/%d (%s)", cfg_.shard.index, cfg_.shard.count,
                                                         cfg_.shard.source.c_str())
                                                 .c_str()
                                           : "",
                      lanes_.size(), lanes_description().c_str(), ledger_.path().c_str()));
    std::vector<std::thread> workers;
    for (auto& lane : lanes_) workers.emplace_back([this, l = lane.get()] { work(*l); });
    int64_t last_plain = start_ns_;
    while (running_lanes_.load() < static_cast<int>(lanes_.size())) {  // until every worker has left
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      watch_signals();
      if (mode_ == ProgressMode::Terminal) redraw();
      if (mode_ == ProgressMode::Plain && now_ns() - last_plain > static_cast<int64_t>(cfg_.plain_every_s * 1e9)) {
        last_plain = now_ns();
        say("vfpipe batch: " + status_line());
      }
    }
    for (auto& t : workers) t.join();
    if (mode_ == ProgressMode::Terminal) {
      clear_block();
      log::set_writer(nullptr);
    }
    return summarize();
  }

 private:
  std::string lanes_description() const {
    std::map<int, int> per;
    for (const auto& l : lanes_) ++per[l->device];
    std::string s;
    for (const auto& [d, n] : per)
      s += (s.empty() ? "" : ", ") + (d < 0 ? log::format("%d on the CPU", n) : log::format("%d on GPU %d", n, d));
    return s;
  }

  void watch_signals() {
    const int count = cfg_.signal_count ? cfg_.signal_count->load() : 0;
    const int sig = cfg_.stop_signal ? cfg_.stop_signal->load() : 0;
    if (count >= 1 && !stop_new_.exchange(true)) {
      stopped_by_ = sig;
      if (sig != SIGTERM)
        say(
            log::format("vfpipe batch: stopping: finishing %d running item(s), starting no new one (Ctrl-C again "
                        "abandons them)",
                        active_count()));
    }
    if ((count >= 2 || sig == SIGTERM) && !abandon_.exchange(true)) {
      stopped_by_ = sig;
      say(log::format("vfpipe batch: abandoning %d running item(s); their temporary outputs are removed",
                      active_count()));
      for (auto& l : lanes_) l->stop.store(sig ? sig : SIGINT);
    }
  }

  int active_count() const {
    int n = 0;
    for (const auto& l : lanes_) n += l->item.load() != nullptr;
    return n;
  }

  void work(Lane& lane) {
    while (!stop_new_.load()) {
      const size_t i = next_.fetch_add(1);
      if (i >= items_.size()) break;
      process(items_[i], lane);
    }
    running_lanes_.fetch_add(1);
  }

  nlohmann::json record(const Item& it, const std::string& status, int attempt, const Lane& lane) const {
    nlohmann::json r = {
        {"key", item_key(it)}, {"input", it.input},
        {"output", it.output}, {"status", status},
        {"attempt", attempt},  {"device", lane.device < 0 ? std::string("cpu") : "gpu" + std::to_string(lane.device)},
        {"host", host_},       {"time", iso_time()},
        {"time_ns", wall_ns()}};
    if (cfg_.shard.count > 1) r["shard"] = std::to_string(cfg_.shard.index) + "/" + std::to_string(cfg_.shard.count);
    return r;
  }

  void keep(const nlohmann::json& r) {
    ledger_.append(r);
    std::lock_guard<std::mutex> lk(mu_);
    latest_[r["key"].get<std::string>()] = r;
    const std::string st = r["status"];
    if (st == "done") ++done_;
    if (st == "failed") ++failed_;
    frames_ += r.value("frames", int64_t{0});
  }

  void process(const Item& it, Lane& lane) {
    const std::string key = item_key(it);
    nlohmann::json prev;
    int prior = 0;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (auto f = latest_.find(key); f != latest_.end()) prev = f->second;
      if (auto f = attempts_.find(key); f != attempts_.end()) prior = f->second;
    }
    const bool has_output = it.output != "null";
    const fs::path final_unit = has_output ? unit_of(it.output) : fs::path();
    const bool done_before = prev.is_object() && prev.value("status", "") == "done";
    if (done_before && !cfg_.redo && (!has_output || present(final_unit))) {
      finish_item(it, "skipped", "done before");
      return;
    }
    // Recorded as done, then killed before the rename: the complete file is still under its
    // temporary name. Finishing the rename keeps the item done once.
    if (done_before && !cfg_.redo && has_output && present(unit_of(temporary_output(it.output)))) {
      std::error_code ec;
      fs::rename(unit_of(temporary_output(it.output)), final_unit, ec);
      if (!ec) {
        finish_item(it, "skipped", "done before (its output renamed now)");
        return;
      }
    }
    if (has_output && present(final_unit) && !done_before) {
      if (cfg_.existing == Existing::Skip) {
        finish_item(it, "skipped", "output exists");
        return;
      }
      if (cfg_.existing == Existing::Refuse) {
        nlohmann::json r = record(it, "failed", prior + 1, lane);
        r["error"] = "'" + final_unit.string() + "' exists and is not in the ledger (-y: overwrite, -n: skip)";
        keep(r);
        finish_item(it, "failed", r["error"]);
        return;
      }
    }
    const int attempts = cfg_.retries + 1;
    for (int a = 1; a <= attempts; ++a) {
      const int attempt = prior + a;
      const std::string tmp = temporary_output(it.output);
      if (has_output) {
        remove_all_quiet(unit_of(tmp));  // what a killed run left
        std::error_code ec;
        fs::create_directories(unit_of(tmp).parent_path().empty() ? fs::path(".") : unit_of(tmp).parent_path(), ec);
        if (is_pattern(it.output)) fs::create_directories(unit_of(tmp), ec);
      }
      lane.progress.frames.store(0);
      lane.progress.total.store(-1);
      lane.started_ns.store(now_ns());
      lane.item.store(&it);
      ItemJob job;
      job.item = &it;
      job.write_to = tmp;
      job.device = lane.device;
      job.attempt = attempt;
      job.stop = &lane.stop;
      job.progress = &lane.progress;
      const int64_t t0 = now_ns();
      ItemResult res;
      try {
        res = fn_(job);
      } catch (const Error& e) {
        res.ok = false;
        res.error = e.what();
        res.input_error = e.kind() == ErrorKind::Input;
      } catch (const std::exception& e) {
        res.ok = false;
        res.error = e.what();
      }
      if (res.seconds <= 0) res.seconds = static_cast<double>(now_ns() - t0) * 1e-9;
      lane.item.store(nullptr);
      if (lane.stop.load() != 0) {  // abandoned: nothing of it stays
        if (has_output) remove_all_quiet(unit_of(tmp));
        std::lock_guard<std::mutex> lk(mu_);
        ++abandoned_;
        return;
      }
      nlohmann::json r = record(it, res.ok ? "done" : "failed", attempt, lane);
      r["frames"] = res.frames;
      r["seconds"] = res.seconds;
      // The item's whole time on its lane: opening, the frames, closing (seconds: the frames).
      r["lane_seconds"] = static_cast<double>(now_ns() - t0) * 1e-9;
      r["start_s"] = static_cast<double>(t0 - start_ns_) * 1e-9;  // into the batch: its timeline
      r["fps"] = res.seconds > 0 ? static_cast<double>(res.frames) / res.seconds : 0.0;
      if (!res.details.empty()) r["details"] = res.details;
      if (res.ok && has_output && !present(unit_of(tmp))) {
        res.ok = false;
        res.error = "no output was written";
        r["status"] = "failed";
      }
      if (res.ok) {
        // The record first: a task killed between the two finds the item done but its file
        // missing, and does it again; never a complete file the ledger does not know.
        keep(r);
        if (has_output) {
          std::error_code ec;
          if (cfg_.existing == Existing::Overwrite || done_before) {
            if (fs::is_directory(final_unit)) remove_all_quiet(final_unit);
          }
          fs::rename(unit_of(tmp), final_unit, ec);
          if (ec) {
            nlohmann::json f = record(it, "failed", attempt, lane);
            f["error"] = "cannot rename the finished output to '" + final_unit.string() + "': " + ec.message();
            keep(f);
            remove_all_quiet(unit_of(tmp));
            finish_item(it, "failed", f["error"]);
            return;
          }
          remove_all_quiet(partial_output(it.output));  // from an earlier, damaged try
        }
        finish_item(it, "done",
                    log::format("%lld frames, %.1f fps, %.1f s", static_cast<long long>(res.frames),
                                r["fps"].get<double>(), res.seconds));
        return;
      }
      r["error"] = res.error;
      if (res.damaged_input() && has_output && present(unit_of(tmp))) {
        // The frames decoded around the damage are kept, never under the final name.
        const std::string partial = partial_output(it.output);
        remove_all_quiet(partial);
        std::error_code ec;
        fs::rename(unit_of(tmp), partial, ec);
        if (!ec) r["partial"] = partial;
      }
      if (has_output) remove_all_quiet(unit_of(tmp));
      keep(r);
      // A damaged input stays damaged, and a local file that cannot be read fails the same
      // way again: no retry (a URL or pipe may recover, so it is retried).
      std::error_code not_a_file;
      const bool same_again =
          res.damaged_input() || (res.input_error && fs::is_regular_file(fs::path(it.input), not_a_file));
      if (a < attempts && !same_again && !stop_new_.load()) {
        say(log::format("vfpipe batch: %s failed (attempt %d): %s; retrying", it.input.c_str(), attempt,
                        res.error.c_str()));
        std::lock_guard<std::mutex> lk(mu_);
        --failed_;  // counted once, by its last attempt
        continue;
      }
      finish_item(it, "failed", res.error);
      return;
    }
  }

  void finish_item(const Item& it, const std::string& status, const std::string& what) {
    int64_t k;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (status == "skipped") {
        ++skipped_;
        skipped_bytes_ += std::max<int64_t>(it.bytes, 1);
      }
      finished_bytes_ += std::max<int64_t>(it.bytes, 1);
      k = ++finished_;
    }
    if (mode_ == ProgressMode::None) return;
    if (status == "skipped" && mode_ == ProgressMode::Terminal) return;  // the counts say it
    const std::string out = it.output == "null" ? "" : " -> " + it.output;
    say(log::format("vfpipe batch: [%lld/%zu] %s %s%s: %s", static_cast<long long>(k), items_.size(), status.c_str(),
                    it.input.c_str(), out.c_str(), what.c_str()));
  }

  std::string status_line() {
    std::lock_guard<std::mutex> lk(mu_);
    const double el = static_cast<double>(now_ns() - start_ns_) * 1e-9;
    // Progress by bytes: finished items, plus the done fraction of running ones.
    double bytes = static_cast<double>(finished_bytes_);
    int64_t live_frames = 0;
    for (const auto& l : lanes_) {
      const Item* it = l->item.load();
      if (!it) continue;
      const int64_t f = l->progress.frames.load(), t = l->progress.total.load();
      live_frames += f;
      if (t > 0) bytes += static_cast<double>(std::max<int64_t>(it->bytes, 1)) * std::min(1.0, double(f) / double(t));
    }
    const int64_t frames = frames_ + live_frames;
    const double rate = el > 0 ? static_cast<double>(frames) / el : 0;
    // ETA from the bytes of the items this run processed (skipped ones took no time).
    const double worked = bytes - static_cast<double>(skipped_bytes_);
    const double eta = worked > 0 && el > 1 ? (static_cast<double>(total_bytes_) - bytes) * el / worked : -1;
    return log::format("%lld/%zu items (%lld failed, %d running) | %lld frames, %.0f fps | %s elapsed, ETA %s",
                       static_cast<long long>(finished_), items_.size(), static_cast<long long>(failed_),
                       active_count(), static_cast<long long>(frames), rate, clock_time(el).c_str(),
                       clock_time(eta).c_str());
  }

  // ---- the terminal display: a block of lines redrawn in place; messages go above it.
  int term_width() const {
    winsize ws{};
    if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) return ws.ws_col;
    return 100;
  }
  std::string block() {
    const int w = term_width();
    const auto fit = [w](std::string s) {
      if (static_cast<int>(s.size()) > w - 1) s = s.substr(0, static_cast<size_t>(w - 4)) + "...";
      return s + "\n";
    };
    std::string b = fit("batch: " + status_line());
    for (const auto& l : lanes_) {
      const Item* it = l->item.load();
      if (!it) continue;
      const int64_t f = l->progress.frames.load(), t = l->progress.total.load();
      const double el = static_cast<double>(now_ns() - l->started_ns.load()) * 1e-9;
      std::string pct = t > 0 ? log::format(" %3.0f%%", 100.0 * static_cast<double>(f) / static_cast<double>(t)) : "";
      std::string frames =
          t > 0 ? log::format("%lld/%lld", static_cast<long long>(f), static_cast<long long>(t)) : std::to_string(f);
      b += fit(log::format("  [%s]%s %s frames, %.0f fps  %s",
                           l->device < 0 ? "cpu" : ("gpu" + std::to_string(l->device)).c_str(), pct.c_str(),
                           frames.c_str(), el > 0 ? static_cast<double>(f) / el : 0.0, it->input.c_str()));
    }
    return b;
  }
  void clear_block() {
    std::lock_guard<std::mutex> lk(out_mu_);
    if (drawn_ > 0) std::fprintf(stderr, "\033[%dA\033[J", drawn_);
    drawn_ = 0;
    std::fflush(stderr);
  }
  void redraw() {
    const std::string b = block();
    std::lock_guard<std::mutex> lk(out_mu_);
    std::string out;
    if (drawn_ > 0) out += log::format("\033[%dA\033[J", drawn_);
    out += b;
    std::fputs(out.c_str(), stderr);
    std::fflush(stderr);
    drawn_ = static_cast<int>(std::count(b.begin(), b.end(), '\n'));
  }
  // A message: above the live block (terminal), or one plain line.
  void print_above(const std::string& line) {
    std::lock_guard<std::mutex> lk(out_mu_);
    if (drawn_ > 0) std::fprintf(stderr, "\033[%dA\033[J", drawn_);
    drawn_ = 0;
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  }
  void say(const std::string& line) {
    if (mode_ == ProgressMode::None) return;
    print_above(line + "\n");
  }

  BatchSummary summarize() {
    BatchSummary s;
    s.items = static_cast<int64_t>(items_.size());
    s.done = done_;
    s.skipped = skipped_;
    s.failed = failed_;
    s.abandoned = abandoned_;
    s.stopped_by = stopped_by_;
    nlohmann::json extra = cfg_.report_extra;
    extra["host"] = host_;
    extra["finished"] = iso_time();
    extra["wall_seconds"] = static_cast<double>(now_ns() - start_ns_) * 1e-9;
    extra["ledger"] = ledger_.path();
    if (cfg_.shard.count > 1) extra["shard"] = {{"index", cfg_.shard.index}, {"count", cfg_.shard.count}};
    s.report = make_report(latest_, &items_, extra);
    s.report["totals"]["skipped"] = skipped_;
    s.report["totals"]["abandoned"] = abandoned_;
    s.report["totals"]["frames_this_run"] = frames_;
    if (stopped_by_) s.report["stopped_by_signal"] = stopped_by_;
    return s;
  }

  const std::vector<Item>& items_;
  const BatchConfig& cfg_;
  const ItemFn& fn_;
  Ledger ledger_;
  std::map<std::string, nlohmann::json> latest_;
  std::map<std::string, int> attempts_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  ProgressMode mode_;
  std::string host_ = host_name();
  std::mutex mu_, out_mu_;
  std::atomic<size_t> next_{0};
  std::atomic<int> running_lanes_{0};  // lanes that have left
  std::atomic<bool> stop_new_{false}, abandon_{false};
  int stopped_by_ = 0;
  int64_t start_ns_ = 0, total_bytes_ = 0, finished_bytes_ = 0, skipped_bytes_ = 0, frames_ = 0;
  int64_t finished_ = 0, done_ = 0, skipped_ = 0, failed_ = 0, abandoned_ = 0;
  int drawn_ = 0;
};

}  // namespace

BatchSummary run_batch(const std::vector<Item>& items, const BatchConfig& cfg, const ItemFn& fn) {
  if (cfg.devices.empty()) throw Error(ErrorKind::Usage, "batch: no pipelines to run");
  Batch b(items, cfg, fn);
  BatchSummary s = b.run();
  const std::string path = cfg.report.empty() ? report_path(cfg.ledger_dir, cfg.shard) : cfg.report;
  std::error_code ec;
  if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path(), ec);
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw Error(ErrorKind::Output, "cannot write the report '" + path + "'");
  const std::string text = s.report.dump(1) + "\n";
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) throw Error(ErrorKind::Output, "cannot write the report '" + path + "'");
  s.report["report_path"] = path;
  return s;
}

}  // namespace vfp::batch
