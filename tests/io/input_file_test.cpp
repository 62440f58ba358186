// What every reader does with a path that is not a regular file (issue 13: a directory given as
// .npy was reported as "9223372036854775807 bytes"; open() on a FIFO would block), and the size
// limit of text inputs (a prompt file, /dev/zero). The JSONL reader (eval) is checked through
// the CLI in tests/cli/bad_input_catalogue_test.cpp.
#include "io/input_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "kvevict/error.h"
#include "kvevict/io/gguf.h"
#include "kvevict/io/npy.h"
#include "kvevict/io/safetensors.h"
#include "support/cli_runner.h"
#include "support/special_files.h"

namespace kvevict {
namespace {

using testing::SpecialKind;
using testing::TempDir;

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(InputFile, EveryReaderNamesADirectory) {
  TempDir dir;
  const std::string d = dir.file("data.npy");
  std::string why;
  ASSERT_TRUE(testing::make_special(d, SpecialKind::kDirectory, &why)) << why;
  for (const std::string& msg :
       {error_of([&] { npy::load(d); }), error_of([&] { npy::read_header(d); }),
        error_of([&] { safetensors::File::open(d); }), error_of([&] { gguf::File::open(d); }),
        error_of([&] { io::read_text_input(d, "-f", 100); })}) {
    EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("9223372036854775807"), std::string::npos) << msg;
  }
}

TEST(InputFile, BinaryReadersRefuseAFifoWithoutBlocking) {
  TempDir dir;
  const std::string f = dir.file("pipe.gguf");
  std::string why;
  ASSERT_TRUE(testing::make_special(f, SpecialKind::kFifo, &why)) << why;
  for (const std::string& msg :
       {error_of([&] { npy::load(f); }), error_of([&] { safetensors::File::open(f); }),
        error_of([&] { gguf::File::open(f); })})
    EXPECT_NE(msg.find("is a FIFO; expected a regular file"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { io::check_input_file(dir.file("nope"), "npy"); }).find("does not exist"),
            std::string::npos);
}

TEST(InputFile, TextInputsAreCappedBeforeTheyAreReadWhole) {
  TempDir dir;
  std::ofstream(dir.file("big.txt")) << std::string(5000, 'a');
  const std::string msg = error_of([&] { io::read_text_input(dir.file("big.txt"), "-f", 4096); });
  EXPECT_NE(msg.find("5000 bytes exceed the limit of 4096"), std::string::npos) << msg;
  EXPECT_EQ(io::read_text_input(dir.file("big.txt"), "-f", 5000).size(), 5000u);

  // A pipe is read up to the limit + 1 bytes, then refused (the writer is not waited for).
  const std::string pipe = dir.file("pipe");
  std::string why;
  ASSERT_TRUE(testing::make_special(pipe, SpecialKind::kFifo, &why)) << why;
  // The reader stops early; the writer then sees EPIPE instead of dying of SIGPIPE.
  auto* old_handler = ::signal(SIGPIPE, SIG_IGN);
  std::thread writer([&] {
    const int fd = ::open(pipe.c_str(), O_WRONLY);
    const std::string chunk(1 << 16, 'b');
    for (int i = 0; i < 16 && ::write(fd, chunk.data(), chunk.size()) > 0; ++i) {
    }
    ::close(fd);
  });
  const std::string pmsg = error_of([&] { io::read_text_input(pipe, "-f", 1000); });
  writer.join();
  ::signal(SIGPIPE, old_handler);
  EXPECT_NE(pmsg.find("more than the limit of 1000 bytes"), std::string::npos) << pmsg;
}

TEST(InputFile, AnEndlessDeviceIsCutAtTheLimit) {
  TempDir dir;
  const std::string zero = dir.file("zero");  // (1, 5): /dev/zero's numbers
  std::string why;
  if (!testing::make_special(zero, SpecialKind::kZeroDevice, &why)) GTEST_SKIP() << why;
  const std::string msg = error_of([&] { io::read_text_input(zero, "-f", 1 << 20); });
  // On a file system mounted nodev the node cannot be opened: refused too, with the reason.
  EXPECT_TRUE(msg.find("more than the limit of 1048576 bytes") != std::string::npos ||
              msg.find("cannot open") != std::string::npos)
      << msg;
}

}  // namespace
}  // namespace kvevict
