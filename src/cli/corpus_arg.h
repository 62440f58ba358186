// Where the evaluation corpus lives for the CLI: $KVEVICT_CORPUS_DIR, else data/corpus under the
// working directory, else under the repository root (scripts/prepare_corpus.sh writes it there).
#pragma once

#include <string>

namespace kvevict::cli {

std::string corpus_dir();

}  // namespace kvevict::cli
