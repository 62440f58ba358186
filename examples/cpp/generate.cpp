// The model runtime (kvevict/model/runtime.h, README "Library API") from an installed kvevict:
// prefill with DropKV at a 50% budget, then greedy decoding.
//   generate                     random weights: SmolLM2-135M's shape cut to 4 layers and a
//                                4096-token vocabulary (runs anywhere in about a second)
//   generate MODEL [PROMPT]      a GGUF file, or smollm2 / gemma3-270m under $KVEVICT_MODEL_DIR
//   generate MODEL PROMPT cuda   the same on the GPU (a package built with CUDA)
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvevict/error.h"
#include "kvevict/model/evict_config.h"
#include "kvevict/model/model.h"
#include "kvevict/model/runtime.h"
#include "kvevict/model/sampler.h"
#include "kvevict/tokenizer.h"

int main(int argc, char** argv) {
  try {
    kvevict::RuntimeOptions opt;
    if (argc > 3 && std::string(argv[3]) == "cuda") opt.device = kvevict::Device::kCuda;
    std::shared_ptr<const kvevict::ModelRuntime> rt;
    std::unique_ptr<kvevict::Tokenizer> tok;
    std::vector<int32_t> prompt;
    if (argc > 1) {
      auto model = kvevict::Model::load(argv[1]);
      tok = kvevict::Tokenizer::from_gguf(*model->file());
      prompt = tok->encode(argc > 2 ? argv[2] : "The capital of France is", true);
      rt = kvevict::ModelRuntime::create(model, opt);
    } else {
      kvevict::ModelConfig c = kvevict::ModelConfig::preset("smollm2-135m");
      c.n_layers = 4;
      c.vocab_size = 4096;
      rt = kvevict::ModelRuntime::random(c, /*seed=*/1, opt);
      std::mt19937 rng(2);
      for (int i = 0; i < 64; ++i) prompt.push_back(static_cast<int32_t>(rng() % c.vocab_size));
    }
    std::printf("%s\n", rt->describe().c_str());

    const int max_new = 8;
    auto s = rt->session(static_cast<int64_t>(prompt.size()) + max_new);
    kvevict::EvictConfig evict;
    evict.prefill =
        kvevict::PrefillEviction::make(kvevict::method_parse("dropkv"), kvevict::Budget{0.5});
    s->prefill(prompt, evict);
    kvevict::Sampler greedy;
    const kvevict::GenerateResult out = s->generate(max_new, greedy);

    std::printf("%zu prompt tokens, %zu generated:", prompt.size(), out.tokens.size());
    for (int32_t t : out.tokens) std::printf(" %d", t);
    if (tok) std::printf("\n\"%s\"", tok->decode(out.tokens).c_str());
    std::printf("\n%s\n", s->stats().describe().c_str());
    return out.tokens.empty() ? 1 : 0;
  } catch (const kvevict::Error& e) {
    std::fprintf(stderr, "generate: %s\n", e.what());
    return 2;
  }
}
