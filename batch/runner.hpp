// Runs the items of a batch: several pipelines at once (each bound to one GPU, or on the
// CPU), every output written under a temporary name and renamed when complete, the ledger
// kept, failures retried, a live display or plain progress lines, and a final report.
// What one item does (open, filter, write) is the caller's function: this part knows files,
// order and bookkeeping, not video.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "batch/items.hpp"

namespace vfp::batch {

// What one attempt at an item gives back.
struct ItemResult {
  bool ok = false;
  std::string error;         // why not: one line
  bool input_error = false;  // the input failed (ErrorKind::Input): damaged or unreadable
  int64_t frames = 0;
  double seconds = 0;
  nlohmann::json details = nlohmann::json::object();  // per-stage times etc.: into the ledger and the report
  // The input broke after some frames were written (they are kept as NAME.partial.EXT).
  bool damaged_input() const { return input_error && frames > 0; }
};

// A running item's counters for the progress display (set by the item's thread).
struct ItemProgress {
  std::atomic<int64_t> frames{0};
  std::atomic<int64_t> total{-1};  // -1: unknown
};

struct ItemJob {
  const Item* item = nullptr;
  std::string write_to;  // the output to write now: a temporary name beside the final one ("null": none)
  int device = -1;       // the GPU this pipeline is bound to; -1: CPU
  int attempt = 1;       // 1 for the first try of this item, counting earlier runs
  const std::atomic<int>* stop = nullptr;  // non-zero: the item is abandoned; stop soon
  ItemProgress* progress = nullptr;
};
using ItemFn = std::function<ItemResult(const ItemJob&)>;

enum class Existing { Refuse, Overwrite, Skip };  // a final output that the ledger does not know

enum class ProgressMode { Auto, Terminal, Plain, None };

struct BatchConfig {
  std::vector<int> devices = {-1};  // one entry per concurrent pipeline: its GPU, or -1 (CPU)
  int retries = 0;                  // further attempts of a failed item in this run
  Existing existing = Existing::Refuse;
  bool redo = false;       // process items the ledger lists as done
  std::string ledger_dir;  // where the ledger and the report go
  Shard shard;
  ProgressMode progress = ProgressMode::Auto;
  double plain_every_s = 30;  // plain mode: a status line this often (and one per finished item)
  std::string report;         // the JSON report's path; "" : beside the ledger
  bool quiet = false;         // no display, no summary
  // Signals (core/signals.hpp, injectable for tests): the first finishes the items in
  // flight and starts no new one; the second, or a SIGTERM, abandons them.
  const std::atomic<int>* signal_count = nullptr;
  const std::atomic<int>* stop_signal = nullptr;
  nlohmann::json report_extra = nlohmann::json::object();  // e.g. the chain, the command line
};

struct BatchSummary {
  int64_t items = 0, done = 0, skipped = 0, failed = 0, abandoned = 0;
  int stopped_by = 0;  // the signal that stopped the batch, or 0
  nlohmann::json report;
  int exit_status() const { return stopped_by ? 128 + stopped_by : failed > 0 ? 1 : 0; }
};

// The temporary name an item's output is written under (hidden, beside the final file or
// folder, with the same extension), and where a damaged input's frames are kept.
std::string temporary_output(const std::string& output);
std::string partial_output(const std::string& output);

BatchSummary run_batch(const std::vector<Item>& items, const BatchConfig& cfg, const ItemFn& fn);

}  // namespace vfp::batch
