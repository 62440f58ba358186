// kvevict/version.h (generated from the project version by cmake/Version.cmake) against the one
// source of the version, project(kvevict VERSION ...) in the top CMakeLists.txt, read here from
// the source tree; the C API's run-time version and the Python package's copies must agree.
#include "kvevict/version.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "kvevict/kvevict.h"

namespace {

std::string read_source(const std::string& rel) {
  const std::string path = std::string(KVEVICT_SOURCE_DIR) + "/" + rel;
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The first capture group of `pattern` in the source file `rel` ("" when it does not match).
std::string find_in_source(const std::string& rel, const std::string& pattern) {
  std::smatch m;
  const std::string text = read_source(rel);
  if (!std::regex_search(text, m, std::regex(pattern))) return "";
  return m[1].str();
}

struct ProjectVersion {
  int major = -1, minor = -1, patch = -1;
  std::string str;
};

ProjectVersion project_version() {
  ProjectVersion v;
  v.str =
      find_in_source("CMakeLists.txt", R"(project\(kvevict\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+))");
  std::sscanf(v.str.c_str(), "%d.%d.%d", &v.major, &v.minor, &v.patch);
  return v;
}

TEST(Version, HeaderMatchesTheCMakeProjectVersion) {
  const ProjectVersion v = project_version();
  ASSERT_FALSE(v.str.empty()) << "no project(kvevict VERSION x.y.z) in CMakeLists.txt";
  EXPECT_EQ(KVEVICT_VERSION_MAJOR, v.major);
  EXPECT_EQ(KVEVICT_VERSION_MINOR, v.minor);
  EXPECT_EQ(KVEVICT_VERSION_PATCH, v.patch);
  EXPECT_EQ(std::string(KVEVICT_VERSION_STRING), v.str);
  EXPECT_EQ(KVEVICT_VERSION, v.major * 10000 + v.minor * 100 + v.patch);
}

TEST(Version, CApiReportsTheHeaderVersion) {
  ASSERT_NE(kvevict_version(), nullptr);
  EXPECT_STREQ(kvevict_version(), KVEVICT_VERSION_STRING);
}

// The Python package states the version twice more (pyproject.toml for the wheel, __version__);
// a release that bumps CMakeLists.txt alone fails here.
TEST(Version, PythonPackageStatesTheSameVersion) {
  EXPECT_EQ(find_in_source("pyproject.toml", R"(\nversion\s*=\s*\"([^\"]+)\")"),
            KVEVICT_VERSION_STRING);
  EXPECT_EQ(find_in_source("python/kvevict/__init__.py", R"(__version__\s*=\s*\"([^\"]+)\")"),
            KVEVICT_VERSION_STRING);
}

}  // namespace
