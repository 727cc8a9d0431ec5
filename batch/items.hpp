// The items of a batch: where they come from (folders, globs, list files, stdin), the
// output each one gets (the -o template), and the share of them one task takes (--shard,
// Slurm job arrays, Kubernetes Indexed Jobs).
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace vfp::batch {

struct Item {
  std::string input;       // the path as found (relative paths are relative to the working folder)
  std::string relpath;     // its folder relative to the folder or glob it was found under ("" at the top)
  int64_t bytes = 0;       // size on disk: what shards are balanced by
  int64_t index = 0;       // position in the whole sorted list: {index}
  nlohmann::json options;  // per-item options from a CSV/JSONL list (an object; empty otherwise)
  std::string where;       // "list.csv:12", for messages
  std::string output;      // the expanded template ("null" when there is no output file)
};

struct CollectOptions {
  // Extensions (lowercase, without the dot) taken from folders; empty: the default set
  // (default_extensions()). Globs and list entries are taken whatever their extension.
  std::vector<std::string> extensions;
  bool recursive = true;
};
const std::vector<std::string>& default_extensions();

// Expands the inputs: a folder (walked, sorted), a glob ('clips/*.mp4', '**' not special),
// a file, a URL or synthetic source (taken as they are), or "-" (a plain list on stdin). `lists` are list files (plain,
// .csv, .jsonl; see read_list). The result is sorted by path, without duplicates, with `index` set. Throws Error(Input)
// for a missing input or an empty result.
std::vector<Item> collect(const std::vector<std::string>& inputs, const std::vector<std::string>& lists,
                          const CollectOptions& opt, std::istream& stdin_list);

// A list file: plain text (one path a line; blank lines and lines starting with '#'
// skipped), CSV (a header row naming the columns, one of them `input`; RFC 4180 quoting)
// or JSON Lines (one object a line with an "input" string). The other CSV columns and
// JSON keys are per-item options (values: strings, numbers, booleans). `name` decides the
// format by its extension and appears in messages. Relative paths in the list are taken
// relative to the list file's folder.
std::vector<Item> read_list(std::istream& in, const std::string& name);

// The output template: {stem} (file name without extension), {ext} (without the dot),
// {relpath} (see Item), {index} or {index:N} (zero-padded to N digits), {{ and }} for
// braces. Throws ParseError pointing at an unknown field.
void check_template(const std::string& tmpl);
std::string expand_template(const std::string& tmpl, const Item& item);
// The folder every output of the template lies under (its text before the first field,
// up to the last '/'); "." when the template starts with a field.
std::string template_root(const std::string& tmpl);
// Fills every item's `output` (the item's own "output" option wins over the template) and
// checks that no two items write the same file. "null" stays "null".
void assign_outputs(std::vector<Item>& items, const std::string& tmpl);

// One task's share of the items.
struct Shard {
  int index = 0, count = 1;
  std::string source;  // where it came from: "--shard", "SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX"
};
// "I/N" with 0 <= I < N.
Shard parse_shard(const std::string& text);
// The shard a cluster task is: Slurm's SLURM_ARRAY_TASK_ID (minus SLURM_ARRAY_TASK_MIN) of
// SLURM_ARRAY_TASK_COUNT, or Kubernetes' JOB_COMPLETION_INDEX of `k8s_count` (or the
// VFPIPE_SHARD_COUNT variable). count 1 when none applies.
Shard shard_from_env(const std::function<const char*(const char*)>& env, int k8s_count);
// The items of one shard, balanced by size: the largest first, each to the shard with the
// fewest bytes so far (ties: the lowest shard). Every shard computes the same split from the
// same list; the result keeps the list's order.
std::vector<Item> take_shard(const std::vector<Item>& items, const Shard& shard);

// The GPUs to use: "all" (every device), "none", or a list "0,2". Throws Error(Usage) for
// a device that does not exist (device_count given by the caller: testable without GPUs).
// `visible`: CUDA_VISIBLE_DEVICES where it is set (null otherwise), named in that error,
// since it is the usual reason for fewer GPUs than the machine has.
std::vector<int> parse_gpus(const std::string& spec, int device_count, const char* visible = nullptr);
// The device of each concurrent pipeline: jobs_per_gpu per GPU, interleaved (0,1,0,1,...)
// so that the first pipelines spread over the GPUs; -1 for CPU pipelines when `gpus` is empty.
std::vector<int> pipeline_devices(const std::vector<int>& gpus, int jobs_per_gpu, int cpu_jobs);

}  // namespace vfp::batch
