#include "eval/corpus.h"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "kvevict/error.h"

namespace kvevict::eval {

namespace {

constexpr const char* kPrepareHint =
    "; run scripts/prepare_corpus.sh (after scripts/install_deps.sh --eval) to create it, or point "
    "KVEVICT_CORPUS_DIR at a prepared corpus";

std::string read_required(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KVEVICT_CHECK(in.good(), "corpus file '", path, "' is missing", kPrepareHint);
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  KVEVICT_CHECK(!text.empty(), "corpus file '", path, "' is empty", kPrepareHint);
  return text;
}

std::vector<std::string> read_word_list(const std::string& path) {
  std::istringstream in(read_required(path));
  std::vector<std::string> words;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    for (char c : line)
      KVEVICT_CHECK(c >= 'a' && c <= 'z', "word list '", path, "' line ", line_no, " is '", line,
                    "'; expected one lowercase alphabetic word per line", kPrepareHint);
    words.push_back(line);
  }
  return words;
}

}  // namespace

const std::vector<std::string>& austen_novel_names() {
  static const std::vector<std::string> names = {"sensesensibility", "prideprejudice",
                                                 "mansfieldpark",    "emma",
                                                 "northangerabbey",  "persuasion"};
  return names;
}

std::string Corpus::default_dir() {
  const char* env = std::getenv("KVEVICT_CORPUS_DIR");
  return (env != nullptr && *env != '\0') ? std::string(env) : std::string("data/corpus");
}

Corpus Corpus::load(const std::string& dir) {
  Corpus c;
  c.root = dir;
  for (const auto& name : austen_novel_names())
    c.novels.push_back(read_required(dir + "/austen/" + name + ".txt"));
  c.nouns = read_word_list(dir + "/words_noun.txt");
  c.adjectives = read_word_list(dir + "/words_adj.txt");
  c.verbs = read_word_list(dir + "/words_verb.txt");
  c.all_words = read_word_list(dir + "/words_all.txt");
  return c;
}

std::string Corpus::essay_text() const {
  std::string out;
  size_t total = 0;
  for (const auto& n : novels) total += n.size() + 1;
  out.reserve(total);
  bool pending_space = false;
  for (const auto& novel : novels) {
    for (char ch : novel) {
      if (ch == '_' || ch == '\r') continue;
      if (std::isspace(static_cast<unsigned char>(ch))) {
        pending_space = !out.empty();
        continue;
      }
      if (pending_space) out.push_back(' ');
      pending_space = false;
      out.push_back(ch);
    }
    pending_space = !out.empty();
  }
  return out;
}

std::string Corpus::prose_text() const {
  // Lines inside a paragraph join with a space; blank lines stay as paragraph breaks.
  std::string out;
  for (const auto& novel : novels) {
    std::istringstream in(novel);
    std::string line;
    int blank_run = 0;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      std::string cleaned;
      for (char ch : line)
        if (ch != '_') cleaned.push_back(ch);
      while (!cleaned.empty() && std::isspace(static_cast<unsigned char>(cleaned.back())))
        cleaned.pop_back();
      if (cleaned.empty()) {
        ++blank_run;
        continue;
      }
      if (!out.empty()) out += blank_run > 0 ? "\n\n" : " ";
      blank_run = 0;
      out += cleaned;
    }
  }
  return out;
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) words.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return words;
}

std::vector<std::string> split_sentences(const std::string& text) {
  static const char* kAbbrev[] = {"Mr", "Mrs", "Dr", "St", "Messrs", "Mme", "Col", "Capt", "Rev"};
  std::vector<std::string> out;
  size_t start = 0;
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    char c = text[i];
    if (c != '.' && c != '!' && c != '?') continue;
    size_t end = i + 1;
    while (end < n &&
           (text[end] == '"' || text[end] == '\'' || text[end] == ')' || text[end] == ']'))
      ++end;
    if (end >= n || text[end] != ' ') continue;
    if (c == '.') {
      size_t w = i;
      while (w > start && std::isalpha(static_cast<unsigned char>(text[w - 1]))) --w;
      std::string word = text.substr(w, i - w);
      bool abbrev = false;
      for (const char* a : kAbbrev) abbrev = abbrev || word == a;
      // A single capital ("J. Smith") is an initial, not a sentence end.
      abbrev = abbrev || (word.size() == 1 && std::isupper(static_cast<unsigned char>(word[0])));
      if (abbrev) continue;
    }
    out.push_back(text.substr(start, end - start));
    start = end + 1;
    i = end;
  }
  if (start < n) out.push_back(text.substr(start));
  return out;
}

}  // namespace kvevict::eval
