// A terminal progress bar with rate and ETA, drawn on stderr only when stderr is a terminal (so
// JSON on stdout and logs in CI stay clean).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace kvevict::cli {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, bool enabled = true);
  ~ProgressBar();
  void update(int64_t done);
  void finish();

 private:
  std::string label_;
  int64_t total_;
  bool enabled_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace kvevict::cli
