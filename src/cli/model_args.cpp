#include "cli/model_args.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>

#include "cli/numeric_options.h"
#include "core/parallel.h"
#include "kvevict/error.h"

#ifndef KVEVICT_SOURCE_DIR
#define KVEVICT_SOURCE_DIR "."
#endif

namespace kvevict::cli {

std::string source_dir() {
  return KVEVICT_SOURCE_DIR;
}

void ModelArgs::add_to(CLI::App& cmd) {
  cmd.add_option("-m,--model", model,
                 "smollm2 (SmolLM2-135M-Instruct), gemma3-270m, or a path to a .gguf file")
      ->capture_default_str();
  cmd.add_option("--device", device,
                 "cpu, or cuda (llama / qwen2 / gemma3 in bf16 on the GPU; needs a CUDA build)")
      ->capture_default_str();
  // The CPU session stores f32, f16 or bf16 caches (SessionOptions::validate); help and check
  // list exactly those.
  cmd.add_option("--kv-dtype", kv_dtype, "KV cache dtype on the CPU: f32, f16 or bf16")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->capture_default_str();
  add_threads(cmd, threads);
}

std::string ModelInfo::context_text() const {
  return "the " + std::to_string(config.context_length) + "-token context of " + config.name;
}

void check_decode_rows(int64_t budget, int64_t slack, const char* budget_flag,
                       const char* slack_flag, const ModelInfo& model) {
  if (budget <= 0) return;  // decode-time eviction off
  const int64_t ctx = model.config.context_length;
  KVEVICT_CHECK(budget + slack <= ctx, budget_flag, " ", budget,
                slack > 0 ? std::string(" + ") + slack_flag + " " + std::to_string(slack) : "",
                " exceeds ", model.context_text(),
                ": no head grows past it, so nothing would be evicted; expected at most ", ctx,
                " rows a head");
}

std::string ModelArgs::file() const {
  try {
    return resolve_model_path(model, source_dir());
  } catch (const Error&) {
    return {};  // inspect() and load() say what is wrong with it
  }
}

ModelInfo ModelArgs::inspect() const {
  check_device();
  ModelInfo info;
  info.file = gguf::File::open(resolve_model_path(model, source_dir()));
  info.config = ModelConfig::from_gguf(*info.file);
  info.tokenizer = Tokenizer::from_gguf(*info.file);
  return info;
}

void ModelArgs::check_device() const {
  KVEVICT_CHECK(device == "cpu" || device == "cuda", "unknown --device '", device,
                "'; expected cpu or cuda");
  std::string why;
  KVEVICT_CHECK(runtime_available(cuda() ? Device::kCuda : Device::kCpu, &why), "--device ", device,
                ": ", why, "; expected a GPU runtime, or --device cpu");
}

RuntimeOptions ModelArgs::runtime_options(ProgressFn progress) const {
  RuntimeOptions o;
  o.device = cuda() ? Device::kCuda : Device::kCpu;
  o.kv_dtype = dtype_parse(kv_dtype);
  o.progress = std::move(progress);
  return o;
}

std::shared_ptr<const ModelRuntime> ModelArgs::runtime(std::shared_ptr<const Model> model,
                                                       ProgressFn progress) const {
  return ModelRuntime::create(std::move(model), runtime_options(std::move(progress)));
}

std::shared_ptr<const Model> ModelArgs::load() const {
  check_device();
  set_num_threads(threads);
  // OpenBLAS falls back to its generic SSE3 ("Prescott") kernels on CPUs it does not recognize,
  // about 4x slower for the projections; say how to pick the right ones.
  const std::string blas = blas_description();
  if (blas.find("Prescott") != std::string::npos && !std::getenv("OPENBLAS_CORETYPE"))
    std::fprintf(stderr,
                 "kvevict: note: %s runs its generic kernels here; for ~4x faster prefill set "
                 "OPENBLAS_CORETYPE=SkylakeX (AVX-512 CPUs) or Haswell (AVX2)\n",
                 blas.c_str());
  return Model::load(model, source_dir());
}

std::unique_ptr<Tokenizer> load_tokenizer(const Model& model) {
  KVEVICT_CHECK(model.file() != nullptr, "model ", model.config().name,
                " has random weights and no tokenizer");
  return Tokenizer::from_gguf(*model.file());
}

}  // namespace kvevict::cli
