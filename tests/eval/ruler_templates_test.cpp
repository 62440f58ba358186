// Each RULER task produces RULER's literal prompt text, with answers that are present in the
// context and needles/haystack of the configured types. The template strings are spelled out here
// independently of src/eval/ruler_tasks.cpp, so a typo there fails this test.
#include <gtest/gtest.h>

#include <map>
#include <regex>

#include "eval/eval_fixtures.h"
#include "eval/ruler.h"
#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

const std::string kNoise =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
const std::string kWordRe = "[a-z]+-[a-z]+";
const std::string kNumberRe = "[1-9][0-9]{6}";
const std::string kUuidRe = "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}";

class RulerTemplates : public ::testing::Test {
 protected:
  Sample make(const std::string& task, int64_t target = 3001, uint64_t seed = 7) {
    GenerateOptions opt;
    opt.target_length = target;
    return gen_.generate(task, opt, seed);
  }
  testing::WhitespaceTokenizer tok_;
  RulerGenerator gen_{testing::test_corpus(), tok_};
};

int count_of(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

// Checks the niah prompt text literally and returns the haystack between preamble and question.
std::string check_niah_text(const Sample& s, bool single, const std::string& type_plural,
                            const std::string& query) {
  const std::string type = single ? type_plural.substr(0, type_plural.size() - 1) : type_plural;
  const std::string preamble = single ? "A special magic " + type +
                                            " is hidden within the following text. Make sure to "
                                            "memorize it. I will quiz you about the " +
                                            type + " afterwards.\n"
                                      : "Some special magic " + type +
                                            " are hidden within the following text. Make sure "
                                            "to memorize it. I will quiz you about the " +
                                            type + " afterwards.\n";
  const std::string question = single ? "What is the special magic " + type + " for " + query +
                                            " mentioned in the provided text?"
                                      : "What are all the special magic " + type + " for " + query +
                                            " mentioned in the provided text?";
  const std::string prefix = " The special magic " + type + " for " + query +
                             " mentioned in the provided text " + (single ? "is" : "are");
  EXPECT_EQ(s.context.substr(0, preamble.size()), preamble);
  EXPECT_EQ(s.context.back(), '\n');
  EXPECT_EQ(s.question, question);
  EXPECT_EQ(s.answer_prefix, prefix);
  EXPECT_EQ(s.input, s.context + s.question + s.answer_prefix) << "raw prompt layout";
  EXPECT_EQ(s.input_context_end, s.context.size());
  EXPECT_EQ(s.max_new_tokens, 128);
  return s.context.substr(preamble.size(), s.context.size() - preamble.size() - 1);
}

// Extracts the query from the niah question.
std::string query_of(const Sample& s) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(s.question, m, std::regex(" for (.*) mentioned in")));
  return m[1];
}

void check_needles(const Sample& s, const std::string& type_plural, const std::string& key_re,
                   const std::string& value_re, size_t expected_needles) {
  const std::regex needle_re("One of the special magic " + type_plural + " for (" + key_re +
                             ") is: (" + value_re + ")\\.");
  ASSERT_EQ(s.needles.size(), expected_needles);
  for (const auto& n : s.needles) {
    EXPECT_TRUE(std::regex_match(n.text, needle_re)) << n.text;
    EXPECT_EQ(s.context.compare(n.offset, n.text.size(), n.text), 0) << "needle offset is wrong";
  }
  for (const auto& a : s.answers) {
    EXPECT_TRUE(std::regex_match(a, std::regex(value_re))) << a;
    EXPECT_NE(s.context.find(" is: " + a + "."), std::string::npos) << a << " not in the context";
  }
}

TEST_F(RulerTemplates, NiahSingle1RepeatsTheNoiseSentence) {
  Sample s = make("niah_single_1");
  const std::string q = query_of(s);
  EXPECT_TRUE(std::regex_match(q, std::regex(kWordRe))) << q;
  const std::string hay = check_niah_text(s, true, "numbers", q);
  check_needles(s, "numbers", kWordRe, kNumberRe, 1);
  ASSERT_EQ(s.answers.size(), 1u);
  EXPECT_NE(hay.find("One of the special magic numbers for " + q + " is: " + s.answers[0] + "."),
            std::string::npos);
  // Every other line is the noise sentence, lines joined by "\n".
  std::istringstream lines(hay);
  std::string line;
  int noise = 0, other = 0;
  while (std::getline(lines, line)) (line == kNoise ? noise : other)++;
  EXPECT_EQ(other, 1);
  EXPECT_EQ(noise, s.haystack_amount);
}

