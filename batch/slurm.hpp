// Scale-out on a Slurm cluster: `vfpipe batch --slurm` freezes the item list and the
// options beside the ledger, writes an sbatch script whose array tasks are the shards (each
// finds its share through SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT), submits it with
// sbatch, and can wait for it and merge the shards' ledgers into one report.
#pragma once
#include <string>
#include <vector>

namespace vfp::batch {

struct SlurmOptions {
  std::string vfpipe;   // the program the tasks run (absolute)
  std::string workdir;  // the tasks' working folder (relative paths in the options)
  std::string config;   // the options file the tasks read (--config)
  std::string items;    // the frozen item list (--list)
  std::string log_dir;  // where slurm-%A_%a.out go
  int shards = 1;       // array tasks
  int array_max = 0;    // at most this many at once (0: no limit)
  std::string partition, time, account, job_name = "vfpipe-batch";
  int gpus_per_task = 0, cpus_per_task = 0;
  std::vector<std::string> sbatch_args;  // more #SBATCH lines, e.g. "--mem=16G"
};

// The sbatch script (bash, #SBATCH lines, one exec of vfpipe batch).
std::string sbatch_script(const SlurmOptions& o);
// A word for bash: single-quoted where needed.
std::string shell_quote(const std::string& s);

// Runs `sbatch --parsable [--wait] SCRIPT`; returns the job id. With `wait`, returns when
// every task has ended (sbatch's own status is then that of the job; the caller merges the
// ledgers). Throws Error(Output) when sbatch is missing or refuses the job.
std::string submit(const std::string& script, bool wait, int* wait_status);

}  // namespace vfp::batch
