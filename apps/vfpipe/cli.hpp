// The vfpipe command line: one file per subcommand, each adding itself to the CLI11 app
// (main.cpp parses, then runs the chosen one).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "core/frame.hpp"

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

// FFmpeg's -ss, -t and -to on `cmd` (-ss and -to arrive as --start and --to: main.cpp maps
// them), in seconds of the input; `duration` and `to` stay -1 when not given.
void add_time_window_options(CLI::App* cmd, double* start, double* duration, double* to);
// The video encoder's option (libavcodec's name) that ffmpeg's option `name`, without its
// dash, sets: "tune" for tune and tune:v, "profile" for profile:v, ...; null for others.
const char* ffmpeg_encoder_option(const std::string& name);
// -aspect's display ratio ("16:9", "2.39") and -r's rate ("30", "60000/1001"); throw
// vfp::Error (Usage) naming the option for anything else.
Rational parse_display_aspect(const std::string& text);
Rational parse_output_rate(const std::string& text);
// The seconds after `start` that -t (which wins) or -to leave, or -1 for the rest of the
// input: SourceOptions::duration. Throws vfp::Error (Usage) for an empty window.
double window_duration(double start, double duration, double to);

}  // namespace vfp