TEST_F(RulerTemplates, NiahSingle2And3HideOneNeedleInProse) {
  for (const std::string task : {"niah_single_2", "niah_single_3"}) {
    SCOPED_TRACE(task);
    Sample s = make(task);
    const bool uuid = task == "niah_single_3";
    const std::string q = query_of(s);
    EXPECT_TRUE(std::regex_match(q, std::regex(kWordRe))) << q;
    const std::string type = uuid ? "uuids" : "numbers";
    const std::string hay = check_niah_text(s, true, type, q);
    check_needles(s, type, kWordRe, uuid ? kUuidRe : kNumberRe, 1);
    EXPECT_EQ(hay.find('\n'), std::string::npos) << "essay haystack is one line of prose";
    EXPECT_EQ(hay.find(kNoise), std::string::npos);
    // The haystack is the corpus text from its start with the needle inserted between sentences.
    std::string without = hay;
    without.erase(without.find(s.needles[0].text), s.needles[0].text.size());
    const std::string essay = testing::test_corpus().essay_text();
    std::string norm;  // collapse the double space left where the needle was removed
    for (char c : without)
      if (!(c == ' ' && !norm.empty() && norm.back() == ' ')) norm.push_back(c);
    while (!norm.empty() && norm.back() == ' ') norm.pop_back();
    while (!norm.empty() && norm.front() == ' ') norm.erase(norm.begin());
    EXPECT_EQ(essay.compare(0, norm.size(), norm), 0) << "haystack is not the essay prefix";
  }
}

TEST_F(RulerTemplates, NiahMultikey1HasFourKeysOneAsked) {
  Sample s = make("niah_multikey_1");
  const std::string q = query_of(s);
  check_niah_text(s, true, "numbers", q);
  check_needles(s, "numbers", kWordRe, kNumberRe, 4);
  ASSERT_EQ(s.answers.size(), 1u);
  int asked = 0;
  for (const auto& n : s.needles) asked += n.text.find(" for " + q + " is: ") != std::string::npos;
  EXPECT_EQ(asked, 1);
}

TEST_F(RulerTemplates, NiahMultikey2And3UseNeedlesAsHaystack) {
  for (const std::string task : {"niah_multikey_2", "niah_multikey_3"}) {
    SCOPED_TRACE(task);
    Sample s = make(task);
    const bool uuid = task == "niah_multikey_3";
    const std::string key_re = uuid ? kUuidRe : kWordRe;
    const std::string val_re = uuid ? kUuidRe : kNumberRe;
    const std::string q = query_of(s);
    EXPECT_TRUE(std::regex_match(q, std::regex(key_re))) << q;
    const std::string hay = check_niah_text(s, true, uuid ? "uuids" : "numbers", q);
    check_needles(s, uuid ? "uuids" : "numbers", key_re, val_re, 1);
    std::istringstream lines(hay);
    std::string line;
    int n = 0, with_query = 0;
    const std::regex any_needle("One of the special magic " +
                                std::string(uuid ? "uuids" : "numbers") + " for (" + key_re +
                                ") is: (" + val_re + ")\\.");
    while (std::getline(lines, line)) {
      EXPECT_TRUE(std::regex_match(line, any_needle)) << line;
      with_query += line.find(" for " + q + " is: ") != std::string::npos;
      ++n;
    }
    EXPECT_EQ(n, s.haystack_amount + 1);
    EXPECT_EQ(with_query, 1) << "the asked key must appear exactly once";
  }
}

TEST_F(RulerTemplates, NiahMultivalueAsksForFourValuesOfOneKey) {
  Sample s = make("niah_multivalue");
  const std::string q = query_of(s);
  check_niah_text(s, false, "numbers", q);
  check_needles(s, "numbers", kWordRe, kNumberRe, 4);
  ASSERT_EQ(s.answers.size(), 4u);
  for (const auto& n : s.needles) EXPECT_NE(n.text.find(" for " + q + " is: "), std::string::npos);
}

