// RULER's task table (scripts/synthetic.yaml) and prompt text
// (scripts/data/synthetic/constants.py).
#include <cmath>
#include <sstream>

#include "eval/ruler.h"
#include "kvevict/error.h"

namespace kvevict::eval {

namespace templates {
const char* const kNoiseSentence =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
const char* const kNeedle = "One of the special magic {type_needle_v} for {key} is: {value}.";
// RULER writes one template and, when a single value is asked for, rewrites Some->A, "are all"->is,
// are->is and drops the plural s of the value type; both forms are spelled out here.
const char* const kNiahPlural =
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to "
    "memorize it. I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are all "
    "the special magic {type_needle_v} for {query} mentioned in the provided text?";
const char* const kNiahSingular =
    "A special magic {type_needle_v} is hidden within the following text. Make sure to memorize "
    "it. I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat is the special "
    "magic {type_needle_v} for {query} mentioned in the provided text?";
const char* const kNiahPrefixPlural =
    " The special magic {type_needle_v} for {query} mentioned in the provided text are";
const char* const kNiahPrefixSingular =
    " The special magic {type_needle_v} for {query} mentioned in the provided text is";
const char* const kVariableTracking =
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
    "{context}\nQuestion: Find all variables that are assigned the value {query} in the text "
    "above.";
const char* const kVariableTrackingPrefix =
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} "
    "variables are assigned the value {query}, they are: ";
const char* const kCommonWords =
    "Below is a numbered list of words. In these words, some appear more often than others. "
    "Memorize the ones that appear most often.\n{context}\nQuestion: What are the 10 most common "
    "words in the above list?";
const char* const kCommonWordsPrefix =
    " Answer: The top 10 words that appear most often in the list are:";
const char* const kFreqWords =
    "Read the following coded text and track the frequency of each coded word. Find the three "
    "most frequently appeared coded words. {context}\nQuestion: Do not provide any explanation. "
    "Please ignore the dots '....'. What are the three most frequently appeared words in the "
    "above coded text?";
const char* const kFreqWordsPrefix =
    " Answer: According to the coded text above, the three most frequently appeared words are:";
}  // namespace templates

const char* needle_type_name(NeedleType t) {
  switch (t) {
    case NeedleType::kWords: return "words";
    case NeedleType::kNumbers: return "numbers";
    case NeedleType::kUuids: return "uuids";
  }
  return "?";
}

namespace {

TaskConfig niah(const char* name, Haystack h, NeedleType k, NeedleType v, int nk, int nv, int nq) {
  TaskConfig c;
  c.name = name;
  c.family = TaskFamily::kNiah;
  c.haystack = h;
  c.key_type = k;
  c.value_type = v;
  c.num_keys = nk > nq ? nk : nq;
  c.num_values = nv;
  c.num_queries = nq;
  c.max_new_tokens = 128;
  return c;
}

std::vector<TaskConfig> make_tasks() {
  using H = Haystack;
  using N = NeedleType;
  std::vector<TaskConfig> t;
  t.push_back(niah("niah_single_1", H::kRepeat, N::kWords, N::kNumbers, 1, 1, 1));
  t.push_back(niah("niah_single_2", H::kEssay, N::kWords, N::kNumbers, 1, 1, 1));
  t.push_back(niah("niah_single_3", H::kEssay, N::kWords, N::kUuids, 1, 1, 1));
  t.push_back(niah("niah_multikey_1", H::kEssay, N::kWords, N::kNumbers, 4, 1, 1));
  t.push_back(niah("niah_multikey_2", H::kNeedle, N::kWords, N::kNumbers, 1, 1, 1));
  t.push_back(niah("niah_multikey_3", H::kNeedle, N::kUuids, N::kUuids, 1, 1, 1));
  t.push_back(niah("niah_multivalue", H::kEssay, N::kWords, N::kNumbers, 1, 4, 1));
  t.push_back(niah("niah_multiquery", H::kEssay, N::kWords, N::kNumbers, 1, 1, 4));
  TaskConfig vt;
  vt.name = "vt";
  vt.family = TaskFamily::kVariableTracking;
  vt.haystack = Haystack::kRepeat;  // RULER's default "noise" haystack for vt
  vt.num_chains = 1;
  vt.num_hops = 4;
  vt.max_new_tokens = 30;
  t.push_back(vt);
  TaskConfig cwe;
  cwe.name = "cwe";
  cwe.family = TaskFamily::kCommonWords;
  cwe.haystack = Haystack::kNone;
  cwe.max_new_tokens = 120;
  t.push_back(cwe);
  TaskConfig fwe;
  fwe.name = "fwe";
  fwe.family = TaskFamily::kFreqWords;
  fwe.haystack = Haystack::kNone;
  fwe.max_new_tokens = 50;
  t.push_back(fwe);
  return t;
}

const std::vector<TaskConfig>& all_tasks() {
  static const std::vector<TaskConfig> tasks = make_tasks();
  return tasks;
}

}  // namespace

const std::vector<std::string>& ruler_task_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& t : all_tasks()) n.push_back(t.name);
    return n;
  }();
  return names;
}

const TaskConfig& ruler_task_config(const std::string& name) {
  for (const auto& t : all_tasks())
    if (t.name == name) return t;
  std::ostringstream valid;
  for (const auto& n : ruler_task_names()) valid << (valid.tellp() > 0 ? ", " : "") << n;
  KVEVICT_FAIL("RULER task '", name, "' is unknown; expected one of: ", valid.str());
}

const std::vector<int>& ruler_depths() {
  static const std::vector<int> depths = [] {
    std::vector<int> d;
    for (int i = 0; i < 40; ++i) {
      // round half to even, as numpy does, on 100 * i / 39
      double x = 100.0 * i / 39.0;
      double r = std::nearbyint(x);
      d.push_back(static_cast<int>(r));
    }
    return d;
  }();
  return depths;
}

std::string fill_template(const std::string& text,
                          const std::vector<std::pair<std::string, std::string>>& values) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '{') {
      size_t close = text.find('}', i);
      KVEVICT_CHECK(close != std::string::npos, "template has an unclosed '{' at byte ", i,
                    "; expected {name}");
      const std::string key = text.substr(i + 1, close - i - 1);
      bool found = false;
      for (const auto& kv : values) {
        if (kv.first == key) {
          out += kv.second;
          found = true;
          break;
        }
      }
      KVEVICT_CHECK(found, "template placeholder {", key, "} has no value; expected one of the ",
                    values.size(), " given names");
      i = close + 1;
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

}  // namespace kvevict::eval
