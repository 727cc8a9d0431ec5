// `vfpipe batch`: many inputs through one filter chain, several pipelines at once on every
// GPU (or on the CPU), with a ledger that makes re-runs resume, and Slurm job arrays for
// clusters. The bookkeeping lives in batch/; this file turns options into pipelines.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <thread>

#include "apps/vfpipe/cli.hpp"
#include "apps/vfpipe/run.hpp"
#include "batch/items.hpp"
#if VFPIPE_HAVE_LIBAV
#include "io/libav.hpp"
#endif
#include "batch/ledger.hpp"
#include "batch/runner.hpp"
#include "batch/slurm.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/parallel.hpp"
#include "core/signals.hpp"
#include "pipeline/chain.hpp"
#include "stages/builtin.hpp"
#if VFPIPE_HAVE_CUDA
#include "core/gpu.hpp"
#include "cuda/conv.hpp"
#endif

namespace vfp {
namespace {

namespace fs = std::filesystem;

// Concurrent pipelines per GPU when --jobs-per-gpu is not given (docs/batch.md#throughput).
constexpr int kDefaultJobsPerGpu = 4;

const char* kBatchHelp = R"(
Inputs: folders (walked recursively; --ext picks the extensions), files, quoted globs
('clips/*.mp4'), list files (--list: one path a line, .csv with an 'input' column, or .jsonl
objects with "input"; other columns/keys are per-item options: filters, codec, crf, preset,
b:v, g, pix_fmt, ss, t, to, frames, r, an, output), or '-' for a list on stdin.
Output template fields: {stem} {ext} {relpath} (the folder under the input folder) {index}
{index:N} (zero-padded). -o null: no output (throughput runs).

Each output is written under a hidden temporary name and renamed when complete. A ledger
(vfpipe-batch.jsonl beside the outputs) records every item done or failed: run the same
command again and done items are skipped, failed ones retried. An input that breaks midway
fails its item; the frames decoded are kept as NAME.partial.EXT.
Ctrl-C: finish the running items and stop; twice: abandon them (nothing partial stays).

Examples:
  vfpipe batch clips/ -f "median=radius=2,conv=gauss" -o 'out/{relpath}/{stem}.mp4' -crf 20
  vfpipe batch --list jobs.csv -o 'out/{stem}.mkv' -c:v ffv1 --gpus 0,1 --jobs-per-gpu 4
  find /data -name '*.mov' | vfpipe batch - -o 'out/{index:05}.mp4'
  vfpipe batch clips/ -o 'out/{stem}.mp4' --slurm --partition gpu --gpus-per-task 1 --shards 16 --wait
  vfpipe batch --merge-reports out/           # one report from the shards' ledgers
Exit status: 0 every item done (or done before), 1 some failed, 2 bad usage, 130/143 stopped.
)";

struct BatchArgs {
  std::vector<std::string> inputs, lists;
  std::string output;
  std::string ext;
  bool no_recursive = false;
  std::string gpus = "all";
  int jobs_per_gpu = 0, jobs = 0;
  int retries = 1;
  bool redo = false, dry_run = false;
  std::string ledger_dir, report, shard, progress = "auto";
  int shard_count = 0;
  double status_every = 30;
  // Slurm
  bool slurm = false, wait = false;
  std::string partition, time, account;
  int gpus_per_task = 0, cpus_per_task = 0, array_max = 0, shards = 0;
  std::vector<std::string> sbatch_args;
  std::string merge;
};

// A stage's own output file (the mmp stage's file=) names one file for every item, which
// the items would write over each other at once: refused before anything runs.
void refuse_stage_files(const std::vector<std::unique_ptr<Stage>>& stages, const std::string& where) {
  for (const auto& st : stages)
    for (const std::string& f : st->output_files())
      throw Error(ErrorKind::Usage, where + ": " + st->name() + " writes '" + f +
                                        "' of its own, which every item of a batch would write over; leave it out "
                                        "(vfpipe mmp encode codes one file to one .mmp)");
}

// `key`=`value` in a list of KEY=VALUE options, in place of the command line's value of the
// same key.
void set_pair(std::vector<std::string>& pairs, const std::string& key, const std::string& value) {
  pairs.erase(std::remove_if(pairs.begin(), pairs.end(),
                             [&](const std::string& p) { return p.compare(0, key.size() + 1, key + "=") == 0; }),
              pairs.end());
  pairs.push_back(key + "=" + value);
}

// A per-item colour tag (color_primaries, ...), checked now as a typo in aspect is.
void set_colour_tag(RunArgs& a, const std::string& key, const std::string& value, const std::string& where) {
  std::string& field = key == "color_primaries" ? a.color_primaries
                       : key == "color_trc"     ? a.color_trc
                       : key == "colorspace"    ? a.colorspace
                                                : a.color_range;
  field = value;
#if VFPIPE_HAVE_LIBAV
  VideoOptions v;
  v.color_primaries = a.color_primaries;
  v.color_trc = a.color_trc;
  v.colorspace = a.colorspace;
  v.color_range = a.color_range;
  try {
    libav_check_colour_tags(v);
  } catch (const Error& e) {
    throw Error(ErrorKind::Usage, where + ": " + e.what());
  }
#endif
}

// Per-item options of a list file, applied over the command line's.
void apply_item_options(RunArgs& a, const nlohmann::json& o, const std::string& where) {
  for (const auto& [k, v] : o.items()) {
    const auto text = [&, key = k, val = v]() -> std::string {
      if (val.is_string()) return val.get<std::string>();
      if (val.is_number()) return val.dump();
      throw Error(ErrorKind::Usage, where + ": '" + key + "' must be a string or number");
    };
    const auto number = [&, key = k, val = v]() -> double {
      if (val.is_number()) return val.get<double>();
      char* end = nullptr;
      const std::string s = val.is_string() ? val.get<std::string>() : std::string();
      const double d = std::strtod(s.c_str(), &end);
      if (s.empty() || *end) throw Error(ErrorKind::Usage, where + ": '" + key + "' must be a number");
      return d;
    };
    const auto flag = [&, key = k, val = v]() -> bool {
      if (val.is_boolean()) return val.get<bool>();
      if (val.is_number()) return val.get<double>() != 0;
      const std::string s = val.is_string() ? val.get<std::string>() : "";
      if (s == "true" || s == "1" || s == "yes") return true;
      if (s == "false" || s == "0" || s == "no" || s.empty()) return false;
      throw Error(ErrorKind::Usage, where + ": '" + key + "' must be true or false");
    };
    const auto in_range = [&, key = k](double d, double lo, double hi) {
      if (!(d >= lo && d <= hi))
        throw Error(ErrorKind::Usage, log::format("%s: '%s' must be in %g..%g", where.c_str(), key.c_str(), lo, hi));
      return d;
    };
    // A value parsed now, so that a typo fails the list before anything runs, not its item.
    const auto checked = [&](Rational (*parse)(const std::string&), const std::string& value) {
      try {
        parse(value);
      } catch (const Error& e) {
        throw Error(ErrorKind::Usage, where + ": " + e.what());
      }
      return value;
    };
    if (k == "output") continue;  // batch::assign_outputs
    // ffmpeg's options of the video encoder, as `vfpipe run` maps them to --encoder-opt.
    const char* encoder_key = k == "profile" ? "profile" : ffmpeg_encoder_option(k);
    const auto suffix = [&, key = k](const std::string& prefix) {
      if (key.compare(0, prefix.size(), prefix) != 0) return std::string();
      if (key.size() == prefix.size())
        throw Error(ErrorKind::Usage, where + ": '" + key + "' names no key (e.g. " + prefix + "title)");
      return key.substr(prefix.size());
    };
    if (encoder_key)
      set_pair(a.encoder_opts, encoder_key, text());
    else if (const std::string opt = suffix("encoder_opt:"); !opt.empty())
      set_pair(a.encoder_opts, opt, text());
    else if (const std::string tag = suffix("metadata:"); !tag.empty())
      set_pair(a.metadata, tag, text());
    else if (k == "filters" || k == "f" || k == "vf")
      a.filters = text();
    else if (k == "codec" || k == "c:v")
      a.codec = text();
    else if (k == "crf")
      a.crf = static_cast<int>(number());
    else if (k == "preset")
      a.preset = text();
    else if (k == "b:v" || k == "bitrate")
      a.bitrate = text();
    else if (k == "g" || k == "gop")
      a.gop = static_cast<int>(number());
    else if (k == "aspect")
      a.aspect = checked(parse_display_aspect, text());
    else if (k == "pix_fmt")
      a.pix_fmt = text();
    else if (k == "color_primaries" || k == "color_trc" || k == "colorspace" || k == "color_range")
      set_colour_tag(a, k, text(), where);
    else if (k == "ss" || k == "start")
      a.start = number();
    else if (k == "t" || k == "duration")
      a.duration = number();
    else if (k == "to")
      a.to = number();
    else if (k == "frames" || k == "frames:v")
      a.frames = static_cast<int64_t>(number());
    else if (k == "r" || k == "rate")
      a.rate = checked(parse_output_rate, text());
    else if (k == "an" || k == "no_audio")
      a.no_audio = flag();
    else if (k == "sn" || k == "no_subtitles")
      a.no_subtitles = flag();
    else if (k == "dn" || k == "no_data")
      a.no_data = flag();
    else if (k == "c:a" || k == "audio_codec")
      a.audio_codec = text();
    else if (k == "c:s" || k == "subtitle_codec")
      a.subtitle_codec = text();
    else if (k == "b:a" || k == "audio_bitrate")
      a.audio_bitrate = text();
    else if (k == "ar" || k == "audio_rate")
      a.audio_rate = static_cast<int>(in_range(number(), 1000, 768000));
    else if (k == "ac" || k == "audio_channels")
      a.audio_channels = static_cast<int>(in_range(number(), 1, 64));
    else if (k == "codec_params")
      a.codec_params = text();
    else
      throw Error(ErrorKind::Usage,
                  where + ": unknown per-item option '" + k +
                      "' (known: filters, codec, crf, preset, b:v, g, codec_params, tune, profile:v, "
                      "level, maxrate, bufsize, bf, encoder_opt:KEY, metadata:KEY, aspect, pix_fmt, color_primaries, "
                      "color_trc, colorspace, color_range, ss, t, "
                      "to, frames, r, an, sn, dn, c:a, b:a, ar, ac, c:s, output)");
  }
}

bool stages_have_cuda(const std::vector<std::unique_ptr<Stage>>& stages) {
  for (const auto& s : stages)
    if (!s->has_cuda()) return false;
  return true;
}

void keep_decoders(int max_idle) {
#if VFPIPE_HAVE_LIBAV
  keep_nvdec_decoders(max_idle);
#else
  (void)max_idle;
#endif
}

std::string decoder_of(const Source& src) {
#if VFPIPE_HAVE_LIBAV
  return libav_decoder_of(src);
#else
  (void)src;
  return "";
#endif
}

// Every GPU's context (and NVDEC device, when files may be decoded there) started as soon as
// the GPUs are known, all at once, each lane waiting only for its own GPU: started inside the
// items, every lane would wait for each GPU's in turn (the NVDEC devices are made under one
// lock), and GPU 0's lanes would wait for GPU 1's half second. Errors are left for the items,
// which report them.
class GpuPreparation {
 public:
  void start(const std::vector<int>& gpus, bool nvdec) {
    for (int g : gpus)
      ready_[g] = std::async(std::launch::async, [g, nvdec] {
#if VFPIPE_HAVE_CUDA
                    try {
                      cuda::primary_context(g);  // outside libav's lock: the slow part
#if VFPIPE_HAVE_LIBAV
                      if (nvdec) prepare_nvdec(g, nullptr);
#endif
                    } catch (const std::exception& e) {
                      log::debug("GPU %d not prepared: %s", g, e.what());
                    }
#endif
                    (void)g;
                    (void)nvdec;
                  }).share();
  }
  void wait(int gpu) const {
    if (auto f = ready_.find(gpu); f != ready_.end()) f->second.wait();
  }

