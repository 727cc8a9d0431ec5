#include "pipeline/commands.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.hpp"
#include "core/filter_parser.hpp"
#include "core/log.hpp"
#include "stages/builtin.hpp"

namespace vfp {

namespace {
// Bytes shown as they are, except control bytes as \xNN (a binary file's garbage must not
// reach the terminal raw).
std::string printable(const std::string& s) {
  std::string r;
  for (unsigned char ch : s) {
    if (ch < 0x20 || ch == 0x7f)
      r += log::format("\\x%02x", ch);
    else
      r += static_cast<char>(ch);
  }
  return r;
}
}  // namespace

std::vector<Command> load_commands(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(ErrorKind::Input, "command file '" + path + "' is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::Input, "cannot open command file '" + path + "': " + std::strerror(errno));
  std::vector<Command> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF
    for (size_t i = 0; i < line.size(); ++i) {
      const unsigned char ch = static_cast<unsigned char>(line[i]);
      if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
        throw Error(ErrorKind::Usage,
                    log::format("%s:%d: unexpected byte \\x%02x at column %zu (not a text command file?): %s",
                                path.c_str(), n, ch, i + 1, printable(line.substr(0, 60)).c_str()));
    }
    const size_t hash = line.find('#');
    // '#' starts a comment unless it is a "#N" target (followed by a digit).
    if (hash != std::string::npos &&
        !(hash + 1 < line.size() && std::isdigit(static_cast<unsigned char>(line[hash + 1]))))
      line.resize(hash);
    std::istringstream ls(line);
    Command c;
    std::string frame;
    if (!(ls >> frame)) continue;
    c.where = path + ":" + std::to_string(n);
    char* end = nullptr;
    errno = 0;
    c.frame = std::strtoll(frame.c_str(), &end, 10);
    if (*end || c.frame < 0 || errno == ERANGE)
      throw Error(ErrorKind::Usage, c.where + ": '" + printable(frame) + "' is not a frame number");
    if (!(ls >> c.target)) throw Error(ErrorKind::Usage, c.where + ": expected 'FRAME FILTER OPTIONS'");
    std::getline(ls, c.args);
    const size_t a = c.args.find_first_not_of(" \t");
    c.args = a == std::string::npos ? "" : c.args.substr(a);
    if (c.args.empty()) throw Error(ErrorKind::Usage, c.where + ": no options to change");
    out.push_back(std::move(c));
  }
  std::stable_sort(out.begin(), out.end(), [](const Command& a, const Command& b) { return a.frame < b.frame; });
  return out;
}

namespace {
Chain::Step& find_target(const Command& c, Chain& chain) {
  if (c.target[0] == '#') {
    const long idx = std::strtol(c.target.c_str() + 1, nullptr, 10);
    // "#N" counts the user's filters, not the conversions vfpipe inserted.
    long k = 0;
    for (size_t i = 0; i < chain.size(); ++i) {
      if (chain.step(i).inserted) continue;
      if (k++ == idx) return chain.step(i);
    }
  } else {
    for (size_t i = 0; i < chain.size(); ++i)
      if (!chain.step(i).inserted && chain.step(i).stage->name() == c.target) return chain.step(i);
  }
  throw Error(ErrorKind::Usage, c.where + ": no filter '" + c.target + "' in the chain");
}

// The stage's options with the command's merged in. An option given by the command resets
// the options its declaration excludes (conv: file= replaces kernel=, and back).
Options merged(const Command& c, const Stage& st, const Options& current) {
  const StageInfo* info = st.info();
  const std::string text = st.name() + "=" + c.args;
  std::vector<FilterSpec> f;
  Options given;
  try {
    f = parse_filter_string(text);
    given = bind_options(info->options, f.at(0), text, "filter '" + st.name() + "'");
  } catch (const ParseError& e) {
    throw Error(ErrorKind::Usage, c.where + ": " + e.pretty());
  }
  auto spec_of = [&](const std::string& name) -> const OptionSpec* {
    for (const OptionSpec& s : info->options)
      if (s.name == name) return &s;
    return nullptr;
  };
  Options o = current;
  for (const auto& [k, v] : given.all()) {
    if (!given.is_explicit(k)) continue;
    if (!spec_of(k)->live)
      throw Error(ErrorKind::Usage, c.where + ": option '" + k + "' of filter '" + st.name() +
                                        "' cannot change while running ('vfpipe filters " + st.name() + "')");
    for (const std::string& x : spec_of(k)->excluded) o.set(x, spec_of(x)->default_value, false);
  }
  for (const auto& [k, v] : given.all())
    if (given.is_explicit(k)) o.set(k, v, true);
  return o;
}
}  // namespace

void validate_commands(const std::vector<Command>& cmds, Chain& chain) {
  // Each filter's options as they will evolve, command after command.
  std::map<const Stage*, Options> state;
  for (const auto& c : cmds) {
    const Chain::Step& step = find_target(c, chain);
    const Stage& st = *step.stage;
    auto it = state.emplace(&st, st.options()).first;
    Options o = merged(c, st, it->second);
    try {
      std::unique_ptr<Stage> probe = registry().create(*st.info(), o);
      probe->configure(step.in);
    } catch (const Error& e) {
      throw Error(ErrorKind::Usage, c.where + ": " + e.what());
    }
    it->second = std::move(o);
  }
}

bool commands_due(const std::vector<Command>& cmds, int64_t frame) {
  for (const auto& c : cmds)
    if (!c.applied && c.frame <= frame) return true;
  return false;
}

void apply_commands(std::vector<Command>& cmds, int64_t frame, Chain& chain) {
  for (auto& c : cmds) {
    if (c.applied || c.frame > frame) continue;
    c.applied = true;
    c.applied_at = frame;
    Stage& st = *find_target(c, chain).stage;
    Options o = merged(c, st, st.options());
    try {
      st.update(o);
    } catch (const Error& e) {
      throw Error(ErrorKind::Usage, c.where + ": " + e.what());
    }
    log::debug("frame %lld: %s %s", static_cast<long long>(frame), st.name().c_str(), c.args.c_str());
  }
}

std::string commands_summary(const std::vector<Command>& cmds) {
  if (cmds.empty()) return "";
  constexpr int kListed = 4;
  std::string done, missed;
  int n_done = 0, n_missed = 0;
  for (const Command& c : cmds) {
    const bool ok = c.applied;
    int& n = ok ? n_done : n_missed;
    std::string& list = ok ? done : missed;
    if (n++ < kListed) {
      list += list.empty() ? "" : ", ";
      list +=
          ok ? log::format("frame %lld %s %s", static_cast<long long>(c.applied_at), c.target.c_str(), c.args.c_str())
             : log::format("%s (frame %lld %s %s)", c.where.c_str(), static_cast<long long>(c.frame), c.target.c_str(),
                           c.args.c_str());
    } else if (n == kListed + 1) {
      list += ", ...";
    }
  }
  std::string line = log::format("sendcmd: %d of %zu commands applied", n_done, cmds.size());
  if (n_done > 0) line += ": " + done + " (the steps above are named as the chain started)";
  if (n_missed > 0) line += log::format("; %d not reached (the run ended before their frame): ", n_missed) + missed;
  return line;
}

}  // namespace vfp
