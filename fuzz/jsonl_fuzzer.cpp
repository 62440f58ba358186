// Fuzzes the JSONL dataset reader: any byte string must either parse or throw kvevict::Error;
// every parsed sample must survive sample_to_jsonl -> read_jsonl_samples unchanged, have only
// non-empty answers, and fit the row size limit when one is set.
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "eval/jsonl.h"
#include "kvevict/error.h"

namespace {

bool same(const kvevict::eval::Sample& a, const kvevict::eval::Sample& b) {
  return a.task == b.task && a.context == b.context && a.question == b.question &&
         a.answer_prefix == b.answer_prefix && a.answers == b.answers &&
         a.max_new_tokens == b.max_new_tokens;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<kvevict::eval::Sample> samples;
  // Half the inputs also run under a row size limit (the one eval --data sets from the model):
  // an accepted sample must then fit it.
  kvevict::eval::JsonlLimits limits;
  if (size > 0 && data[0] % 2 == 1) limits = {uint64_t{16} + data[0], "fuzz limit"};
  try {
    std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
    samples = kvevict::eval::read_jsonl_samples(in, "fuzz.jsonl", limits);
  } catch (const kvevict::Error&) {
    return 0;
  }
  for (const auto& s : samples) {
    if (s.answers.empty()) std::abort();
    for (const auto& a : s.answers)
      if (a.empty()) std::abort();  // an empty answer matches every prediction
    if (limits.max_text_bytes > 0 &&
        s.context.size() + s.question.size() + s.answer_prefix.size() > limits.max_text_bytes)
      std::abort();
  }
  for (const auto& s : samples) {
    // What the reader accepted, the writer must write and the reader read back identically.
    std::istringstream again(kvevict::eval::sample_to_jsonl(s) + "\n");
    std::vector<kvevict::eval::Sample> back;
    try {
      back = kvevict::eval::read_jsonl_samples(again, "roundtrip.jsonl");
    } catch (const kvevict::Error&) {
      std::abort();
    }
    if (back.size() != 1 || !same(back[0], s)) std::abort();
  }
  return 0;
}
