// .npy: files written by NumPy (tools/golden/npy_golden.py) read back exactly; kvevict's writer
// round-trips every dtype and odd shapes and writes what NumPy writes byte for byte; malformed
// files throw naming the file; failed writes leave nothing behind.
#include "kvevict/io/npy.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "io/gguf_writer.h"
#include "kvevict/dtype.h"
#include "kvevict/error.h"

namespace kvevict {
namespace {

using testing::TempFile;

std::string data_path(const std::string& name) {
  return std::string(KVEVICT_SOURCE_DIR) + "/tests/io/data/" + name;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle, bool bf16 = false) {
  TempFile f("npy_bad_" + std::to_string(std::hash<std::string>()(needle)));
  f.write(bytes);
  try {
    npy::load(f.path(), bf16);
    ADD_FAILURE() << "no error for case '" << needle << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_NE(msg.find(f.path()), std::string::npos) << "message lacks the file: " << msg;
  }
}

TEST(Npy, ReadsWhatNumPyWrites) {
  const HostTensor f4 = npy::load(data_path("f4_v1.npy"));
  EXPECT_EQ(f4.dtype(), DType::kF32);
  EXPECT_EQ(f4.shape(), (std::vector<int64_t>{2, 3, 5}));
  for (int i = 0; i < 30; ++i) EXPECT_EQ(f4.ptr<float>()[i], i * 0.5f - 3) << i;
  const HostTensor f8 = npy::load(data_path("f8_v2.npy"));
  EXPECT_EQ(f8.dtype(), DType::kF64);
  for (int i = 0; i < 30; ++i) EXPECT_EQ(f8.ptr<double>()[i], i * 0.25) << i;
  const HostTensor f2 = npy::load(data_path("f2_v3.npy"));
  EXPECT_EQ(f2.dtype(), DType::kF16);
  for (int i = 0; i < 30; ++i) EXPECT_EQ(half_to_float(f2.ptr<uint16_t>()[i]), i - 7.0f) << i;
  const HostTensor i8 = npy::load(data_path("i8_v1.npy"));
  for (int i = 0; i < 30; ++i) EXPECT_EQ(i8.ptr<int64_t>()[i], i * -1000003LL) << i;
  const HostTensor i4 = npy::load(data_path("i4_v1.npy"));
  EXPECT_EQ(i4.shape(), std::vector<int64_t>{7});
  for (int i = 0; i < 7; ++i) EXPECT_EQ(i4.ptr<int32_t>()[i], i - 3) << i;
  const HostTensor u1 = npy::load(data_path("u1_v1.npy"));
  EXPECT_EQ(u1.dtype(), DType::kU8);
  EXPECT_EQ(u1.ptr<uint8_t>()[5], 255);
  const HostTensor sc = npy::load(data_path("scalar_v1.npy"));
  EXPECT_TRUE(sc.shape().empty());
  EXPECT_EQ(sc.ptr<float>()[0], 2.5f);
  const HostTensor bf = npy::load(data_path("bf16_as_u2_v1.npy"), /*bf16=*/true);
  EXPECT_EQ(bf.dtype(), DType::kBF16);
  EXPECT_EQ(bf16_to_float(bf.ptr<uint16_t>()[1]), -2.0f);
}

TEST(Npy, RejectsWhatItCannotRepresent) {
  for (const auto& [file, needle] : std::vector<std::pair<std::string, std::string>>{
           {"fortran_v1.npy", "fortran_order is True"},
           {"big_endian_v1.npy", "dtype '>f4' is not supported"},
           {"bf16_as_u2_v1.npy", "read only as bfloat16 bits"}}) {
    try {
      npy::load(data_path(file));
      ADD_FAILURE() << file << " loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    }
  }
}

TEST(Npy, WriterMatchesNumPyBytes) {
  const HostTensor f4 = npy::load(data_path("f4_v1.npy"));
  TempFile f("npy_same");
  npy::save(f.path(), f4);
  EXPECT_EQ(read_bytes(f.path()), read_bytes(data_path("f4_v1.npy")));
  const HostTensor sc = npy::load(data_path("scalar_v1.npy"));
  npy::save(f.path(), sc);
  EXPECT_EQ(read_bytes(f.path()), read_bytes(data_path("scalar_v1.npy")));
  const HostTensor i4 = npy::load(data_path("i4_v1.npy"));
  npy::save(f.path(), i4.view());
  EXPECT_EQ(read_bytes(f.path()), read_bytes(data_path("i4_v1.npy")));
}

TEST(Npy, RoundTripsEveryDtypeAndOddShapes) {
  const std::vector<std::vector<int64_t>> shapes = {{},        {1},    {7},
                                                    {3, 1, 7}, {0, 5}, {2, 3, 4, 5, 1}};
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI32, DType::kI64,
                   DType::kU8}) {
    for (const auto& shape : shapes) {
      HostTensor t(dt, shape);
      auto* b = static_cast<uint8_t*>(t.data());
      for (size_t i = 0; i < t.nbytes(); ++i) b[i] = static_cast<uint8_t>(i * 37 + 11);
      TempFile f("npy_rt");
      npy::save(f.path(), t);
      const HostTensor r = npy::load(f.path(), dt == DType::kBF16);
      EXPECT_EQ(r.dtype(), dt) << dtype_name(dt);
      EXPECT_EQ(r.shape(), shape) << dtype_name(dt);
      ASSERT_EQ(r.nbytes(), t.nbytes());
      if (t.nbytes() > 0)  // memcmp's pointers must be non-null even for 0 bytes
        EXPECT_EQ(std::memcmp(r.data(), t.data(), t.nbytes()), 0) << dtype_name(dt);
      EXPECT_FALSE(exists(f.path() + ".tmp." + std::to_string(::getpid())));
    }
  }
}

TEST(Npy, ManyDimensionsRoundTrip) {
  std::vector<int64_t> shape(30, 1);  // a long header (v2 is only needed past 64 KiB)
  shape[0] = 3;
  HostTensor t(DType::kF32, shape);
  for (int i = 0; i < 3; ++i) t.ptr<float>()[i] = static_cast<float>(i);
  TempFile f("npy_long");
  npy::save(f.path(), t);
  const HostTensor r = npy::load(f.path());
  EXPECT_EQ(r.shape(), shape);
  EXPECT_EQ(r.ptr<float>()[2], 2.0f);
}

TEST(Npy, MalformedFilesThrowNamingTheProblem) {
  const auto good = read_bytes(data_path("f4_v1.npy"));
  auto bad = good;
  bad[1] = 'X';
  expect_error(bad, "bad magic");
  bad = good;
  bad[6] = 9;
  expect_error(bad, "format version 9");
  expect_error({good.begin(), good.begin() + 5}, "expected at least the 10-byte");
  expect_error({good.begin(), good.begin() + 60}, "exceeds");  // header cut
  expect_error({good.begin(), good.end() - 4}, "need 120 data bytes but the file has 116");
  bad = good;
  bad.push_back(0);
  expect_error(bad, "need 120 data bytes but the file has 121");

  // Hand-made headers with one defect each (padded to keep the data offset).
  auto with_header = [&](std::string dict) {
    std::vector<uint8_t> out(good.begin(), good.begin() + 10);
    dict.resize(117, ' ');
    dict.push_back('\n');
    out.insert(out.end(), dict.begin(), dict.end());
    out.insert(out.end(), good.begin() + 128, good.end());
    return out;
  };
  EXPECT_NO_THROW({
    TempFile f("npy_hand");
    f.write(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 5), }"));
    npy::load(f.path());
  });
  expect_error(with_header("{'descr': '<f4', 'fortran_order': False}"), "missing one of the keys");
  expect_error(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 5), 'x': 1}"),
               "unexpected key 'x'");
  expect_error(with_header("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3, 5), }"),
               "expected True or False");
  expect_error(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3, 5), }"),
               "expected a non-negative integer");
  expect_error(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }"),
               "expected ',' or ')'");
  expect_error(with_header("{'descr: '<f4', 'fortran_order': False, 'shape': (2, 3, 5), }"),
               "malformed header");
  expect_error(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }"),
               "need 96 data bytes but the file has 120");
  expect_error(with_header("{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (99999999999, 99999999999, 9999999), }"),
               "overflows");
  std::vector<uint8_t> no_newline = good;
  no_newline[127] = ' ';
  expect_error(no_newline, "does not end with a newline");
}

TEST(Npy, FailedWriteLeavesNothingBehind) {
  // The target is a directory: the final rename fails, and the temporary file must be gone.
  const std::string dir =
      std::string(::testing::TempDir()) + "/npy_dir_target." + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  HostTensor t(DType::kF32, {4});
  EXPECT_THROW(npy::save(dir, t), Error);
  EXPECT_FALSE(exists(dir + ".tmp." + std::to_string(::getpid())));
  ::rmdir(dir.c_str());
  EXPECT_THROW(npy::save("/nonexistent-dir-kvevict/x.npy", t), Error);
  // An existing file is replaced only by a complete write.
  TempFile f("npy_keep");
  HostTensor a(DType::kI32, {3});
  for (int i = 0; i < 3; ++i) a.ptr<int32_t>()[i] = 10 + i;
  npy::save(f.path(), a);
  EXPECT_EQ(npy::load(f.path()).ptr<int32_t>()[2], 12);
}

}  // namespace
}  // namespace kvevict
