#include "pipeline/commands.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "pipeline/error.hpp"
#include "pipeline/filter_parser.hpp"
#include "pipeline/log.hpp"

namespace vfp {

std::vector<Command> load_commands(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorKind::Input, "cannot open command file '" + path + "': " + std::strerror(errno));
  std::vector<Command> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const size_t hash = line.find('#');
    // '#' starts a comment unless it is a "#N" target (followed by a digit).
    if (hash != std::string::npos && !(hash + 1 < line.size() && std::isdigit(static_cast<unsigned char>(line[hash + 1]))))
      line.resize(hash);
    std::istringstream ls(line);
    Command c;
    std::string frame;
    if (!(ls >> frame)) continue;
    c.where = path + ":" + std::to_string(n);
    char* end = nullptr;
    c.frame = std::strtoll(frame.c_str(), &end, 10);
    if (*end || c.frame < 0) throw Error(ErrorKind::Usage, c.where + ": '" + frame + "' is not a frame number");
    if (!(ls >> c.target)) throw Error(ErrorKind::Usage, c.where + ": expected 'FRAME FILTER OPTIONS'");
    std::getline(ls, c.args);
    const size_t a = c.args.find_first_not_of(" \t");
    c.args = a == std::string::npos ? "" : c.args.substr(a);
    if (c.args.empty()) throw Error(ErrorKind::Usage, c.where + ": no options to change");
    out.push_back(std::move(c));
  }
  return out;
}

namespace {
Stage& find_target(const Command& c, Chain& chain) {
  if (c.target[0] == '#') {
    const long idx = std::strtol(c.target.c_str() + 1, nullptr, 10);
    // "#N" counts the user's filters, not the conversions vfpipe inserted.
    long k = 0;
    for (size_t i = 0; i < chain.size(); ++i) {
      if (chain.step(i).inserted) continue;
      if (k++ == idx) return *chain.step(i).stage;
    }
  } else {
    for (size_t i = 0; i < chain.size(); ++i)
      if (!chain.step(i).inserted && chain.step(i).stage->name() == c.target) return *chain.step(i).stage;
  }
  throw Error(ErrorKind::Usage, c.where + ": no filter '" + c.target + "' in the chain");
}

Options merged(const Command& c, Stage& st) {
  const StageInfo* info = registry().find(st.name());
  const std::string text = st.name() + "=" + c.args;
  std::vector<FilterSpec> f;
  Options given;
  try {
    f = parse_filter_string(text);
    given = bind_options(info->options, f.at(0), text, "filter '" + st.name() + "'");
  } catch (const ParseError& e) {
    throw Error(ErrorKind::Usage, c.where + ": " + e.pretty());
  }
  Options o = st.options();
  for (const auto& [k, v] : given.all())
    if (given.is_explicit(k)) o.set(k, v, true);
  return o;
}
}  // namespace

void validate_commands(const std::vector<Command>& cmds, Chain& chain) {
  for (const auto& c : cmds) {
    Stage& st = find_target(c, chain);
    merged(c, st);
  }
}

void apply_commands(const std::vector<Command>& cmds, int64_t frame, Chain& chain) {
  for (const auto& c : cmds) {
    if (c.frame != frame) continue;
    Stage& st = find_target(c, chain);
    Options o = merged(c, st);
    try {
      st.update(o);
    } catch (const Error& e) {
      throw Error(ErrorKind::Usage, c.where + ": " + e.what());
    }
    log::debug("frame %lld: %s %s", static_cast<long long>(frame), st.name().c_str(), c.args.c_str());
  }
}

}  // namespace vfp
