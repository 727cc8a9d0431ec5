// Scheduled live parameter changes, in the spirit of FFmpeg's sendcmd:
//
//   # frame  filter   options
//   30       conv     kernel=sharpen:amount=2
//   90       #1       radius=3          (#N: the N-th filter of the chain, from 0)
//
// Each command merges its options into the filter's current ones and calls
// Stage::update() just before that frame is submitted, so it applies from that frame on.
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
};

// Parses a command file; errors name the file and line.
std::vector<Command> load_commands(const std::string& path);
// Checks targets and options against the chain before streaming (so a typo fails early).
void validate_commands(const std::vector<Command>& cmds, Chain& chain);
// Applies the commands scheduled for `frame`.
void apply_commands(const std::vector<Command>& cmds, int64_t frame, Chain& chain);

}  // namespace vfp
