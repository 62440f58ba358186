// .safetensors: a file written by the safetensors package reads back exactly; hand-built
// malformed headers each throw naming the file and the defect.
#include "kvevict/io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
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

// 8-byte length + header + data.
std::vector<uint8_t> build(const std::string& header, const std::vector<uint8_t>& data) {
  const uint64_t n = header.size();
  std::vector<uint8_t> out(8 + header.size() + data.size());
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  TempFile f("st_bad_" + std::to_string(std::hash<std::string>()(needle)));
  f.write(bytes);
  try {
    safetensors::File::open(f.path());
    ADD_FAILURE() << "no error for case '" << needle << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_NE(msg.find(f.path()), std::string::npos) << "message lacks the file: " << msg;
  }
}

TEST(Safetensors, ReadsWhatTheReferenceLibraryWrites) {
  auto f = safetensors::File::open(data_path("sample.safetensors"));
  EXPECT_EQ(f->tensors().size(), 5u);
  EXPECT_EQ(f->metadata().at("origin"), "kvevict-test");
  const HostTensor f32 = f->load("f32");
  EXPECT_EQ(f32.shape(), (std::vector<int64_t>{3, 7}));
  for (int i = 0; i < 21; ++i) EXPECT_EQ(f32.ptr<float>()[i], i * 0.5f - 2) << i;
  const HostTensor f16 = f->load("f16");
  EXPECT_EQ(f16.dtype(), DType::kF16);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(half_to_float(f16.ptr<uint16_t>()[i]), i - 2.0f) << i;
  const HostTensor i32 = f->load("i32");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(i32.ptr<int32_t>()[i], -3 * i) << i;
  const HostTensor i64 = f->load("i64");
  EXPECT_EQ(i64.shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(i64.ptr<int64_t>()[3], 3 * 1000000007LL);
  const HostTensor sc = f->load("scalar");
  EXPECT_TRUE(sc.shape().empty());
  EXPECT_EQ(sc.ptr<float>()[0], 1.25f);
  EXPECT_EQ(safetensors::load_tensor(data_path("sample.safetensors"), "i32").ptr<int32_t>()[1], -3);
  try {
    f->load("nope");
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor named 'nope'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, OnlyTensorConvenience) {
  const HostTensor t = safetensors::load_only_tensor(data_path("single.safetensors"));
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.ptr<float>()[5], 5.0f);
  try {
    safetensors::load_only_tensor(data_path("sample.safetensors"));
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds 5 tensors"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, Bf16AndHandBuiltFiles) {
  std::vector<uint8_t> data;
  for (float v : {1.0f, -0.5f, 3.0f}) {
    const uint16_t b = float_to_bf16(v);
    data.push_back(static_cast<uint8_t>(b & 0xFF));
    data.push_back(static_cast<uint8_t>(b >> 8));
  }
  TempFile f("st_bf16");
  f.write(build(R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]}})", data));
  const HostTensor t = safetensors::load_tensor(f.path(), "w");
  EXPECT_EQ(t.dtype(), DType::kBF16);
  EXPECT_EQ(bf16_to_float(t.ptr<uint16_t>()[1]), -0.5f);
}

TEST(Safetensors, MalformedFilesThrowNamingTheProblem) {
  const std::vector<uint8_t> d(16, 0);
  expect_error({1, 2, 3}, "expected at least the 8-byte header length");
  auto huge = build("{}", d);
  const uint64_t big = uint64_t{1} << 40;
  std::memcpy(huge.data(), &big, 8);
  expect_error(huge, "header length 1099511627776 exceeds");
  expect_error(build("{not json", d), "not valid JSON");
  expect_error(build("[1,2]", d), "expected an object");
  expect_error(build(R"({"a":{"dtype":"F32","shape":[2]}})", d),
               "lacks dtype, shape or data_offsets");
  expect_error(build(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", d), "dtype 'Q4'");
  expect_error(build(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", d),
               "needs 8 bytes but data_offsets span 12");
  expect_error(build(R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", d),
               "fall outside the 16-byte data section");
  expect_error(build(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", d),
               "fall outside");
  expect_error(build(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d),
               "expected a non-negative integer");
  expect_error(
      build(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", d),
      "overflows");
  expect_error(build(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                     d),
               "overlap");
  expect_error(build(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", d),
               "expected [begin, end]");
  expect_error(build(R"({"__metadata__":{"k":1}})", d), "__metadata__ value of 'k'");
  // Truncation anywhere in a valid file fails cleanly.
  std::ifstream in(data_path("sample.safetensors"), std::ios::binary);
  const std::vector<uint8_t> good{std::istreambuf_iterator<char>(in),
                                  std::istreambuf_iterator<char>()};
  for (size_t n = 0; n + 1 < good.size(); n += 7) {
    TempFile f("st_trunc");
    f.write({good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)});
    EXPECT_THROW(safetensors::File::open(f.path()), Error) << "prefix " << n;
  }
}

}  // namespace
}  // namespace kvevict
