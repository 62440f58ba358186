// Small helpers shared by the subcommands for printing results.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace kvevict::cli {

inline void print_json(const nlohmann::json& j) {
  std::printf("%s\n", j.dump(2).c_str());
}

inline std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

}  // namespace kvevict::cli
