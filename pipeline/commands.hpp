// Scheduled live parameter changes, in the spirit of FFmpeg's sendcmd:
//
//   # frame  filter   options
//   30       conv     kernel=sharpen:amount=2
//   90       #1       radius=3          (#N: the N-th filter of the chain, from 0)
//
// Each command merges its options into the filter's current ones and calls
// Stage::update() just before that frame is submitted, so it applies from that frame on
// (or from the next submitted frame, when the live policy dropped that one). The whole
// file is checked before the first frame: every command's merged options must make a
// filter that accepts the filter's input, so a bad value fails the run before it starts.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/chain.hpp"

namespace vfp {

struct Command {
  int64_t frame = 0;
  std::string target;  // filter name, or "#N"
  std::string args;    // "key=value:key=value"
  std::string where;   // "file:line" for messages
  bool applied = false;
  int64_t applied_at = -1;  // the frame it applied before (later than `frame` after drops)
};

// Parses a command file (LF or CRLF lines); returns the commands in frame order (file order
// among equal frames). Errors name the file and line; bytes that cannot be in a command
// file are shown escaped.
std::vector<Command> load_commands(const std::string& path);
// Checks every command against the chain before streaming, in the order they will apply:
// the target exists, the options parse, and the filter built from the merged options
// accepts its input (so `size=4` or a missing kernel file fails before the first frame).
void validate_commands(const std::vector<Command>& cmds, Chain& chain);
// Applies the commands not applied yet whose frame is at or before `frame`.
void apply_commands(std::vector<Command>& cmds, int64_t frame, Chain& chain);
// Whether apply_commands(cmds, frame, ...) would apply any.
bool commands_due(const std::vector<Command>& cmds, int64_t frame);
// The run summary's line: how many commands applied and from which frame, and those whose
// frame never came (the input ended first), so that none is lost without a word; the
// first few of each are listed. Empty without commands.
std::string commands_summary(const std::vector<Command>& cmds);

}  // namespace vfp