TEST_F(RulerTemplates, NiahMultiqueryListsFourKeys) {
  Sample s = make("niah_multiquery");
  const std::string q = query_of(s);
  const std::regex list_re("(" + kWordRe + "), (" + kWordRe + "), (" + kWordRe + "), and (" +
                           kWordRe + ")");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(q, m, list_re)) << q;
  check_niah_text(s, false, "numbers", q);
  check_needles(s, "numbers", kWordRe, kNumberRe, 4);
  ASSERT_EQ(s.answers.size(), 4u);
  // Answer i is the value of the i-th listed key.
  for (int i = 0; i < 4; ++i)
    EXPECT_NE(s.context.find("for " + m[i + 1].str() + " is: " + s.answers[i] + "."),
              std::string::npos);
}

TEST_F(RulerTemplates, VariableTrackingChainResolvesToTheAnswers) {
  Sample s = make("vt");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(s.question, m,
                               std::regex("Question: Find all variables that are assigned the "
                                          "value ([0-9]{5}) in the text above\\.")))
      << s.question;
  const std::string value = m[1];
  EXPECT_EQ(s.answer_prefix,
            " Answer: According to the chain(s) of variable assignment in the text above, 5 "
            "variables are assigned the value " +
                value + ", they are: ");
  EXPECT_EQ(s.max_new_tokens, 30);
  const std::string task_head =
      "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n";
  // An in-context example (a complete solved instance) comes first, then the task.
  ASSERT_EQ(count_of(s.context, task_head), 2);
  EXPECT_EQ(s.context.find(task_head), 0u);
  const size_t main_at = s.context.rfind(task_head);
  EXPECT_NE(s.context.substr(0, main_at).find("VAR "), std::string::npos);
  EXPECT_EQ(s.context.substr(main_at - 2, 2), "\n\n");
  const std::string main = s.context.substr(main_at);
  // Follow the chain: VAR X0 = value, VAR Xj+1 = VAR Xj.
  ASSERT_EQ(s.answers.size(), 5u);
  EXPECT_NE(main.find("VAR " + s.answers[0] + " = " + value), std::string::npos);
  for (int j = 0; j < 4; ++j)
    EXPECT_NE(main.find("VAR " + s.answers[j + 1] + " = VAR " + s.answers[j] + " "),
              std::string::npos);
  for (const auto& a : s.answers) EXPECT_TRUE(std::regex_match(a, std::regex("[A-Z]{5}")));
  EXPECT_EQ(count_of(main, kNoise), s.haystack_amount);
  // The chain statements appear in order.
  size_t prev = 0;
  for (const auto& n : s.needles) {
    EXPECT_GE(n.offset, prev);
    prev = n.offset;
    EXPECT_EQ(s.context.compare(n.offset, n.text.size(), n.text), 0);
  }
}

TEST_F(RulerTemplates, CommonWordsAnswersAreTheRepeatedWords) {
  for (int64_t target : {3001, 6007}) {
    SCOPED_TRACE(target);
    Sample s = make("cwe", target);
    const std::string head =
        "Below is a numbered list of words. In these words, some appear more often than others. "
        "Memorize the ones that appear most often.\n";
    const std::string question = "Question: What are the 10 most common words in the above list?";
    const std::string prefix = " Answer: The top 10 words that appear most often in the list are:";
    EXPECT_EQ(s.question, question);
    EXPECT_EQ(s.answer_prefix, prefix);
    EXPECT_EQ(s.max_new_tokens, 120);
    ASSERT_EQ(count_of(s.context, head), 2) << "one solved example, then the task";
    EXPECT_NE(s.context.find(question + prefix + " 1. "), std::string::npos);
    const std::string main = s.context.substr(s.context.rfind(head) + head.size());
    // Count each word of the numbered list.
    std::map<std::string, int> freq;
    std::istringstream in(main);
    std::string tok;
    int64_t expected_index = 1;
    while (in >> tok) {
      ASSERT_EQ(tok, std::to_string(expected_index) + ".");
      ++expected_index;
      ASSERT_TRUE(static_cast<bool>(in >> tok));
      ++freq[tok];
    }
    const int common = target < 4096 ? 6 : 30, rare = target < 4096 ? 1 : 3;
    ASSERT_EQ(s.answers.size(), 10u);
    for (const auto& a : s.answers) EXPECT_EQ(freq[a], common) << a;
    EXPECT_EQ(static_cast<int64_t>(freq.size()), s.haystack_amount);
    for (const auto& [w, f] : freq)
      if (std::find(s.answers.begin(), s.answers.end(), w) == s.answers.end())
        EXPECT_EQ(f, rare) << w;
  }
}

