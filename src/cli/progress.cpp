#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>

namespace kvevict::cli {

ProgressBar::ProgressBar(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)),
      total_(total > 0 ? total : 1),
      enabled_(enabled && isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_ - std::chrono::seconds(1)) {}

ProgressBar::~ProgressBar() {
  finish();
}

void ProgressBar::update(int64_t done) {
  if (!enabled_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double frac = static_cast<double>(done) / static_cast<double>(total_);
  const int width = 30;
  const int filled = static_cast<int>(frac * width);
  std::string bar(filled, '#');
  bar.resize(width, '.');
  const double eta = done > 0 ? elapsed * (1.0 - frac) / frac : 0.0;
  std::fprintf(stderr, "\r%s [%s] %3d%% %lld/%lld  %.1fs elapsed, ETA %.1fs ", label_.c_str(),
               bar.c_str(), static_cast<int>(frac * 100), static_cast<long long>(done),
               static_cast<long long>(total_), elapsed, eta);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (!enabled_ || finished_) return;
  finished_ = true;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

}  // namespace kvevict::cli
