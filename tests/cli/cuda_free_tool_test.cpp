// The kvevict tool links no CUDA library (libkvevict_cuda is loaded by --device cuda only), so it
// starts on a machine without the CUDA runtime; --device cuda then says what is missing, exit 2.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "support/cli_runner.h"

namespace kvevict::testing {
namespace {

std::string capture(const std::string& cmd) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p.get())) > 0) out.append(buf, n);
  return out;
}

TEST(CudaFreeTool, LinksNoCudaLibrary) {
  const std::string ldd = capture(std::string("ldd '") + KVEVICT_CLI_PATH + "' 2>&1");
  if (ldd.empty()) GTEST_SKIP() << "ldd is not available";
  EXPECT_EQ(ldd.find("libcudart"), std::string::npos) << ldd;
  EXPECT_EQ(ldd.find("libcublas"), std::string::npos) << ldd;
  EXPECT_EQ(ldd.find("libcuda."), std::string::npos) << ldd;
  EXPECT_EQ(ldd.find("libkvevict_cuda"), std::string::npos) << ldd;
}

TEST(CudaFreeTool, CpuCommandsRunAndCudaSaysWhatIsMissing) {
  // A CPU command needs nothing of CUDA.
  const CliResult ok = run_cli(KVEVICT_CLI_PATH, {"generate", "--dummy", "smollm2-135m",
                                                  "--prompt-tokens", "8", "-n", "2", "-q"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  // The GPU library cannot be found: the message names it and the reason; exit 2, no crash.
  setenv("KVEVICT_CUDA_LIBRARY", "/nonexistent/libkvevict_cuda.so", 1);
  const CliResult bad =
      run_cli(KVEVICT_CLI_PATH, {"generate", "--dummy", "smollm2-135m", "--prompt-tokens", "8",
                                 "-n", "2", "--device", "cuda"});
  unsetenv("KVEVICT_CUDA_LIBRARY");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--device cuda: KVEVICT_CUDA_LIBRARY=/nonexistent/libkvevict_cuda.so "
                         "could not be loaded"),
            std::string::npos)
      << bad.err;
}

}  // namespace
}  // namespace kvevict::testing
