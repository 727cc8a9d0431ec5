// The batch ledger: one JSON line per finished attempt (done or failed), appended beside the
// outputs, so that a re-run, a re-queued cluster task or a later shard count skips what is
// done and retries what failed. Each task appends to its own file (vfpipe-batch.jsonl, or
// vfpipe-batch.shard-I-of-N.jsonl), locked against a second writer; readers take the newest
// record of each item over all of them.
#pragma once
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "batch/items.hpp"

namespace vfp::batch {

constexpr const char* kLedgerBase = "vfpipe-batch";

// The ledger file of a task in `dir`.
std::string ledger_path(const std::string& dir, const Shard& shard);
// The report file beside it (vfpipe-batch.report.json, or ...shard-I-of-N.report.json).
std::string report_path(const std::string& dir, const Shard& shard);
// The frozen item list of a cluster submission (vfpipe-batch.items.jsonl).
std::string items_path(const std::string& dir);

// Seconds as m:ss or h:mm:ss ("--:--" when unknown or absurd): summaries and ETAs.
std::string clock_time(double s);

// What identifies an item across runs: its input and output paths, absolute.
std::string item_key(const Item& item);

class Ledger {
 public:
  // Opens `path` for appending (creating it and its folder); throws Error(Output) when it is
  // locked by another running vfpipe batch or cannot be written.
  explicit Ledger(const std::string& path);
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;
  // One record, one line, on disk (fdatasync) before returning. Thread-safe.
  void append(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// The newest record of each item key over every ledger of the batch in `dir` (in file
// order; a torn last line of a killed task is skipped). `attempts` (optional) counts the
// records of each key.
std::map<std::string, nlohmann::json> read_ledgers(const std::string& dir, std::map<std::string, int>* attempts);

// A report: totals and one entry per item (from records). `expected` (optional): the item
// list; those without a record are listed as "missing".
nlohmann::json make_report(const std::map<std::string, nlohmann::json>& latest, const std::vector<Item>* expected,
                           const nlohmann::json& extra);
// The report's totals as text, and its failed and missing items with their reasons.
std::string report_text(const nlohmann::json& report);

// Writes the JSON list of items (with sizes and per-item options) that every shard reads.
void write_items(const std::string& path, const std::vector<Item>& items);

}  // namespace vfp::batch
