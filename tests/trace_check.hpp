// Checks a Chrome trace (pipeline/profile.hpp) the way a viewer needs it: the complete
// ("X") events of each track nest, i.e. any two are disjoint or one contains the other.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

namespace vfp::test {

// Returns the number of complete events checked.
inline size_t check_nesting(const nlohmann::json& trace) {
  std::map<int, std::vector<std::pair<double, double>>> by_tid;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X")
      by_tid[e["tid"].get<int>()].push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
  size_t n = 0;
  for (auto& [tid, v] : by_tid) {
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
      return a.first < b.first || (a.first == b.first && a.second > b.second);
    });
    std::vector<double> open;  // ends of the enclosing events
    for (auto [b, e] : v) {
      while (!open.empty() && open.back() <= b + 1e-6) open.pop_back();
      if (!open.empty())
        EXPECT_LE(e, open.back() + 1e-6) << "tid " << tid << ": event at " << b << " crosses its parent";
      open.push_back(e);
      ++n;
    }
  }
  return n;
}

}  // namespace vfp::test
