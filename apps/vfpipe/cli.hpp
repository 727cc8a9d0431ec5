// The vfpipe command line: one file per subcommand, each adding itself to the CLI11 app
// (main.cpp parses, then runs the chosen one).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace vfp {

// A subcommand and what runs when the user chose it.
struct Subcommand {
  CLI::App* cli;
  std::function<int()> run;
};
using Subcommands = std::vector<Subcommand>;

const char* run_examples();                                  // `vfpipe --help`'s footer too
void add_run_commands(CLI::App& app, Subcommands& out);      // run, live, profile: run.cpp
void add_mmp_commands(CLI::App& app, Subcommands& out);      // mmp encode|decode|info: mmp.cpp
void add_compress_command(CLI::App& app, Subcommands& out);  // compress: compress.cpp
void add_filters_commands(CLI::App& app, Subcommands& out);  // filters, info: filters.cpp
void add_batch_command(CLI::App& app, Subcommands& out);     // batch: batch.cpp

// Writes `text` to `path`; throws Error(Output) naming `what` when it cannot.
void write_file(const std::string& path, const std::string& text, const char* what);

// FFmpeg's -y and -n on `cmd` (-n arrives as --no-overwrite: main.cpp maps a bare -n, so that
// -n N stays a frame count), for an existing `what` ("video output", ...).
void add_overwrite_flags(CLI::App* cmd, bool* overwrite, bool* no_overwrite, const std::string& what);

}  // namespace vfp
