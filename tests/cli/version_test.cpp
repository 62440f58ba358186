// `kvevict --version` prints the version of kvevict/version.h (the project version), nothing else.
#include <gtest/gtest.h>

#include <string>

#include "kvevict/version.h"
#include "support/cli_runner.h"

namespace kvevict {
namespace {

TEST(CliVersion, PrintsTheProjectVersion) {
  const auto r = testing::run_cli(KVEVICT_CLI_PATH, {"--version"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::string("kvevict ") + KVEVICT_VERSION_STRING + "\n");
}

}  // namespace
}  // namespace kvevict
