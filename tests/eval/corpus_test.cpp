// Corpus loading, its missing-file message, and the text helpers the haystacks are cut with.
#include "eval/corpus.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "eval/eval_fixtures.h"
#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

TEST(Corpus, LoadsNovelsAndWordLists) {
  testing::TempCorpus dir(300, 50);
  Corpus c = Corpus::load(dir.dir());
  EXPECT_EQ(c.novels.size(), 6u);
  EXPECT_EQ(c.nouns.size(), 50u);
  EXPECT_EQ(c.adjectives.size(), 50u);
  EXPECT_EQ(c.verbs.size(), 50u);
  EXPECT_EQ(c.all_words.size(), 200u) << "50 own words + the 150 of the other lists";
  const std::string essay = c.essay_text();
  EXPECT_EQ(essay.find('\n'), std::string::npos);
  EXPECT_EQ(essay.find("  "), std::string::npos);
  EXPECT_EQ(essay.find('_'), std::string::npos);
  EXPECT_NE(essay.find("TITLE OF sensesensibility By A. Writer CHAPTER I"), std::string::npos);
  // The novels come in janeaustenr's order.
  EXPECT_LT(essay.find("TITLE OF sensesensibility"), essay.find("TITLE OF persuasion"));
  const std::string prose = c.prose_text();
  EXPECT_NE(prose.find("\n\n"), std::string::npos) << "paragraph breaks must survive in prose";
}

TEST(Corpus, MissingFileNamesItAndThePrepareScript) {
  testing::TempCorpus dir(100, 20);
  std::filesystem::remove(std::filesystem::path(dir.dir()) / "austen" / "emma.txt");
  try {
    Corpus::load(dir.dir());
    FAIL() << "expected an error for the missing novel";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("austen/emma.txt"), std::string::npos) << msg;
    EXPECT_NE(msg.find("scripts/prepare_corpus.sh"), std::string::npos) << msg;
  }
  try {
    Corpus::load("/nonexistent/kvevict/corpus");
    FAIL() << "expected an error for a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sensesensibility.txt"), std::string::npos) << e.what();
  }
}

TEST(Corpus, WordListRejectsNonAlphabeticLines) {
  testing::TempCorpus dir(100, 20);
  {
    std::ofstream out(std::filesystem::path(dir.dir()) / "words_verb.txt", std::ios::app);
    out << "ice-cream\n";
  }
  try {
    Corpus::load(dir.dir());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("words_verb.txt"), std::string::npos) << msg;
    EXPECT_NE(msg.find("line 21"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ice-cream"), std::string::npos) << msg;
  }
}

TEST(SplitSentences, KeepsHonorificsAndInitialsInsideSentences) {
  const std::string text =
      "Mr. Darcy bowed. \"Indeed!\" said Mrs. Bennet to J. Smith? Yes. St. Ives is far. End";
  const auto s = split_sentences(text);
  const std::vector<std::string> expected = {
      "Mr. Darcy bowed.", "\"Indeed!\"", "said Mrs. Bennet to J. Smith?", "Yes.",
      "St. Ives is far.", "End"};
  EXPECT_EQ(s, expected);
}

TEST(SplitSentences, JoiningGivesBackTheText) {
  const Corpus& c = testing::test_corpus();
  const std::string essay = c.essay_text().substr(0, 20000);
  const auto s = split_sentences(essay);
  ASSERT_GT(s.size(), 50u);
  std::string joined;
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_FALSE(s[i].empty());
    joined += (i ? " " : "") + s[i];
  }
  EXPECT_EQ(joined, essay);
}

TEST(SplitWords, SplitsOnSingleSpaces) {
  EXPECT_EQ(split_words("a bb  c"), (std::vector<std::string>{"a", "bb", "c"}));
  EXPECT_TRUE(split_words("").empty());
}

// The real corpus, when scripts/prepare_corpus.sh has been run in this checkout.
TEST(Corpus, RealAustenCorpusWhenPrepared) {
  const std::string dir = std::string(KVEVICT_SOURCE_DIR) + "/data/corpus";
  if (!std::filesystem::exists(dir + "/austen/emma.txt"))
    GTEST_SKIP() << dir << " not prepared (scripts/prepare_corpus.sh)";
  Corpus c = Corpus::load(dir);
  const std::string essay = c.essay_text();
  EXPECT_GT(split_words(essay).size(), 600000u) << "six novels are about 730k words";
  EXPECT_NE(essay.find("It is a truth universally acknowledged"), std::string::npos);
  EXPECT_GT(c.nouns.size(), 5000u);
}

}  // namespace
}  // namespace kvevict::eval
