// `vfpipe filters [NAME]` and `vfpipe info`: what this build can do.
#include <cstdio>
#include <memory>

#include "apps/vfpipe/cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/parallel.hpp"
#include "io/open.hpp"
#include "io/synthetic.hpp"
#include "stages/builtin.hpp"
#if VFPIPE_HAVE_CUDA
#include "core/gpu.hpp"
#endif

namespace vfp {
namespace {

std::string type_name(const OptionSpec& o) {
  switch (o.type) {
    case OptionSpec::Type::Int:
      return log::format("int %g..%g", o.min, o.max);
    case OptionSpec::Type::Float:
      return log::format("float %g..%g", o.min, o.max);
    case OptionSpec::Type::Bool:
      return "bool";
    case OptionSpec::Type::Choice: {
      std::string r;
      for (const auto& c : o.choices) r += (r.empty() ? "" : "|") + c;
      return r;
    }
    case OptionSpec::Type::String:
      return "string";
  }
  return "";
}

void print_options(const std::vector<OptionSpec>& opts) {
  for (const auto& o : opts) {
    std::string names = o.name;
    for (const auto& al : o.alias_names) names += ", " + al;
    std::printf("    %-22s %-22s default %-10s %s\n", names.c_str(), type_name(o).c_str(),
                o.default_value.empty() ? "-" : o.default_value.c_str(), o.help.c_str());
  }
}

int filters_command(const std::string& name) {
  const Registry& reg = registry();
  if (!name.empty()) {
    if (name == "synthetic") {
      std::printf("synthetic (source): moving test scene with optional noise\n  options:\n");
      print_options(synthetic_options());
      return 0;
    }
    const StageInfo* s = reg.find(name);
    if (!s) throw Error(ErrorKind::Usage, "unknown filter '" + name + "' (see 'vfpipe filters')");
    std::printf("%s", s->name.c_str());
    if (!s->aliases.empty()) {
      std::printf(" (alias");
      for (const auto& al : s->aliases) std::printf(" %s", al.c_str());
      std::printf(")");
    }
    std::printf(": %s\n\n  %s\n\n  backends: cpu%s\n  input formats:", s->summary.c_str(), s->description.c_str(),
                s->cuda ? ", cuda" : "");
    for (PixelFormat f : s->formats) std::printf(" %s", pix_fmt_name(f));
    std::printf("\n  options (positional values follow this order):\n");
    if (s->options.empty()) std::printf("    none\n");
    print_options(s->options);
    std::string live;
    size_t n_live = 0;
    for (const auto& o : s->options)
      if (o.live) live += (n_live++ ? ", " : "") + o.name;
    if (s->options.empty()) {
      // nothing to change
    } else if (n_live == 0) {
      std::printf("  while running: no option can change (--sendcmd refuses)\n");
    } else if (n_live == s->options.size()) {
      std::printf("  while running: every option can change (--sendcmd)\n");
    } else {
      std::printf("  while running: %s can change (--sendcmd)\n", live.c_str());
    }
    if (!s->live.option.empty())
      std::printf("  display keys: +/- step '%s', T switches the filter off\n", s->live.option.c_str());
    if (!s->examples.empty()) {
      std::printf("  examples:\n");
      for (const auto& e : s->examples) std::printf("    -f \"%s\"\n", e.c_str());
    }
    return 0;
  }
  std::printf("Filters (use in -f \"name=key=value:...,next\"; 'vfpipe filters NAME' for details):\n");
  for (const auto& s : reg.all())
    std::printf("  %-10s %-5s %s\n", s.name.c_str(), s.cuda ? "cuda" : "cpu", s.summary.c_str());
  std::printf("\nSources: synthetic ('vfpipe filters synthetic'), Y4M, camera, video, images.\n");
  std::printf("Pixel formats: %s\n", pix_fmt_list().c_str());
  return 0;
}

// What vfpipe sees in `input`, as ffprobe shows a file.
int input_info(const std::string& input) {
  std::unique_ptr<Source> src = open_source(input, SourceOptions{});
  for (const std::string& line : describe_input(*src)) std::printf("%s\n", line.c_str());
  return 0;
}

int info_command(const std::string& input) {
  if (!input.empty()) return input_info(input);
  std::printf("vfpipe %s\n", VFPIPE_VERSION);
  std::printf("  OpenCV I/O: %s\n", have_opencv() ? "yes" : "no (Y4M and synthetic only)");
  std::printf("  GL libraries found at build time: %s\n", VFPIPE_HAVE_GL ? "yes" : "no");
#if VFPIPE_HAVE_CUDA
  const cuda::DeviceInfo& g = cuda::probe();
  std::printf("  CUDA backend: built in\n");
  if (g.usable)
    std::printf("  GPU: %s (compute %d.%d, %.1f GiB, %d copy engines)\n", g.name.c_str(), g.cc_major, g.cc_minor,
                g.total_mem / 1073741824.0, g.async_engines);
  else
    std::printf("  GPU: none usable (%s); --device auto runs on the CPU\n", g.reason.c_str());
#else
  std::printf("  CUDA backend: not built (CPU only)\n");
#endif
  std::printf("  CPU pool: %d threads of %d cores (oneTBB; --threads N)\n", cpu_threads(), available_cores());
  std::printf("  pixel formats: %s\n", pix_fmt_list().c_str());
  return 0;
}

}  // namespace

void add_filters_commands(CLI::App& app, Subcommands& out) {
  auto name = std::make_shared<std::string>();
  auto* filters = app.add_subcommand("filters", "list the filters (stages) and their options");
  filters->add_option("name", *name, "show one filter in detail");
  out.push_back({filters, [name] { return filters_command(*name); }});
  auto input = std::make_shared<std::string>();
  auto* info = app.add_subcommand("info", "show build features and the GPU, or what vfpipe sees in an input");
  info->add_option("input", *input,
                   "an input (file, URL, Y4M, image pattern, synthetic=...): its frames, depth, "
                   "colour, HDR, length and other streams");
  info->add_option("-i", *input, "the same, as ffmpeg names an input");
  out.push_back({info, [input] { return info_command(*input); }});
}

}  // namespace vfp
