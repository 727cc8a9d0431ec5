#include "batch/items.hpp"

#include <glob.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <map>
#include <set>

#include "core/error.hpp"
#include "core/log.hpp"

namespace vfp::batch {

namespace fs = std::filesystem;

const std::vector<std::string>& default_extensions() {
  static const std::vector<std::string> ext = {"mp4",  "mov", "mkv",  "webm", "avi", "m4v", "ts",  "mts",
                                               "m2ts", "mpg", "mpeg", "flv",  "wmv", "ogv", "y4m", "gz"};
  return ext;
}

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, s.find_last_not_of(" \t") + 1 - a);
}

int64_t size_of(const std::string& path) {
  std::error_code ec;
  const auto n = fs::file_size(path, ec);
  return ec ? 0 : static_cast<int64_t>(n);
}

// "a/b/c.mp4" under "a" -> "b"; "" when the file is directly in the folder.
std::string folder_relative(const fs::path& file, const fs::path& root) {
  const fs::path rel = file.parent_path().lexically_relative(root);
  const std::string s = rel.generic_string();
  return s == "." || s.empty() ? "" : s;
}

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// The folder a glob's matches are relative to: its components before the first wildcard.
fs::path glob_base(const std::string& pattern) {
  fs::path base;
  for (const auto& part : fs::path(pattern).parent_path()) {
    if (has_glob_chars(part.string())) break;
    base /= part;
  }
  return base.empty() ? fs::path(".") : base;
}

bool wanted_extension(const fs::path& p, const std::vector<std::string>& ext) {
  std::string e = lower(p.extension().string());
  if (!e.empty()) e.erase(0, 1);
  return std::find(ext.begin(), ext.end(), e) != ext.end();
}

Item file_item(const std::string& path, const std::string& relpath, const std::string& where) {
  Item it;
  it.input = path;
  it.relpath = relpath;
  it.bytes = size_of(path);
  it.where = where;
  it.options = nlohmann::json::object();
  return it;
}

void walk_folder(const std::string& dir, const CollectOptions& opt, std::vector<Item>& out) {
  const std::vector<std::string>& ext = opt.extensions.empty() ? default_extensions() : opt.extensions;
  std::vector<fs::path> found;
  std::error_code ec;
  const auto add = [&](const fs::directory_entry& e) {
    const std::string name = e.path().filename().string();
    if (!name.empty() && name[0] == '.') return;  // hidden files, vfpipe's own temporaries
    if (e.is_regular_file() && wanted_extension(e.path(), ext)) found.push_back(e.path());
  };
  if (opt.recursive) {
    for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
         !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (it->is_directory() && !name.empty() && name[0] == '.') {
        it.disable_recursion_pending();
        continue;
      }
      add(*it);
    }
  } else {
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) add(*it);
  }
  if (ec) throw Error(ErrorKind::Input, "cannot read folder '" + dir + "': " + ec.message());
  for (const fs::path& p : found) out.push_back(file_item(p.string(), folder_relative(p, dir), dir));
}

void expand_glob(const std::string& pattern, std::vector<Item>& out) {
  glob_t g{};
  const int rc = glob(pattern.c_str(), GLOB_TILDE | GLOB_BRACE, nullptr, &g);
  if (rc == GLOB_NOMATCH) {
    globfree(&g);
    throw Error(ErrorKind::Input, "'" + pattern + "' matches no file");
  }
  if (rc != 0) {
    globfree(&g);
    throw Error(ErrorKind::Input, "cannot expand '" + pattern + "'");
  }
  const fs::path base = glob_base(pattern);
  for (size_t i = 0; i < g.gl_pathc; ++i) {
    const std::string p = g.gl_pathv[i];
    if (fs::is_regular_file(p)) out.push_back(file_item(p, folder_relative(p, base), pattern));
  }
  globfree(&g);
}

// RFC 4180 fields of one CSV record (quotes doubled inside quoted fields).
std::vector<std::string> csv_fields(const std::string& line, const std::string& where) {
  std::vector<std::string> f;
  std::string cur;
  bool quoted = false, was_quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"' && cur.empty() && !was_quoted) {
      quoted = was_quoted = true;
    } else if (c == ',') {
      f.push_back(cur);
      cur.clear();
      was_quoted = false;
    } else {
      cur += c;
    }
  }
  if (quoted) throw Error(ErrorKind::Input, where + ": unterminated quoted field");
  f.push_back(cur);
  return f;
}

// A CSV cell as JSON: numbers and booleans as such, everything else a string.
nlohmann::json csv_value(const std::string& s) {
  if (s == "true" || s == "false") return s == "true";
  if (!s.empty()) {
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (end == s.c_str() + s.size() && s.find_first_not_of("+-0123456789.eE") == std::string::npos) {
      if (s.find_first_of(".eE") == std::string::npos) return static_cast<int64_t>(d);
      return d;
    }
  }
  return s;
}