 private:
  std::map<int, std::shared_future<void>> ready_;
};

// One item: its pipeline, start to end, on the lane's device.
batch::ItemResult run_item(const RunArgs& base, const batch::ItemJob& job, const GpuPreparation& gpus) {
  const int64_t t_open = now_ns();
  gpus.wait(job.device);
  RunArgs a = base;
  apply_item_options(a, job.item->options, job.item->where);
  a.input = job.item->input;
  a.output = job.write_to;
  a.overwrite = true;  // the temporary name; the final one is the batch's business
  a.no_overwrite = false;
  Backend backend = job.device >= 0 ? Backend::CUDA : Backend::CPU;
#if VFPIPE_HAVE_CUDA
  if (job.device >= 0) cuda::set_device(job.device);
#endif
  auto stages = build_stages(a.filters);
  if (backend == Backend::CUDA && !stages_have_cuda(stages)) backend = Backend::CPU;  // a stage without one
  auto src = open_source(a.input, source_options(a, backend));
  std::unique_ptr<Sink> sink = open_output(a, backend, *src);
  Chain chain = Chain::build(std::move(stages), src->spec(), sink->accepted_formats(), forced_format(a));
  sink->open(chain.output());
  EngineConfig cfg = engine_config(a, false, backend, *src, chain);
  cfg.stop = job.stop;
  cfg.max_records = 20000;  // per-stage statistics without holding every frame of a long clip
  int64_t total = src->frame_count();
  if (a.frames >= 0 && (total < 0 || a.frames < total)) total = a.frames;
  job.progress->total.store(total);
  cfg.progress = [&job](int64_t done, int64_t) { job.progress->frames.store(done); };
  const double open_s = 1e-9 * static_cast<double>(now_ns() - t_open);
  const int64_t t_run = now_ns();
  RunResult res = run_pipeline(*src, chain, *sink, cfg);
  const double run_s = 1e-9 * static_cast<double>(now_ns() - t_run);

  batch::ItemResult r;
  r.frames = res.report.frames_out;
  r.seconds = res.report.wall_s;
  nlohmann::json stages_ms = nlohmann::json::object();
  for (size_t i = 0; i < res.report.steps.size(); ++i) {
    const Summary s = res.report.step_summary(i);
    if (s.count > 0) stages_ms[res.report.steps[i]] = {{"mean", s.mean}, {"p50", s.p50}, {"p99", s.p99}};
  }
  r.details = {{"backend", res.report.backend},
               {"decoder", decoder_of(*src)},
               {"open_s", open_s},                        // opening the input, output and chain
               {"run_s", run_s},                          // the engine: its buffers, the frames, draining
               {"engine_start_s", res.report.start_s},    // of which its setup
               {"engine_finish_s", res.report.finish_s},  // and its teardown
               {"device", res.report.device},
               {"chain", res.report.chain},
               {"input_spec", res.report.input_spec},
               {"output_spec", res.report.output_spec},
               {"fps", res.report.fps()},
               {"codec_threads", a.codec_threads},
               {"steps_ms", stages_ms}};
  // Closing, in the order the scope would (the chain's stages, the output, then the input
  // with its decoder), timed: with short items it is much of a pipeline's time.
  const int64_t t_close = now_ns();
  { const Chain closing = std::move(chain); }
  sink.reset();
  const int64_t t_output_closed = now_ns();
  src.reset();
  r.details["close_output_s"] = 1e-9 * static_cast<double>(t_output_closed - t_close);
  r.details["close_input_s"] = 1e-9 * static_cast<double>(now_ns() - t_output_closed);
  if (res.error) {
    try {
      std::rethrow_exception(res.error);
    } catch (const Error& e) {
      r.error = e.what();
      r.input_error = e.kind() == ErrorKind::Input;
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    return r;
  }
  if (r.frames == 0) {
    r.error = "no frames were processed";
    return r;
  }
  r.ok = true;
  return r;
}

// Pipelines per GPU within the device's constant-memory banks (conv stages reserve one per
// frame in flight): the default is lowered to fit, an explicit --jobs-per-gpu too, with a warning.
int fit_constant_banks(const std::vector<std::unique_ptr<Stage>>& stages, int depth, int requested) {
  int per_slot = 0;
  for (const auto& s : stages) per_slot += s->constant_banks_per_slot();
  const int wanted = requested > 0 ? requested : kDefaultJobsPerGpu;
  if (per_slot == 0) return wanted;
#if VFPIPE_HAVE_CUDA
  const int banks = cuda::kConvBanks;
#else
  const int banks = 16;
#endif
  const int fit = banks / (per_slot * depth);
  if (fit < 1)
    throw Error(ErrorKind::Usage, log::format("the chain needs %d constant-memory banks per pipeline (%d per frame x "
                                              "--depth %d); a GPU has %d: use fewer conv stages or a smaller --depth",
                                              per_slot * depth, per_slot, depth, banks));
  if (wanted <= fit) return wanted;
  if (requested > 0)
    log::warn(
        "--jobs-per-gpu %d: the chain's conv stages need %d constant-memory banks per pipeline, of %d on a GPU; "
        "running %d pipelines per GPU (a smaller --depth allows more)",
        requested, per_slot * depth, banks, fit);
  return fit;
}

std::string self_path() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("vfpipe") : p.string();
}

int merge_command(const std::string& dir, bool quiet) {
  if (!fs::is_directory(dir)) throw Error(ErrorKind::Input, "--merge-reports: '" + dir + "' is not a folder");
  const auto latest = batch::read_ledgers(dir, nullptr);
  if (latest.empty()) throw Error(ErrorKind::Input, "--merge-reports: no vfpipe batch ledger in '" + dir + "'");
  std::vector<batch::Item> expected;
  const std::string items = batch::items_path(dir);
  const bool have_items = fs::exists(items);
  if (have_items) {
    std::ifstream in(items);
    expected = batch::read_list(in, items);
    batch::assign_outputs(expected, "null");
  }
  nlohmann::json rep = batch::make_report(latest, have_items ? &expected : nullptr, {{"merged_from", dir}});
  const std::string path = batch::report_path(dir, batch::Shard{});
  write_file(path, rep.dump(1) + "\n", "report");
  if (!quiet) std::fprintf(stderr, "%s  report: %s\n", batch::report_text(rep).c_str(), path.c_str());
  return rep["totals"]["failed"].get<int64_t>() > 0 || rep["totals"]["missing"].get<int64_t>() > 0 ? 1 : 0;
}

int slurm_command(const BatchArgs& b, const RunArgs& a, const std::vector<batch::Item>& items,
                  const std::string& ledger_dir, const CLI::App& cli) {
  const std::string dir = fs::absolute(ledger_dir).lexically_normal().string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  batch::SlurmOptions o;
  o.vfpipe = self_path();
  o.workdir = fs::current_path().string();
  o.items = batch::items_path(dir);
  o.config = (fs::path(dir) / "vfpipe-batch.job.toml").string();
  o.log_dir = dir;
  o.shards = b.shards > 0 ? b.shards : static_cast<int>(std::min<size_t>(items.size(), 32));
  o.shards = std::min<int>(o.shards, static_cast<int>(items.size()));
  o.array_max = b.array_max;
  o.partition = b.partition;
  o.time = b.time;
  o.account = b.account;
  o.gpus_per_task = b.gpus_per_task;
  o.cpus_per_task = b.cpus_per_task;
  o.sbatch_args = b.sbatch_args;
  batch::write_items(o.items, items);
  // The tasks' options: exactly what was given here, minus what only the submitter uses.
  write_file(o.config, cli.get_parent()->config_to_str(false, true), "options file");
  const std::string script = (fs::path(dir) / "vfpipe-batch.sbatch").string();
  write_file(script, batch::sbatch_script(o), "sbatch script");
  log::info("%zu items in %d array tasks; wrote %s, %s and %s", items.size(), o.shards, script.c_str(),
            o.config.c_str(), o.items.c_str());
  int status = 0;
  const std::string job = batch::submit(script, b.wait, &status);
  if (!b.wait) {
    std::printf("%s\n", job.c_str());
    log::info("submitted Slurm job %s; when it has finished: vfpipe batch --merge-reports %s", job.c_str(),
              dir.c_str());
    return 0;
  }
  log::info("Slurm job %s finished (sbatch status %d); merging the shards' ledgers", job.c_str(), status);
  return merge_command(dir, a.quiet);
}

int batch_command(BatchArgs& b, RunArgs& a, const CLI::App& cli) {
  const auto t_command = std::chrono::steady_clock::now();
  apply_log_options(a);
  if (!b.merge.empty()) return merge_command(b.merge, a.quiet);
  if (b.inputs.empty() && b.lists.empty())
    throw Error(ErrorKind::Usage, "batch: no inputs (folders, files, globs, --list FILE, or - for a list on stdin)");
  if (b.output.empty())
    throw Error(ErrorKind::Usage,
                "batch: -o is required: an output template such as 'out/{relpath}/{stem}.mp4', "
                "or null for no output");
  install_signal_handlers(3);

  // Everything is checked before the first item starts: the template, the filters, each
  // item's own options.
  if (b.output != "null") batch::check_template(b.output);
  auto stages = build_stages(a.filters);
  refuse_stage_files(stages, "-f");
  forced_format(a);
  for (const std::string& m : a.map) parse_stream_map(m);
  batch::CollectOptions co;
  co.recursive = !b.no_recursive;
  for (size_t p = 0; !b.ext.empty() && p <= b.ext.size();) {
    const size_t c = b.ext.find(',', p);
    std::string e = b.ext.substr(p, c == std::string::npos ? std::string::npos : c - p);
    if (!e.empty() && e[0] == '.') e.erase(0, 1);
    for (char& ch : e) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (!e.empty()) co.extensions.push_back(e);
    if (c == std::string::npos) break;
    p = c + 1;
  }
  std::vector<batch::Item> items = batch::collect(b.inputs, b.lists, co, std::cin);
  std::map<std::string, bool> filters_checked;
  for (const batch::Item& it : items) {
    RunArgs t = a;
    apply_item_options(t, it.options, it.where);
    if (!filters_checked[t.filters]) {
      try {
        refuse_stage_files(build_stages(t.filters), it.where);
      } catch (const ParseError& e) {
        throw Error(ErrorKind::Usage, it.where + ": " + e.pretty());
      }
      filters_checked[t.filters] = true;
    }
    if (!t.pix_fmt.empty()) forced_format(t);
  }
  batch::assign_outputs(items, b.output);
  const std::string ledger_dir = !b.ledger_dir.empty() ? b.ledger_dir
                                 : b.output == "null"  ? "."
                                                       : batch::template_root(b.output);

  if (b.slurm) return slurm_command(b, a, items, ledger_dir, cli);

  const batch::Shard shard = !b.shard.empty()
                                 ? batch::parse_shard(b.shard)
                                 : batch::shard_from_env([](const char* n) { return std::getenv(n); }, b.shard_count);
  const std::vector<batch::Item> mine = batch::take_shard(items, shard);

  const Backend backend = choose_backend(a.device, stages);
  std::vector<int> gpus;
#if VFPIPE_HAVE_CUDA
  if (backend == Backend::CUDA)
    gpus = batch::parse_gpus(b.gpus, cuda::device_count(), std::getenv("CUDA_VISIBLE_DEVICES"));
#endif
  if (backend == Backend::CUDA && gpus.empty() && a.device == "cuda")
    throw Error(ErrorKind::Usage, "--device cuda with --gpus none");
  GpuPreparation preparation;
  if (!b.dry_run) preparation.start(gpus, a.hwaccel != "none");
  // CPU pipelines share the process's pool for the stages; a few at once keep the decoders
  // and encoders (their own threads) busy.
  const int cpu_jobs = b.jobs > 0 ? b.jobs : std::max(1, std::min(4, cpu_threads() / 2));
  const int depth = a.depth > 0 ? a.depth : default_depth(true, backend, stages_of(stages));
  const int jobs_per_gpu = gpus.empty() ? 0 : fit_constant_banks(stages, depth, b.jobs_per_gpu);
#if VFPIPE_HAVE_CUDA
  // Items of the same frame size reuse the last ones' frame memory: allocating and freeing
  // it serialises the lanes of every GPU in the driver (docs/batch.md, concurrency).
  if (!gpus.empty()) cuda::enable_frame_memory_reuse(size_t{2} << 30);
#endif
  batch::BatchConfig cfg;
  cfg.devices = batch::pipeline_devices(gpus, jobs_per_gpu, cpu_jobs);
  cfg.retries = b.retries;
  cfg.existing = a.overwrite      ? batch::Existing::Overwrite
                 : a.no_overwrite ? batch::Existing::Skip
                                  : batch::Existing::Refuse;
  cfg.redo = b.redo;
  cfg.ledger_dir = ledger_dir;
  cfg.shard = shard;
  cfg.progress = b.progress == "terminal" ? batch::ProgressMode::Terminal
                 : b.progress == "plain"  ? batch::ProgressMode::Plain
                 : b.progress == "none"   ? batch::ProgressMode::None
                                          : batch::ProgressMode::Auto;
  cfg.plain_every_s = b.status_every;
  cfg.report = b.report;
  cfg.quiet = a.quiet;
  cfg.signal_count = &signal_count();
  cfg.stop_signal = &stop_flag();
  cfg.report_extra = {{"filters", a.filters}, {"output_template", b.output}, {"backend", backend_name(backend)}};

  if (b.dry_run) {
    std::printf("%zu items", items.size());
    if (shard.count > 1) std::printf(", %zu in shard %d/%d", mine.size(), shard.index, shard.count);
    std::printf("; %zu pipelines; ledger in %s\n", cfg.devices.size(), ledger_dir.c_str());
    for (const batch::Item& it : mine)
      std::printf("  %s -> %s (%.1f MB)\n", it.input.c_str(), it.output.c_str(), static_cast<double>(it.bytes) / 1e6);
    return 0;
  }
  if (mine.empty()) {
    log::info("shard %d/%d has no items", shard.index, shard.count);
    return 0;
  }
  RunArgs base = a;
  // The pipelines' decoders and encoders share the cores instead of each taking them all
  // (libavcodec's default): cores / pipelines threads each, unless --codec-threads says.
  if (!cli.get_option("--codec-threads")->count())
    base.codec_threads = std::max(1, cpu_threads() / static_cast<int>(cfg.devices.size()));
  // A lane's next file takes the NVDEC decoder its last one left (when the format matches).
  if (!gpus.empty()) keep_decoders(static_cast<int>(cfg.devices.size()));
  const auto t_lanes = std::chrono::steady_clock::now();
  // Where a short batch's time goes before its lanes start (docs/perf.md, multi-GPU).
  cfg.report_extra["setup_s"] = std::chrono::duration<double>(t_lanes - t_command).count();
  batch::BatchSummary s = batch::run_batch(
      mine, cfg, [&base, &preparation](const batch::ItemJob& job) { return run_item(base, job, preparation); });
  if (!a.quiet)
    std::fprintf(stderr, "%s  report: %s\n", batch::report_text(s.report).c_str(),
                 s.report["report_path"].get<std::string>().c_str());
  if (!gpus.empty()) {
    // Every output, the ledger and the report are closed. Ending the process here lets the
    // driver drop the GPUs' contexts, decoders and memory at once, where the CUDA runtime's
    // exit handlers and the kept decoders' release take each in turn: 0.2 s of a short
    // two-GPU batch (docs/perf.md, multi-GPU batch).
    std::fflush(nullptr);
    std::_Exit(s.exit_status());
  }
  return s.exit_status();
}

}  // namespace

