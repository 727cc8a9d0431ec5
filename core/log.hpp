// Minimal leveled logging to stderr (stdout may carry a Y4M stream).
#pragma once
#include <cstdarg>
#include <string>

namespace vfp::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3, Quiet = 4 };

void set_level(Level l);
Level level();
void debug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// printf into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace vfp::log
