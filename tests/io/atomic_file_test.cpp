// The output-path policy of kvevict/io/atomic_file.h (issue 13): an output never replaces a
// device node, FIFO, socket, directory or dangling link (the writer used to rename its temporary
// over whatever the path was, turning `--out /dev/full` into a regular file); a missing directory
// is refused before anything is written; several outputs are written all or none; a failed write
// leaves the old file and no temporary. Every special file is made in the test's own temporary
// directory.
#include "kvevict/io/atomic_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "kvevict/error.h"
#include "kvevict/io/npy.h"
#include "support/cli_runner.h"
#include "support/special_files.h"

namespace kvevict {
namespace {

using testing::FileState;
using testing::SpecialKind;
using testing::TempDir;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write(const std::string& path, const std::string& text) {
  io::write_file_atomically(path, "test", {{text.data(), text.size()}});
}

// Expects a refused write naming `needle`, with the path and the directory exactly as before.
void expect_refused(const TempDir& dir, const std::string& path, const std::string& needle) {
  const FileState before = testing::file_state(path);
  const auto entries = testing::list_dir(dir.path());
  try {
    write(path, "new bytes");
    ADD_FAILURE() << "writing over " << path << " was not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  const float x = 1.0f;
  EXPECT_THROW(npy::save(path, DType::kF32, {1}, &x), Error) << path;
  EXPECT_TRUE(testing::file_state(path) == before) << path << " was touched";
  EXPECT_EQ(testing::list_dir(dir.path()), entries) << "a temporary was left in " << dir.path();
}

TEST(OutputPathPolicy, RefusesFifoSocketDirectoryAndDanglingLink) {
  TempDir dir;
  const std::vector<std::pair<SpecialKind, std::string>> kinds = {
      {SpecialKind::kFifo, "is a FIFO"},
      {SpecialKind::kSocket, "is a socket"},
      {SpecialKind::kDirectory, "is a directory"},
      {SpecialKind::kDanglingLink, "symbolic link to a missing file"}};
  for (const auto& [kind, needle] : kinds) {
    const std::string path = dir.file(std::string("special_") + std::to_string(int(kind)));
    std::string why;
    ASSERT_TRUE(testing::make_special(path, kind, &why)) << why;
    expect_refused(dir, path, needle);
  }
}

TEST(OutputPathPolicy, RefusesDeviceNodesAndLeavesThemDevices) {
  TempDir dir;
  for (SpecialKind kind :
       {SpecialKind::kNullDevice, SpecialKind::kFullDevice, SpecialKind::kBlockDevice}) {
    const std::string path = dir.file(std::string("dev_") + std::to_string(int(kind)));
    std::string why;
    if (!testing::make_special(path, kind, &why)) GTEST_SKIP() << why;
    expect_refused(
        dir, path,
        kind == SpecialKind::kBlockDevice ? "is a block device" : "is a character device");
    // A link to a device is refused the same way, and the link stays a link.
    const std::string link = path + ".link";
    ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
    expect_refused(dir, link, "a link to a");
  }
}

TEST(OutputPathPolicy, FollowsALinkToARegularFileAndKeepsTheLink) {
  TempDir dir;
  write(dir.file("target.txt"), "old");
  ASSERT_EQ(::symlink(dir.file("target.txt").c_str(), dir.file("link.txt").c_str()), 0);
  write(dir.file("link.txt"), "new");
  EXPECT_EQ(read_text(dir.file("target.txt")), "new");
  struct stat st {};
  ASSERT_EQ(::lstat(dir.file("link.txt").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link was replaced by a file";
  EXPECT_EQ(testing::list_dir(dir.path()), (std::vector<std::string>{"link.txt", "target.txt"}));
}

TEST(OutputPathPolicy, MissingOrWrongDirectoryIsRefusedBeforeWriting) {
  TempDir dir;
  try {
    write(dir.file("missing/out.json"), "x");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing of " + dir.file("missing/out.json") +
                                         " does not exist"),
              std::string::npos)
        << e.what();
  }
  write(dir.file("plain"), "x");
  try {
    write(dir.file("plain/out.json"), "x");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected a directory"), std::string::npos) << e.what();
  }
  EXPECT_THROW(io::check_output_path("", "--out"), Error);
  EXPECT_EQ(testing::list_dir(dir.path()), (std::vector<std::string>{"plain"}));
}

TEST(StagedFiles, WritesAllOrNone) {
  TempDir dir;
  write(dir.file("a.json"), "old a");
  {
    io::StagedFiles files;
    const std::string a = "new a";
    files.add(dir.file("a.json"), "--out", {{a.data(), a.size()}});
    EXPECT_EQ(read_text(dir.file("a.json")), "old a") << "visible before commit";
    EXPECT_THROW(files.add(dir.file("missing/b.md"), "--markdown", {{a.data(), a.size()}}), Error);
    // Destroyed without commit: nothing changes, no temporary is left.
  }
  EXPECT_EQ(read_text(dir.file("a.json")), "old a");
  EXPECT_EQ(testing::list_dir(dir.path()), (std::vector<std::string>{"a.json"}));

  io::StagedFiles files;
  const std::string a = "new a", b = "new b";
  files.add(dir.file("a.json"), "--out", {{a.data(), a.size()}});
  files.add(dir.file("b.md"), "--markdown", {{b.data(), b.size()}});
  EXPECT_EQ(read_text(files.staged_path(dir.file("b.md"))), "new b");
  files.commit();
  EXPECT_EQ(read_text(dir.file("a.json")), "new a");
  EXPECT_EQ(read_text(dir.file("b.md")), "new b");
  EXPECT_EQ(testing::list_dir(dir.path()), (std::vector<std::string>{"a.json", "b.md"}));
}

TEST(StagedFiles, OneFileNamedTwiceIsRefused) {
  TempDir dir;
  ASSERT_EQ(::symlink(dir.file("a.json").c_str(), dir.file("alias.json").c_str()), 0);
  write(dir.file("a.json"), "x");
  io::StagedFiles files;
  files.add(dir.file("a.json"), "--out", {{"1", 1}});
  try {
    files.add(dir.file("alias.json"), "--markdown", {{"2", 1}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("also the file of --out"), std::string::npos) << e.what();
  }
  try {
    files.add(dir.file("./a.json"), "--keep", {{"3", 1}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("also the file of --out"), std::string::npos) << e.what();
  }
}

TEST(AtomicWrite, KeepsTheModeOfTheFileItReplaces) {
  TempDir dir;
  write(dir.file("secret"), "old");
  ASSERT_EQ(::chmod(dir.file("secret").c_str(), 0600), 0);
  write(dir.file("secret"), "new");
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  write(dir.file("fresh"), "x");
  ASSERT_EQ(::stat(dir.file("fresh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u & ~mask);
}

// A write that fails half-way (the file-size limit stands in for a full disk: write() returns
// EFBIG) leaves the old file whole and no temporary behind.
TEST(AtomicWrite, FailedWriteLeavesTheOldFileAndNoTemporary) {
  TempDir dir;
  write(dir.file("out.npy"), "old");
  struct rlimit old_limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit small = old_limit;
  small.rlim_cur = 1000;
  auto* old_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string big(4000, 'x');
  std::string message;
  try {
    write(dir.file("out.npy"), big);
  } catch (const Error& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find("write failed"), std::string::npos) << message;
  EXPECT_NE(message.find("nothing was written"), std::string::npos) << message;
  EXPECT_EQ(read_text(dir.file("out.npy")), "old");
  EXPECT_EQ(testing::list_dir(dir.path()), (std::vector<std::string>{"out.npy"}));
}

}  // namespace
}  // namespace kvevict
