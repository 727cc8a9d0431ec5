#include "batch/slurm.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"
#include "core/log.hpp"

extern char** environ;

namespace vfp::batch {

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+./:=,@%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string sbatch_script(const SlurmOptions& o) {
  std::string s = "#!/bin/bash\n";
  s += "# Written by `vfpipe batch --slurm`: one array task per shard. Each task takes its share of\n";
  s += "# the frozen item list (balanced by size) and appends to its own ledger beside the outputs;\n";
  s += "# a task that is re-queued or submitted again skips what is done. Submit again: sbatch THIS_FILE\n";
  s += "# Merge the shards' reports: vfpipe batch --merge-reports " + shell_quote(o.log_dir) + "\n";
  s += "#SBATCH --job-name=" + o.job_name + "\n";
  s += "#SBATCH --array=0-" + std::to_string(o.shards - 1) +
       (o.array_max > 0 ? "%" + std::to_string(o.array_max) : "") + "\n";
  s += "#SBATCH --output=" + o.log_dir + "/slurm-%A_%a.out\n";
  s += "#SBATCH --chdir=" + o.workdir + "\n";
  if (!o.partition.empty()) s += "#SBATCH --partition=" + o.partition + "\n";
  if (!o.account.empty()) s += "#SBATCH --account=" + o.account + "\n";
  if (!o.time.empty()) s += "#SBATCH --time=" + o.time + "\n";
  if (o.gpus_per_task > 0) s += "#SBATCH --gpus-per-task=" + std::to_string(o.gpus_per_task) + "\n";
  if (o.cpus_per_task > 0) s += "#SBATCH --cpus-per-task=" + std::to_string(o.cpus_per_task) + "\n";
  for (const std::string& a : o.sbatch_args) s += "#SBATCH " + a + "\n";
  s += "set -eu\n";
  // Slurm sends SIGTERM at the time limit or on scancel: vfpipe abandons the items in
  // flight (their temporary files removed) and the next submission does them.
  s += "exec " + shell_quote(o.vfpipe) + " --config " + shell_quote(o.config) + " batch --list " +
       shell_quote(o.items) + " --progress plain\n";
  return s;
}

std::string submit(const std::string& script, bool wait, int* wait_status) {
  int out[2];
  if (pipe(out) != 0) throw Error(ErrorKind::Output, std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  std::vector<std::string> args = {"sbatch", "--parsable"};
  if (wait) args.push_back("--wait");
  args.push_back(script);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "sbatch", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    throw Error(ErrorKind::Output,
                std::string("cannot run sbatch (is Slurm's client installed?): ") + std::strerror(rc));
  }
  std::string text;
  char buf[512];
  for (;;) {
    const ssize_t n = read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    const bool first_line = text.find('\n') == std::string::npos;
    text.append(buf, static_cast<size_t>(n));
    if (wait && first_line && text.find('\n') != std::string::npos)
      log::info("Slurm job %s submitted; waiting for its tasks (Ctrl-C stops waiting, not the job: scancel %s)",
                text.substr(0, text.find_first_of(";\n")).c_str(), text.substr(0, text.find_first_of(";\n")).c_str());
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string id = text.substr(0, text.find_first_of(";\n"));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
    throw Error(ErrorKind::Output, "sbatch did not accept the job (its messages are above)");
  if (wait_status) *wait_status = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  return id;
}

}  // namespace vfp::batch
