#!/usr/bin/env bash
# Builds the evaluation corpus under data/corpus/ from Debian packages (no network at run time):
#   austen/<novel>.txt   the six Jane Austen novels of r-cran-janeaustenr, one line per source line
#   words_noun.txt, words_adj.txt, words_verb.txt   WordNet lemmas (wordnet-base): lowercase,
#                        alphabetic, 3-12 letters, seen at least once in WordNet's sense-tagged corpus
#                        (tagsense_cnt > 0), which keeps ordinary words and drops the rare ones.
#   words_all.txt        every such lemma of the three lists without the tagged-corpus filter: the
#                        larger list common-words extraction falls back to at long lengths (as RULER
#                        falls back from its wonderwords list to a larger English word list).
# Install the packages first with scripts/install_deps.sh --eval.
#   scripts/prepare_corpus.sh [OUT_DIR]     (default: data/corpus next to this script's repo)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/data/corpus}"
WORDNET_DIR="${WORDNET_DIR:-/usr/share/wordnet}"

command -v Rscript >/dev/null 2>&1 || {
  echo "prepare_corpus.sh: Rscript not found; run scripts/install_deps.sh --eval (installs r-cran-janeaustenr)" >&2
  exit 2
}
for pos in noun adj verb; do
  [ -f "$WORDNET_DIR/index.$pos" ] || {
    echo "prepare_corpus.sh: $WORDNET_DIR/index.$pos not found; run scripts/install_deps.sh --eval (installs wordnet-base)" >&2
    exit 2
  }
done

mkdir -p "$OUT/austen"
# Each novel is a character vector of text lines in the R package; write them as they are.
Rscript --vanilla -e '
  suppressPackageStartupMessages(library(janeaustenr))
  out <- commandArgs(trailingOnly = TRUE)[1]
  novels <- c("sensesensibility", "prideprejudice", "mansfieldpark", "emma",
              "northangerabbey", "persuasion")
  for (n in novels) {
    lines <- get(n, envir = asNamespace("janeaustenr"))
    con <- file(file.path(out, paste0(n, ".txt")), open = "w", encoding = "UTF-8")
    writeLines(lines, con)
    close(con)
  }
' "$OUT/austen" || {
  echo "prepare_corpus.sh: exporting the Austen novels failed; is r-cran-janeaustenr installed? (scripts/install_deps.sh --eval)" >&2
  exit 2
}

# index.<pos> lines: lemma pos synset_cnt p_cnt [ptr_symbol x p_cnt] sense_cnt tagsense_cnt offsets...
# License header lines start with two spaces and never match the lemma pattern.
for pos in noun adj verb; do
  LC_ALL=C awk '$1 ~ /^[a-z]+$/ && length($1) >= 3 && length($1) <= 12 {
                  p = $4; if ($(6 + p) > 0) print $1 }' "$WORDNET_DIR/index.$pos" \
    | LC_ALL=C sort -u > "$OUT/words_$pos.txt"
done
for pos in noun adj verb; do
  LC_ALL=C awk '$1 ~ /^[a-z]+$/ && length($1) >= 3 && length($1) <= 12 { print $1 }' "$WORDNET_DIR/index.$pos"
done | LC_ALL=C sort -u > "$OUT/words_all.txt"

echo "prepare_corpus.sh: wrote $OUT"
for f in "$OUT"/austen/*.txt "$OUT"/words_*.txt; do
  printf '  %-40s %8d lines\n' "${f#$OUT/}" "$(wc -l < "$f")"
done
