#include "eval/results_format.h"

#include <cmath>

#include "io/json_parse.h"

namespace kvevict::eval {

using nlohmann::json;

json finite_or_null(double x) {
  return std::isfinite(x) ? json(x) : json(nullptr);
}

json parse_results_json(const std::string& text, const std::string& label) {
  json doc = io::parse_json(text, label);
  KVEVICT_CHECK(doc.is_object() && doc.value("kind", json()) == "kvevict-results", label,
                ": not a kvevict results file (expected \"kind\": \"kvevict-results\", as "
                "kvevict eval / ppl --out write)");
  return doc;
}

json meta_to_json(const RunMeta& m) {
  json options = json::object();
  if (!m.options_json.empty()) options = json::parse(m.options_json);
  json pairs = json::array();
  for (const auto& [a, b] : m.comparisons) pairs.push_back({a, b});
  return {{"model", m.model},
          {"prompt_style", m.prompt_style},
          {"base_seed", m.base_seed},
          {"split", m.split},
          {"notes", m.notes},
          {"kvevict_version", m.kvevict_version},
          {"git_commit", m.git_commit},
          {"git_modified", m.git_modified},
          {"command_line", m.command_line},
          {"date_utc", m.date_utc},
          {"device", m.device},
          {"model_path", m.model_path},
          {"model_sha256", m.model_sha256},
          {"options", options},
          {"bootstrap",
           {{"resamples", m.bootstrap.resamples},
            {"seed", m.bootstrap.seed},
            {"level", m.bootstrap.level},
            {"method", m.bootstrap.describe()}}},
          {"comparisons", pairs}};
}

RunMeta meta_from_json(const json& doc, const std::string& label) {
  auto it = doc.find("meta");
  KVEVICT_CHECK(it != doc.end(), label, ": field 'meta' is missing");
  const JsonReader m(*it, label + " meta");
  RunMeta meta;
  meta.model = m.str("model");
  meta.prompt_style = m.str("prompt_style");
  meta.base_seed = m.unsigned_integer("base_seed");
  meta.split = m.str("split");
  meta.notes = m.strings("notes");
  meta.kvevict_version = m.str("kvevict_version");
  meta.git_commit = m.str("git_commit");
  meta.git_modified = m.boolean("git_modified");
  meta.command_line = m.str("command_line");
  meta.date_utc = m.str("date_utc");
  meta.device = m.str("device");
  meta.model_path = m.str("model_path");
  meta.model_sha256 = m.str("model_sha256");
  const json& options = m.field("options");
  KVEVICT_CHECK(options.is_object(), label, " meta: 'options' is ", options.type_name(),
                "; expected an object");
  meta.options_json = options.dump();
  const JsonReader b(m.field("bootstrap"), label + " meta.bootstrap");
  meta.bootstrap.resamples = static_cast<int>(b.integer("resamples"));
  meta.bootstrap.seed = b.unsigned_integer("seed");
  meta.bootstrap.level = b.number("level");
  meta.bootstrap.validate();
  const json& pairs = m.field("comparisons");
  KVEVICT_CHECK(pairs.is_array(), label, " meta: 'comparisons' is ", pairs.type_name(),
                "; expected an array of [A, B] pairs");
  for (const json& p : pairs) {
    KVEVICT_CHECK(p.is_array() && p.size() == 2 && p[0].is_string() && p[1].is_string(), label,
                  " meta: comparison ", p.dump(), " is not an [A, B] pair");
    meta.comparisons.emplace_back(p[0].get<std::string>(), p[1].get<std::string>());
  }
  return meta;
}

void write_meta_markdown(std::ostream& md, const RunMeta& m) {
  md << "- model: " << (m.model.empty() ? "(unnamed)" : m.model) << "\n";
  if (!m.model_sha256.empty())
    md << "- model file: " << m.model_path << " (sha256 " << m.model_sha256 << ")\n";
  if (!m.device.empty()) md << "- device: " << m.device << "\n";
  if (!m.kvevict_version.empty())
    md << "- kvevict " << m.kvevict_version << ", commit " << m.git_commit
       << (m.git_modified ? " (modified)" : "") << "\n";
  if (!m.date_utc.empty()) md << "- date: " << m.date_utc << "\n";
  if (!m.command_line.empty()) md << "- command: `" << m.command_line << "`\n";
}

void check_mergeable(const RunMeta& first, const std::string& first_label, const RunMeta& other,
                     const std::string& other_label) {
  auto same = [&](const char* what, const std::string& a, const std::string& b) {
    KVEVICT_CHECK(a == b, "merge: ", other_label, " has ", what, " '", b, "' but ", first_label,
                  " has '", a, "'; expected runs of one model, build and protocol");
  };
  same("model_sha256", first.model_sha256, other.model_sha256);
  same("git_commit", first.git_commit, other.git_commit);
  same("device", first.device, other.device);
  same("bootstrap", first.bootstrap.describe(), other.bootstrap.describe());
  same("base_seed", std::to_string(first.base_seed), std::to_string(other.base_seed));
}

}  // namespace kvevict::eval
