// Minimal leveled logging to stderr (stdout may carry a Y4M stream).
#pragma once
#include <cstdarg>
#include <functional>
#include <string>

namespace vfp::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3, Quiet = 4 };

void set_level(Level l);
// Where messages go instead of stderr (a full line each, with its newline): a live display
// prints them above itself. Empty: stderr again. Called with the log's lock held.
void set_writer(std::function<void(const std::string&)> writer);
Level level();
void debug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// printf into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace vfp::log