// Inputs that are not files: URLs and vfpipe's generated sources.
bool is_stream_spec(const std::string& s) {
  return s.find("://") != std::string::npos || s.rfind("synthetic", 0) == 0 || s.rfind("camera=", 0) == 0;
}

std::string rebase(const std::string& path, const fs::path& list_dir) {
  if (path == "-" || is_stream_spec(path) || fs::path(path).is_absolute() || list_dir.empty() || list_dir == ".")
    return path;
  return (list_dir / path).lexically_normal().string();
}

}  // namespace

std::vector<Item> read_list(std::istream& in, const std::string& name) {
  const std::string ext = lower(fs::path(name).extension().string());
  const fs::path dir = name == "-" ? fs::path() : fs::path(name).parent_path();
  std::vector<Item> out;
  std::vector<std::string> header;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string where = name + ":" + std::to_string(lineno);
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    Item it;
    it.where = where;
    it.options = nlohmann::json::object();
    if (ext == ".jsonl" || ext == ".ndjson") {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const std::exception& e) {
        throw Error(ErrorKind::Input, where + ": not JSON: " + e.what());
      }
      if (!j.is_object() || !j.contains("input") || !j["input"].is_string())
        throw Error(ErrorKind::Input, where + ": expected an object with an \"input\" string");
      for (auto& [k, v] : j.items()) {
        if (k == "input" || k == "index") continue;  // the index is the position in the sorted list
        if (k == "relpath" && v.is_string()) {       // as a submitter froze them (write_items)
          it.relpath = v.get<std::string>();
          continue;
        }
        if (k == "bytes" && v.is_number_integer()) {
          it.bytes = v.get<int64_t>();
          continue;
        }
        if (!v.is_string() && !v.is_number() && !v.is_boolean())
          throw Error(ErrorKind::Input, where + ": \"" + k + "\" must be a string, number or boolean");
        it.options[k] = v;
      }
      it.input = j["input"].get<std::string>();
    } else if (ext == ".csv") {
      std::vector<std::string> f = csv_fields(line, where);
      if (header.empty()) {
        header = f;
        for (std::string& h : header) h = trim(h);
        if (std::find(header.begin(), header.end(), "input") == header.end())
          throw Error(ErrorKind::Input, where + ": the header row has no 'input' column");
        continue;
      }
      if (f.size() != header.size())
        throw Error(ErrorKind::Input,
                    log::format("%s: %zu fields, the header has %zu", where.c_str(), f.size(), header.size()));
      for (size_t i = 0; i < f.size(); ++i) {
        if (header[i] == "input")
          it.input = f[i];
        else if (!f[i].empty())  // an empty cell: the command line's value
          it.options[header[i]] = csv_value(f[i]);
      }
      if (it.input.empty()) throw Error(ErrorKind::Input, where + ": empty input");
    } else {
      if (line[first] == '#') continue;
      it.input = trim(line);
    }
    it.input = rebase(it.input, dir);
    if (it.options.contains("output") && it.options["output"].is_string())
      it.options["output"] = rebase(it.options["output"].get<std::string>(), dir);
    if (it.bytes == 0) it.bytes = size_of(it.input);
    out.push_back(std::move(it));
  }
  if (header.empty() && ext == ".csv" && lineno > 0 && out.empty())
    throw Error(ErrorKind::Input, name + ": no header row");
  return out;
}

std::vector<Item> collect(const std::vector<std::string>& inputs, const std::vector<std::string>& lists,
                          const CollectOptions& opt, std::istream& stdin_list) {
  std::vector<Item> all;
  for (const std::string& in : inputs) {
    if (in == "-") {
      auto l = read_list(stdin_list, "-");
      all.insert(all.end(), l.begin(), l.end());
    } else if (fs::is_directory(in)) {
      walk_folder(in, opt, all);
    } else if (fs::exists(in)) {
      all.push_back(file_item(in, "", in));
    } else if (is_stream_spec(in)) {
      all.push_back(file_item(in, "", in));
    } else if (has_glob_chars(in)) {
      expand_glob(in, all);
    } else {
      throw Error(ErrorKind::Input, "'" + in + "': no such file or folder");
    }
  }
  for (const std::string& l : lists) {
    std::ifstream f(l);
    if (!f) throw Error(ErrorKind::Input, "cannot open list '" + l + "'");
    auto items = read_list(f, l);
    all.insert(all.end(), items.begin(), items.end());
  }
  // A list may name an input that is missing: that item fails on its own (reported), it
  // does not stop the batch. Duplicates (the same path twice) are kept once.
  std::stable_sort(all.begin(), all.end(), [](const Item& a, const Item& b) { return a.input < b.input; });
  std::vector<Item> out;
  std::set<std::string> seen;
  for (Item& it : all) {
    const std::string key = fs::path(it.input).lexically_normal().string();
    if (seen.insert(key).second) out.push_back(std::move(it));
  }
  if (out.empty()) throw Error(ErrorKind::Input, "no input files found");
  for (size_t i = 0; i < out.size(); ++i) out[i].index = static_cast<int64_t>(i);
  return out;
}