void add_batch_command(CLI::App& app, Subcommands& out) {
  auto b = std::make_shared<BatchArgs>();
  auto a = std::make_shared<RunArgs>();
  auto* c =
      app.add_subcommand("batch", "process many files: folders, globs, lists; every GPU; resumable; Slurm arrays");
  c->footer(kBatchHelp);
  c->configurable();  // its options can come from the global --config file (what --slurm writes)
  c->add_option("inputs", b->inputs, "folders, files, quoted globs, or - (a list on stdin)")->configurable(false);
  c->add_option("-i,--input", b->inputs, "an input (folder, file, glob); repeatable")->configurable(false);
  c->add_option("--list", b->lists, "list file: paths one a line, .csv with an 'input' column, or .jsonl")
      ->configurable(false);
  c->add_option("-o,--output", b->output, "output template: {stem} {ext} {relpath} {index} {index:N}; or null");
  c->add_option("-f,--filters,--vf", a->filters, "filter chain for every item, e.g. \"median=radius=2,conv=gauss\"");
  c->add_option("--ext", b->ext, "extensions taken from folders, e.g. mp4,mkv (default: common video files and .y4m)");
  c->add_flag("--no-recursive", b->no_recursive, "folders: only their top level");
  c->add_option("--gpus", b->gpus, "GPUs to use: all, none, or a list such as 0,2")->capture_default_str();
  c->add_option("--jobs-per-gpu", b->jobs_per_gpu,
                "concurrent pipelines per GPU (default " + std::to_string(kDefaultJobsPerGpu) + ", docs/batch.md)")
      ->check(CLI::Range(1, 64));
  c->add_option("-j,--jobs", b->jobs, "concurrent pipelines on the CPU backend (default: cores/2, at most 4)")
      ->check(CLI::Range(1, 256));
  c->add_option("--retries", b->retries, "further attempts of a failed item in this run")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  c->add_flag("--redo", b->redo, "process items the ledger lists as done (their outputs are replaced)");
  c->add_option("--ledger-dir", b->ledger_dir, "folder of the ledger and report (default: the template's top folder)");
  c->add_option("--report", b->report, "the JSON report's path (default: beside the ledger)");
  c->add_option("--shard", b->shard, "take shard I of N (I/N, balanced by size); default from SLURM_ARRAY_TASK_ID")
      ->configurable(false);
  c->add_option("--shard-count", b->shard_count,
                "shards of a Kubernetes Indexed Job (with JOB_COMPLETION_INDEX; or VFPIPE_SHARD_COUNT)")
      ->check(CLI::Range(1, 1000000));
  c->add_option("--progress", b->progress,
                "auto (a live display on a terminal, else plain lines), terminal, plain, none")
      ->check(CLI::IsMember({"auto", "terminal", "plain", "none"}))
      ->capture_default_str()
      ->configurable(false);
  c->add_option("--status-every", b->status_every, "plain progress: a status line every S seconds")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  c->add_flag("--dry-run", b->dry_run, "list the items and their outputs, run nothing")->configurable(false);
  add_common_options(c, *a);
  // Cluster
  const char* g = "Slurm";
  c->add_flag("--slurm", b->slurm, "submit the batch as a Slurm job array (sbatch) instead of running it here")
      ->group(g)
      ->configurable(false);
  c->add_option("--partition", b->partition, "sbatch --partition")->group(g)->configurable(false);
  c->add_option("--gpus-per-task", b->gpus_per_task, "sbatch --gpus-per-task")->group(g)->configurable(false);
  c->add_option("--cpus-per-task", b->cpus_per_task, "sbatch --cpus-per-task")->group(g)->configurable(false);
  c->add_option("--array-max", b->array_max, "at most M array tasks at once (--array=0-N%M)")
      ->group(g)
      ->configurable(false);
  c->add_option("--shards", b->shards, "array tasks (default: items, at most 32)")
      ->check(CLI::Range(1, 100000))
      ->group(g)
      ->configurable(false);
  c->add_option("--time", b->time, "sbatch --time")->group(g)->configurable(false);
  c->add_option("--account", b->account, "sbatch --account")->group(g)->configurable(false);
  c->add_option("--sbatch-arg", b->sbatch_args, "another #SBATCH line, e.g. --mem=16G (repeatable)")
      ->group(g)
      ->configurable(false);
  c->add_flag("--wait", b->wait, "wait for the array to finish, then merge the shards' reports")
      ->group(g)
      ->configurable(false);
  c->add_option("--merge-reports", b->merge, "merge the ledgers in DIR (every shard's) into one report, run nothing")
      ->group(g)
      ->configurable(false);
  out.push_back({c, [b, a, c] { return batch_command(*b, *a, *c); }});
}

}  // namespace vfp
