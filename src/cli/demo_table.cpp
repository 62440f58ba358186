#include "cli/demo_table.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "cli/model_args.h"
#include "io/input_file.h"
#include "io/json_parse.h"
#include "kvevict/error.h"

namespace kvevict::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// tools/demo_table.py writes a few KiB; anything near this is not a results table.
constexpr uint64_t kMaxTableBytes = uint64_t{64} << 20;

std::string exe_dir() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.parent_path().string();
}

bool same_cell(const json& r, const std::string& model, const std::string& task, int64_t length,
               const std::string& mode, const std::string& setting) {
  return r.value("model", "") == model && r.value("task", "") == task &&
         r.value("target_length", int64_t{-1}) == length && r.value("mode", "") == mode &&
         r.value("setting", "") == setting;
}

std::optional<double> number_or_null(const json& r, const char* key) {
  auto it = r.find(key);
  if (it == r.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

}  // namespace

std::string MeasuredCell::text() const {
  char buf[96];
  if (ci_low && ci_high)
    std::snprintf(buf, sizeof(buf), "%.1f [%.1f, %.1f] over %lld samples", score, *ci_low, *ci_high,
                  static_cast<long long>(samples));
  else
    std::snprintf(buf, sizeof(buf), "%.1f (no interval) over %lld samples", score,
                  static_cast<long long>(samples));
  return buf;
}

json MeasuredCell::to_json() const {
  return {{"score", score},
          {"ci_low", ci_low ? json(*ci_low) : json(nullptr)},
          {"ci_high", ci_high ? json(*ci_high) : json(nullptr)},
          {"samples", samples},
          {"source", source}};
}

DemoTable DemoTable::load(const std::string& path) {
  // A regular file (a directory, FIFO or device is refused by name, never read or waited on),
  // of a sane size, with flat JSON (io::parse_json: no deep nesting, no repeated keys).
  DemoTable t;
  t.path_ = path;
  try {
    const uint64_t size = io::check_input_file(path, "results table");
    KVEVICT_CHECK(size <= kMaxTableBytes, "results table ", path, ": its ", size,
                  " bytes exceed the limit of ", kMaxTableBytes, " bytes");
    std::ifstream in(path, std::ios::binary);
    KVEVICT_CHECK(in.good(), "results table ", path, " cannot be read");
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    t.doc_ = io::parse_json(text, "results table " + path);
  } catch (const Error& e) {
    KVEVICT_FAIL(e.what(), "; expected the JSON that tools/demo_table.py writes");
  }
  KVEVICT_CHECK(t.doc_.is_object() && t.doc_.value("kind", "") == "kvevict-demo-table" &&
                    t.doc_.value("version", 0) == 1 && t.doc_.contains("rows") &&
                    t.doc_["rows"].is_array() && t.doc_.contains("sources") &&
                    t.doc_["sources"].is_array(),
                "results table ", path,
                " is not a kvevict demo table (kind kvevict-demo-table, "
                "version 1, with sources and rows); expected the JSON that tools/demo_table.py "
                "writes");
  t.rule_ = t.doc_.value("rule", "");
  for (const auto& s : t.doc_["sources"]) {
    KVEVICT_CHECK(s.is_object(), "results table ", path, ": a source is not an object");
    std::ostringstream os;
    os << s.value("file", "?");
    std::vector<std::string> parts;
    for (const char* k : {"commit", "date_utc", "device"})
      if (s.contains(k) && s[k].is_string()) parts.push_back(s[k].get<std::string>());
    if (!parts.empty()) {
      os << " (";
      for (size_t i = 0; i < parts.size(); ++i) os << (i ? ", " : "") << parts[i];
      os << ")";
    }
    t.sources_.push_back(os.str());
  }
  for (const auto& r : t.doc_["rows"]) {
    KVEVICT_CHECK(r.is_object() && r.contains("score") && r["score"].is_number() &&
                      r.contains("source") && r["source"].is_number_integer() &&
                      r["source"].get<int64_t>() >= 0 &&
                      r["source"].get<int64_t>() < static_cast<int64_t>(t.sources_.size()),
                  "results table ", path,
                  ": a row lacks a score or a valid source index: ", r.dump().substr(0, 200));
  }
  return t;
}

std::optional<DemoTable> DemoTable::find(const std::string& path, std::string* searched) {
  if (!path.empty()) return load(path);
  std::vector<std::string> places;
  if (const char* e = std::getenv("KVEVICT_DEMO_TABLE"); e != nullptr && *e != '\0')
    places.emplace_back(e);
  const std::string dir = exe_dir();
  if (!dir.empty()) {
    places.push_back(dir + "/demo_table.json");
    places.push_back(dir + "/../share/kvevict/demo_table.json");
  }
  places.push_back(source_dir() + "/docs/results/demo_table.json");
  std::string list;
  for (const auto& p : places) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return load(p);
    list += (list.empty() ? "" : ", ") + p;
  }
  if (searched != nullptr) *searched = list;
  return std::nullopt;
}

std::optional<MeasuredCell> DemoTable::cell(const std::string& model, const std::string& task,
                                            int64_t length, const std::string& mode,
                                            const std::string& setting,
                                            const std::string& budget) const {
  for (const auto& r : doc_["rows"]) {
    if (!same_cell(r, model, task, length, mode, setting) || r.value("budget", "") != budget)
      continue;
    MeasuredCell c;
    c.score = r["score"].get<double>();
    c.ci_low = number_or_null(r, "ci_low");
    c.ci_high = number_or_null(r, "ci_high");
    c.samples = r.value("samples", int64_t{0});
    c.source = sources_.at(r["source"].get<size_t>());
    return c;
  }
  return std::nullopt;
}

BudgetRule DemoTable::budget_rule(const std::string& model, const std::string& task, int64_t length,
                                  const std::string& mode, const std::string& setting) const {
  BudgetRule out;
  if (!doc_.contains("defaults") || !doc_["defaults"].is_array()) return out;
  for (const auto& d : doc_["defaults"]) {
    if (!d.is_object() || !same_cell(d, model, task, length, mode, setting)) continue;
    out.full_measured = true;
    out.full = d.value("full", 0.0);
    out.full_samples = d.value("full_samples", int64_t{0});
    if (d.contains("budget") && d["budget"].is_string()) {
      out.budget = d["budget"].get<std::string>();
      out.score = d.value("score", 0.0);
      out.samples = d.value("samples", int64_t{0});
      if (d.contains("source") && d["source"].is_number_integer() &&
          d["source"].get<size_t>() < sources_.size())
        out.source = sources_[d["source"].get<size_t>()];
    }
    return out;
  }
  return out;
}

std::vector<int64_t> DemoTable::lengths(const std::string& model, const std::string& task,
                                        const std::string& mode, const std::string& setting) const {
  std::vector<int64_t> out;
  for (const auto& r : doc_["rows"])
    if (r.value("model", "") == model && r.value("task", "") == task &&
        r.value("mode", "") == mode && r.value("setting", "") == setting)
      out.push_back(r.value("target_length", int64_t{-1}));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace kvevict::cli