namespace {

// Calls field(name, spec, pos, len) for each {field} and text(str) for the text between.
template <class Text, class Field>
void scan_template(const std::string& t, Text text, Field field) {
  std::string lit;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '{' && i + 1 < t.size() && t[i + 1] == '{') {
      lit += '{';
      ++i;
    } else if (t[i] == '}' && i + 1 < t.size() && t[i + 1] == '}') {
      lit += '}';
      ++i;
    } else if (t[i] == '{') {
      const size_t close = t.find('}', i);
      if (close == std::string::npos) throw ParseError("output template: '{' without '}'", t, i);
      text(lit);
      lit.clear();
      const std::string inner = t.substr(i + 1, close - i - 1);
      const size_t colon = inner.find(':');
      field(inner.substr(0, colon), colon == std::string::npos ? "" : inner.substr(colon + 1), i, close - i + 1);
      i = close;
    } else if (t[i] == '}') {
      throw ParseError("output template: '}' without '{' (write }} for a brace)", t, i);
    } else {
      lit += t[i];
    }
  }
  text(lit);
}

// "clip.y4m.gz" -> {"clip", "y4m.gz"}; "clip.mp4" -> {"clip", "mp4"}.
std::pair<std::string, std::string> stem_ext(const std::string& path) {
  std::string name = fs::path(path).filename().string();
  for (const char* two : {".y4m.gz", ".tar.gz"})
    if (name.size() > std::strlen(two) && lower(name).substr(name.size() - std::strlen(two)) == two)
      return {name.substr(0, name.size() - std::strlen(two)), std::string(two + 1)};
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0) return {name, ""};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

}  // namespace

void check_template(const std::string& tmpl) {
  scan_template(
      tmpl, [](const std::string&) {},
      [&](const std::string& name, const std::string& spec, size_t pos, size_t len) {
        if (name != "stem" && name != "ext" && name != "relpath" && name != "index")
          throw ParseError("output template: unknown field {" + name + "} (fields: {stem} {ext} {relpath} {index})",
                           tmpl, pos, len);
        if (!spec.empty() &&
            (name != "index" || spec.find_first_not_of("0123456789") != std::string::npos || spec.size() > 2))
          throw ParseError("output template: only {index:N} takes a width (digits)", tmpl, pos, len);
      });
}

std::string expand_template(const std::string& tmpl, const Item& item) {
  const std::pair<std::string, std::string> parts = stem_ext(item.input);
  const std::string& stem = parts.first;  // not a structured binding: lambdas capture it (C++17)
  const std::string& ext = parts.second;
  std::string out;
  scan_template(
      tmpl, [&](const std::string& s) { out += s; },
      [&](const std::string& name, const std::string& spec, size_t, size_t) {
        if (name == "stem") out += stem;
        if (name == "ext") out += ext;
        if (name == "relpath") out += item.relpath;
        if (name == "index") {
          std::string n = std::to_string(item.index);
          const size_t w = spec.empty() ? 0 : std::stoul(spec);
          if (n.size() < w) n.insert(0, w - n.size(), '0');
          out += n;
        }
      });
  // An empty {relpath} leaves "out//x.mp4": normalise, keeping a leading "./" away.
  std::string norm = fs::path(out).lexically_normal().string();
  return norm.empty() ? out : norm;
}

std::string template_root(const std::string& tmpl) {
  size_t field = tmpl.find('{');
  while (field != std::string::npos && field + 1 < tmpl.size() && tmpl[field + 1] == '{')
    field = tmpl.find('{', field + 2);
  const std::string fixed = tmpl.substr(0, field);
  const size_t slash = fixed.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : fixed.substr(0, slash);
}

void assign_outputs(std::vector<Item>& items, const std::string& tmpl) {
  std::map<std::string, const Item*> by_output;
  for (Item& it : items) {
    if (it.options.contains("output") && it.options["output"].is_string())
      it.output = it.options["output"].get<std::string>();
    else
      it.output = tmpl == "null" ? "null" : expand_template(tmpl, it);
    if (it.output == "null") continue;
    const std::string key = fs::absolute(it.output).lexically_normal().string();
    auto [pos, fresh] = by_output.emplace(key, &it);
    if (!fresh)
      throw Error(ErrorKind::Usage, "'" + pos->second->input + "' and '" + it.input + "' would both write '" +
                                        it.output + "': add {relpath}, {ext} or {index} to the output template");
    if (key == fs::absolute(it.input).lexically_normal().string())
      throw Error(ErrorKind::Usage, "'" + it.input + "' would be overwritten by its own output");
  }
}