TEST_F(RulerTemplates, FreqWordsAnswersAreTheTopThreeCodedWords) {
  Sample s = make("fwe", 4001);
  const std::string head =
      "Read the following coded text and track the frequency of each coded word. Find the three "
      "most frequently appeared coded words. ";
  EXPECT_EQ(s.context.substr(0, head.size()), head);
  EXPECT_EQ(s.question,
            "Question: Do not provide any explanation. Please ignore the dots '....'. What are the "
            "three most frequently appeared words in the above coded text?");
  EXPECT_EQ(s.answer_prefix,
            " Answer: According to the coded text above, the three most frequently appeared words "
            "are:");
  EXPECT_EQ(s.max_new_tokens, 50);
  std::map<std::string, int> freq;
  std::istringstream in(s.context.substr(head.size()));
  std::string w;
  while (in >> w) ++freq[w];
  std::vector<std::pair<int, std::string>> ranked;
  for (const auto& [word, f] : freq) ranked.emplace_back(f, word);
  std::sort(ranked.rbegin(), ranked.rend());
  ASSERT_GE(ranked.size(), 5u);
  EXPECT_EQ(ranked[0].second, "...") << "the most frequent token is the noise";
  ASSERT_EQ(s.answers.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ranked[i + 1].second, s.answers[i]);
    EXPECT_TRUE(std::regex_match(s.answers[i], std::regex("[a-z]{6}")));
  }
  EXPECT_GT(ranked[3].first, ranked[4].first) << "the third answer must beat the fourth word";
}

TEST_F(RulerTemplates, ChatStyleWrapsOneUserTurnAndSplitsAtTheContext) {
  GenerateOptions opt;
  opt.target_length = 3001;
  opt.style = PromptStyle::kChat;
  Sample s = gen_.generate("niah_single_2", opt, 3);
  const std::string expected =
      "<|user|>\n" + s.context + s.question + "<|end|>\n<|assistant|>\n" + s.answer_prefix;
  EXPECT_EQ(s.input, expected);
  EXPECT_EQ(s.input_context(), "<|user|>\n" + s.context);
  EXPECT_EQ(s.input_question(), s.question + "<|end|>\n<|assistant|>\n" + s.answer_prefix);
  EXPECT_LE(s.length, 3001);
}

TEST_F(RulerTemplates, TaskTableMatchesRuler) {
  const std::vector<std::string> expected = {"niah_single_1",
                                             "niah_single_2",
                                             "niah_single_3",
                                             "niah_multikey_1",
                                             "niah_multikey_2",
                                             "niah_multikey_3",
                                             "niah_multivalue",
                                             "niah_multiquery",
                                             "vt",
                                             "cwe",
                                             "fwe"};
  EXPECT_EQ(ruler_task_names(), expected);
  try {
    ruler_task_config("qa_1");
    FAIL() << "qa_1 is out of scope";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("niah_multiquery"), std::string::npos) << e.what();
  }
  // round(linspace(0, 100, 40))
  const auto& d = ruler_depths();
  ASSERT_EQ(d.size(), 40u);
  EXPECT_EQ(d[0], 0);
  EXPECT_EQ(d[1], 3);
  EXPECT_EQ(d[2], 5);
  EXPECT_EQ(d[20], 51);
  EXPECT_EQ(d[39], 100);
}

TEST(FillTemplate, ReplacesNamesAndRejectsMissingOnes) {
  EXPECT_EQ(fill_template("a {x} b {y}{x}", {{"x", "1"}, {"y", "{z}"}}), "a 1 b {z}1");
  EXPECT_THROW(fill_template("a {q}", {{"x", "1"}}), Error);
  EXPECT_THROW(fill_template("a {q", {{"q", "1"}}), Error);
}

}  // namespace
}  // namespace kvevict::eval
