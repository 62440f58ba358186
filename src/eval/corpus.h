// The text sources the evaluation reads, all prepared from Debian packages by
// scripts/prepare_corpus.sh into data/corpus/ (never downloaded at run time):
//   - prose: the six Jane Austen novels (r-cran-janeaustenr), the essay haystack of the RULER tasks
//     and the long text of the perplexity protocol;
//   - words: WordNet lemmas (wordnet-base) by part of speech, for needle keys and word lists.
#pragma once

#include <string>
#include <vector>

namespace kvevict::eval {

// The six novels in publication order of janeaustenr's austen_books().
const std::vector<std::string>& austen_novel_names();

struct Corpus {
  std::string root;                     // the directory it was read from
  std::vector<std::string> novels;      // [6] each novel's text as exported (lines joined by '\n')
  std::vector<std::string> nouns;       // lowercase alphabetic WordNet lemmas, sorted, unique
  std::vector<std::string> adjectives;  // same, adjectives
  std::vector<std::string> verbs;       // same, verbs
  std::vector<std::string> all_words;   // every lemma of the three, rare ones included (larger)

  // Reads <dir>/austen/<novel>.txt and <dir>/words_{noun,adj,verb,all}.txt. Throws naming the first
  // missing or empty file and the script that makes it (scripts/prepare_corpus.sh).
  static Corpus load(const std::string& dir);
  // The directory used when none is given: $KVEVICT_CORPUS_DIR, else "data/corpus".
  static std::string default_dir();

  // All novels with every whitespace run collapsed to one space, Italic markers ('_') removed:
  // the essay haystack (RULER collapses its essays the same way before splitting into words).
  std::string essay_text() const;
  // All novels concatenated with paragraph breaks kept, for perplexity (PG19-style long prose).
  std::string prose_text() const;
};

// The essay text split on single spaces (RULER's haystack unit for the essay type).
std::vector<std::string> split_words(const std::string& collapsed_text);

// Sentence split for prose: a sentence ends at '.', '!' or '?' (after any closing quotes or
// brackets) followed by a space, except after the honorifics Austen abbreviates (Mr. Mrs. Dr. St.
// ...). Stands in for nltk's sent_tokenize, which RULER uses; no sentence is empty and joining the
// result with single spaces gives back the input.
std::vector<std::string> split_sentences(const std::string& collapsed_text);

}  // namespace kvevict::eval