Shard parse_shard(const std::string& text) {
  Shard s;
  s.source = "--shard";
  char slash = 0;
  char extra = 0;
  if (std::sscanf(text.c_str(), "%d%c%d%c", &s.index, &slash, &s.count, &extra) != 3 || slash != '/' || s.count < 1 ||
      s.index < 0 || s.index >= s.count)
    throw Error(ErrorKind::Usage, "--shard: expected I/N with 0 <= I < N (e.g. 3/8), got '" + text + "'");
  return s;
}

Shard shard_from_env(const std::function<const char*(const char*)>& env, int k8s_count) {
  const auto num = [&](const char* name, int* v) {
    const char* s = env(name);
    if (!s || !*s) return false;
    char* end = nullptr;
    const long x = std::strtol(s, &end, 10);
    if (*end || x < 0 || x > 1000000000) throw Error(ErrorKind::Usage, log::format("%s='%s' is not a number", name, s));
    *v = static_cast<int>(x);
    return true;
  };
  Shard s;
  int id = 0, count = 0, min = 0;
  if (num("SLURM_ARRAY_TASK_ID", &id) && num("SLURM_ARRAY_TASK_COUNT", &count)) {
    num("SLURM_ARRAY_TASK_MIN", &min);
    s.index = id - min;
    s.count = count;
    s.source = "SLURM_ARRAY_TASK_ID";
  } else if (num("JOB_COMPLETION_INDEX", &id)) {
    count = k8s_count;
    if (count <= 0 && !num("VFPIPE_SHARD_COUNT", &count))
      throw Error(ErrorKind::Usage,
                  "JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but not the number of shards: "
                  "give --shard-count N or set VFPIPE_SHARD_COUNT to the Job's completions");
    s.index = id;
    s.count = count;
    s.source = "JOB_COMPLETION_INDEX";
  }
  if (s.count < 1 || s.index < 0 || s.index >= s.count)
    throw Error(ErrorKind::Usage,
                log::format("%s: shard %d of %d is out of range", s.source.c_str(), s.index, s.count));
  return s;
}

std::vector<Item> take_shard(const std::vector<Item>& items, const Shard& shard) {
  if (shard.count <= 1) return items;
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return items[a].bytes > items[b].bytes; });
  std::vector<int64_t> load(static_cast<size_t>(shard.count), 0);
  std::vector<int> owner(items.size(), 0);
  for (size_t i : order) {
    // Zero-byte items (missing files, URLs) count as one byte so they spread too.
    const size_t s = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = static_cast<int>(s);
    load[s] += std::max<int64_t>(items[i].bytes, 1);
  }
  std::vector<Item> out;
  for (size_t i = 0; i < items.size(); ++i)
    if (owner[i] == shard.index) out.push_back(items[i]);
  return out;
}

std::vector<int> parse_gpus(const std::string& spec, int device_count, const char* visible) {
  std::vector<int> out;
  if (spec == "none" || spec.empty()) return out;
  if (spec == "all") {
    for (int i = 0; i < device_count; ++i) out.push_back(i);
    return out;
  }
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t comma = spec.find(',', pos);
    const std::string tok = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (tok.empty() || tok.find_first_not_of("0123456789") != std::string::npos || tok.size() > 4)
      throw ParseError("--gpus: expected all, none or device numbers such as 0,2", spec, pos,
                       std::max<size_t>(tok.size(), 1));
    const int d = std::stoi(tok);
    if (d >= device_count) {
      const std::string why = visible
                                  ? log::format("%d visible to CUDA: CUDA_VISIBLE_DEVICES=%s", device_count, visible)
                                  : log::format("this machine has %d", device_count);
      throw ParseError(log::format("--gpus: there is no GPU %d (%s)", d, why.c_str()), spec, pos, tok.size());
    }
    if (std::find(out.begin(), out.end(), d) != out.end())
      throw ParseError(log::format("--gpus: GPU %d is listed twice", d), spec, pos, tok.size());
    out.push_back(d);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::vector<int> pipeline_devices(const std::vector<int>& gpus, int jobs_per_gpu, int cpu_jobs) {
  std::vector<int> out;
  if (gpus.empty()) return std::vector<int>(static_cast<size_t>(std::max(cpu_jobs, 1)), -1);
  for (int j = 0; j < std::max(jobs_per_gpu, 1); ++j)
    for (int g : gpus) out.push_back(g);
  return out;
}

}  // namespace vfp::batch
