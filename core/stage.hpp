// The stage interface. A stage is one parameter set (Options, validated against its
// OptionSpecs), one CPU reference implementation and, optionally, one CUDA implementation.
// The engine knows stages only through this interface and the registry.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/frame.hpp"

struct CUstream_st;

namespace vfp {

enum class Backend { CPU, CUDA };
const char* backend_name(Backend b);

struct OptionSpec {
  enum class Type { Int, Float, String, Choice, Bool };
  std::string name;
  Type type = Type::String;
  std::string default_value;  // textual; "" means "unset" for String options
  std::string help;
  double min = 0, max = 0;             // inclusive range for Int/Float
  std::vector<std::string> choices;    // Choice values
  std::vector<std::string> aliases;    // other accepted keys (ffmpeg spellings)
  // Options this one replaces: when a live change (--sendcmd) gives this option, these go
  // back to their defaults (conv's file= and kernel= say the same thing two ways).
  std::vector<std::string> excludes = {};
};

// Validated option values of one stage instance, by canonical option name.
class Options {
 public:
  void set(const std::string& name, const std::string& value, bool explicit_value);
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  bool is_explicit(const std::string& name) const;  // given by the user, not a default
  const std::string& str(const std::string& name) const;
  long long integer(const std::string& name) const;
  double number(const std::string& name) const;
  bool flag(const std::string& name) const;
  const std::map<std::string, std::string>& all() const { return values_; }
  std::string to_string() const;  // "key=value:key=value" of explicit values

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> explicit_;
};

// What a stage's process call gets besides the images.
struct StageContext {
  Backend backend = Backend::CPU;
  CUstream_st* stream = nullptr;  // the slot's CUDA stream (CUDA backend)
  int slot = 0;                   // in-flight slot index, for per-slot resources
  int64_t frame_index = 0;
};

class Stage {
 public:
  virtual ~Stage() = default;

  // Checks the input and returns the output spec. Throws vfp::Error (Input) if the input
  // format or size is not supported. Called once before streaming.
  virtual FrameSpec configure(const FrameSpec& in) = 0;
  // Allocates backend resources for `slots` frames in flight. Called after configure.
  virtual void prepare(Backend backend, int slots) {
    (void)backend;
    (void)slots;
  }
  // True when the output equals the input: the engine then forwards the buffer untouched.
  virtual bool passthrough() const { return false; }
  virtual bool has_cuda() const { return false; }

  // in and out never alias. Images are in host memory (CPU) or device memory (CUDA).
  virtual void run_cpu(const ImageView& in, const ImageView& out, const StageContext& ctx) = 0;
  virtual void run_cuda(const ImageView& in, const ImageView& out, const StageContext& ctx);

  // Live parameter change between frames: `opts` is the stage's full option set with the
  // changed values merged in. Applies to the frames submitted after the call; frames in
  // flight keep their parameters. Stages that cannot change while running keep the default.
  virtual void update(const Options& opts);
  const Options& options() const { return options_; }
  void set_options(const Options& o) { options_ = o; }

  // Switched off live (the display's T key): the engine copies the input to the output
  // instead of running the stage. Only for stages whose output spec equals their input's.
  // Set on the worker thread between frames, like update().
  void set_bypass(bool b) { bypass_ = b; }
  bool bypassed() const { return bypass_; }

  // A line for the run summary after the last frame (a codec's bits and PSNR); "" for none.
  virtual std::string report() const { return ""; }

  // Name shown in reports and summaries, e.g. "format(yuv420p)".
  virtual std::string label() const { return name_; }
  const std::string& name() const { return name_; }
  void set_name(const std::string& n) { name_ = n; }

 private:
  std::string name_;
  Options options_;
  bool bypass_ = false;
};

struct StageInfo {
  std::string name;
  std::vector<std::string> aliases;
  std::string summary;      // one line for `vfpipe filters`
  std::string description;  // a paragraph for `vfpipe filters NAME`
  std::vector<OptionSpec> options;
  // Accepted input formats in order of preference; the chain builder inserts a format
  // conversion before the stage when its input is not in this list.
  std::vector<PixelFormat> formats;
  bool cuda = false;
  std::vector<std::string> examples;
  std::function<std::unique_ptr<Stage>(const Options&)> create;
};

}  // namespace vfp
