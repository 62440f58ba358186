// GGUF container parsing: valid files round-trip their metadata and tensors; every kind of
// corruption throws kvevict::Error with a message naming the problem (never crashes or allocates
// what the header claims).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "io/gguf_writer.h"
#include "kvevict/dtype.h"
#include "kvevict/error.h"
#include "kvevict/io/gguf.h"

namespace kvevict {
namespace {

using testing::GgufWriter;
using testing::TempFile;

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A valid file with metadata of every value type and three tensors of odd shapes.
GgufWriter sample_writer() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 3);
  w.add_i32("neg", -7);
  w.add_u8("u8", 200);
  w.add_i8("i8", -100);
  w.add_u16("u16", 60000);
  w.add_i16("i16", -30000);
  w.add_u64("u64", uint64_t{1} << 50);
  w.add_i64("i64", -(int64_t{1} << 50));
  w.add_f32("f32", 0.25f);
  w.add_f64("f64", -1.5e300);
  w.add_bool("flag", true);
  w.add_string_array("tokens", {"a", "", "\xe2\x96\x81hello"});
  w.add_f32_array("scores", {1.0f, -2.5f, 3.0f});
  w.add_i32_array("types", {1, 3, 6});
  std::vector<float> t0(3 * 5);
  for (size_t i = 0; i < t0.size(); ++i) t0[i] = 0.5f * static_cast<float>(i) - 3.0f;
  w.add_tensor("t0", {5, 3}, 0, f32_bytes(t0));  // F32, rows of 5
  std::vector<uint8_t> t1;
  for (int i = 0; i < 7; ++i) GgufWriter::put<uint16_t>(t1, float_to_half(0.125f * i));
  w.add_tensor("t1", {7}, 1, t1);  // F16
  // One Q8_0 block: d = 0.5, q = -16..15.
  std::vector<uint8_t> t2;
  GgufWriter::put<uint16_t>(t2, float_to_half(0.5f));
  for (int i = 0; i < 32; ++i) t2.push_back(static_cast<uint8_t>(static_cast<int8_t>(i - 16)));
  w.add_tensor("t2", {32, 1}, 8, t2);
  return w;
}

std::unique_ptr<gguf::File> open_bytes(const std::vector<uint8_t>& bytes, const TempFile& f) {
  f.write(bytes);
  return gguf::File::open(f.path());
}

// Expects opening `bytes` to throw an Error whose message contains every one of `needles`.
void expect_error(const std::vector<uint8_t>& bytes, std::vector<std::string> needles,
                  const std::string& what) {
  TempFile f("gguf_bad_" + std::to_string(std::hash<std::string>()(what)));
  f.write(bytes);
  try {
    gguf::File::open(f.path());
    ADD_FAILURE() << what << ": opened without error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << what << ": message lacks '" << n << "': " << msg;
    EXPECT_NE(msg.find(f.path()), std::string::npos) << what << ": message lacks the path: " << msg;
  }
}

TEST(GgufFile, RoundTripsMetadataOfEveryType) {
  TempFile f("gguf_meta");
  auto g = open_bytes(sample_writer().build(), f);
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(g->get_string("general.architecture", ""), "llama");
  EXPECT_EQ(g->get_int("llama.block_count", 0), 3);
  EXPECT_EQ(g->get_int("neg", 0), -7);
  EXPECT_EQ(g->get_int("u8", 0), 200);
  EXPECT_EQ(g->get_int("i8", 0), -100);
  EXPECT_EQ(g->get_int("u16", 0), 60000);
  EXPECT_EQ(g->get_int("i16", 0), -30000);
  EXPECT_EQ(g->get_int("u64", 0), int64_t{1} << 50);
  EXPECT_EQ(g->get_int("i64", 0), -(int64_t{1} << 50));
  EXPECT_EQ(g->get_float("f32", 0), 0.25);
  EXPECT_EQ(g->get_float("f64", 0), -1.5e300);
  EXPECT_TRUE(g->get("flag").as_bool("flag"));
  EXPECT_EQ(g->get_int("absent", 42), 42);
  const auto& toks = g->get("tokens").as_array("tokens");
  ASSERT_EQ(toks.size(), 3u);
  EXPECT_EQ(toks[1].as_string("tokens"), "");
  EXPECT_EQ(toks[2].as_string("tokens"), "\xe2\x96\x81hello");
  EXPECT_EQ(g->get("scores").as_array("scores")[1].as_float("scores"), -2.5);
  EXPECT_EQ(g->get("types").as_array("types")[2].as_int("types"), 6);
}

TEST(GgufFile, TypeMismatchAndMissingKeyNameTheKey) {
  TempFile f("gguf_types");
  auto g = open_bytes(sample_writer().build(), f);
  try {
    g->get("general.architecture").as_int("general.architecture");
    ADD_FAILURE() << "string read as int";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("general.architecture is a string"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(g->get("nope"), Error);
  EXPECT_THROW(g->tensor("nope"), Error);
  EXPECT_EQ(g->find("nope"), nullptr);
}

TEST(GgufFile, TensorsHaveRowMajorShapesAndData) {
  for (uint32_t version : {2u, 3u}) {
    TempFile f("gguf_tensors");
    auto g = open_bytes(sample_writer().build(version), f);
    ASSERT_EQ(g->tensors().size(), 3u);
    const auto& t0 = g->tensor("t0");
    EXPECT_EQ(t0.shape, (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(t0.type, gguf::GgmlType::kF32);
    EXPECT_EQ(t0.nbytes, 60u);
    EXPECT_EQ(t0.rows(), 3);
    HostTensor d0 = gguf::dequantize(t0);
    for (int i = 0; i < 15; ++i) EXPECT_EQ(d0.ptr<float>()[i], 0.5f * i - 3.0f) << i;
    HostTensor d1 = gguf::dequantize(g->tensor("t1"));
    EXPECT_EQ(d1.shape(), (std::vector<int64_t>{7}));
    for (int i = 0; i < 7; ++i) EXPECT_EQ(d1.ptr<float>()[i], 0.125f * i) << i;
    HostTensor d2 = gguf::dequantize(g->tensor("t2"));
    EXPECT_EQ(d2.shape(), (std::vector<int64_t>{1, 32}));
    for (int i = 0; i < 32; ++i) EXPECT_EQ(d2.ptr<float>()[i], 0.5f * (i - 16)) << i;
    for (const auto& t : g->tensors()) EXPECT_EQ(t.offset % g->alignment(), 0u) << t.name;
  }
}

TEST(GgufFile, HonoursGeneralAlignment) {
  GgufWriter w = sample_writer();
  w.add_u32("general.alignment", 64);
  TempFile f("gguf_align");
  auto g = open_bytes(w.build(3, 64), f);
  EXPECT_EQ(g->alignment(), 64u);
  EXPECT_EQ(g->data_offset() % 64, 0u);
  EXPECT_EQ(gguf::dequantize(g->tensor("t2")).ptr<float>()[31], 0.5f * 15);

  GgufWriter bad = sample_writer();
  bad.add_u32("general.alignment", 48);
  expect_error(bad.build(3, 48), {"general.alignment = 48", "power of two"}, "alignment 48");
}

TEST(GgufFile, RejectsBadHeaders) {
  GgufWriter::Layout l;
  const auto good = sample_writer().build(3, 32, &l);
  auto bad = good;
  bad[0] = 'X';
  expect_error(bad, {"bad magic"}, "magic");
  bad = good;
  GgufWriter::patch<uint32_t>(bad, 4, 1);
  expect_error(bad, {"version 1", "expected 2 or 3"}, "version 1");
  GgufWriter::patch<uint32_t>(bad, 4, 4);
  expect_error(bad, {"version 4"}, "version 4");
  bad = good;
  GgufWriter::patch<uint64_t>(bad, l.tensor_count_at, uint64_t{1} << 60);
  expect_error(bad, {"tensor count 1152921504606846976"}, "huge tensor count");
  bad = good;
  GgufWriter::patch<uint64_t>(bad, l.kv_count_at, uint64_t{1} << 60);
  expect_error(bad, {"metadata count 1152921504606846976"}, "huge kv count");
  expect_error({'G', 'G', 'U', 'F'}, {"expected at least the 24-byte GGUF header"}, "tiny");
  expect_error({}, {"0 bytes"}, "empty");
}

TEST(GgufFile, EveryTruncationThrows) {
  const auto good = sample_writer().build();
  // Cutting anywhere loses either header bytes or tensor data: each prefix must fail cleanly.
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    TempFile f("gguf_trunc");
    f.write(cut);
    EXPECT_THROW(gguf::File::open(f.path()), Error) << "prefix of " << n << " bytes";
  }
}

TEST(GgufFile, RejectsHugeStringsAndArrays) {
  GgufWriter w;
  std::vector<uint8_t> v;
  GgufWriter::put<uint64_t>(v, uint64_t{1} << 40);
  v.insert(v.end(), 16, 'a');
  w.add_raw("huge.string", GgufWriter::kString, v);
  expect_error(w.build(), {"string value length 1099511627776"}, "huge string");

  GgufWriter a;
  v.clear();
  GgufWriter::put<uint32_t>(v, GgufWriter::kU32);
  GgufWriter::put<uint64_t>(v, uint64_t{1} << 40);
  a.add_raw("huge.array", GgufWriter::kArray, v);
  expect_error(a.build(), {"huge.array", "1099511627776 array elements"}, "huge array");

  GgufWriter s;  // an array of strings whose element count exceeds the bytes / 8
  v.clear();
  GgufWriter::put<uint32_t>(v, GgufWriter::kString);
  GgufWriter::put<uint64_t>(v, 1000);
  s.add_raw("strs", GgufWriter::kArray, v);
  expect_error(s.build(), {"strs", "1000 array elements"}, "string array");
}

TEST(GgufFile, NestedArraysParseAndDepthIsBounded) {
  GgufWriter w;
  std::vector<uint8_t> v;  // [[1, 2], [3]] as arrays of u8
  GgufWriter::put<uint32_t>(v, GgufWriter::kArray);
  GgufWriter::put<uint64_t>(v, 2);
  for (std::vector<uint8_t> inner : {std::vector<uint8_t>{1, 2}, std::vector<uint8_t>{3}}) {
    GgufWriter::put<uint32_t>(v, GgufWriter::kU8);
    GgufWriter::put<uint64_t>(v, inner.size());
    v.insert(v.end(), inner.begin(), inner.end());
  }
  w.add_raw("nested", GgufWriter::kArray, v);
  TempFile f("gguf_nested");
  auto g = open_bytes(w.build(), f);
  const auto& outer = g->get("nested").as_array("nested");
  ASSERT_EQ(outer.size(), 2u);
  EXPECT_EQ(outer[0].as_array("nested")[1].as_int("nested"), 2);
  EXPECT_EQ(outer[1].as_array("nested")[0].as_int("nested"), 3);

  GgufWriter deep;
  v.clear();
  for (int i = 0; i < 20; ++i) {
    GgufWriter::put<uint32_t>(v, GgufWriter::kArray);
    GgufWriter::put<uint64_t>(v, 1);
  }
  GgufWriter::put<uint32_t>(v, GgufWriter::kU8);
  GgufWriter::put<uint64_t>(v, 0);
  deep.add_raw("deep", GgufWriter::kArray, v);
  expect_error(deep.build(), {"deep", "nests arrays deeper"}, "deep nesting");
}

TEST(GgufFile, RejectsBadValueTypesAndDuplicates) {
  GgufWriter w;
  w.add_raw("weird", 13, {0, 0, 0, 0});
  expect_error(w.build(), {"weird", "value type 13"}, "value type");
  GgufWriter b;
  b.add_raw("flag", GgufWriter::kBool, {2});
  expect_error(b.build(), {"flag", "bool byte 2"}, "bool");
  GgufWriter d;
  d.add_u32("k", 1);
  d.add_u32("k", 2);
  expect_error(d.build(), {"duplicate metadata key 'k'"}, "dup key");
  GgufWriter t;
  t.add_tensor("x", {4}, 0, std::vector<uint8_t>(16));
  t.add_tensor("x", {4}, 0, std::vector<uint8_t>(16));
  expect_error(t.build(), {"duplicate tensor name 'x'"}, "dup tensor");
}

TEST(GgufFile, RejectsBadTensorInfos) {
  {
    GgufWriter w;
    w.add_tensor("q2k", {256}, 10, std::vector<uint8_t>(84));
    expect_error(w.build(), {"'q2k'", "type 10", "Q2_K"}, "unsupported type");
  }
  {
    GgufWriter w;
    w.add_tensor("five", {1, 1, 1, 1, 1}, 0, std::vector<uint8_t>(4));
    expect_error(w.build(), {"'five'", "5 dims"}, "n_dims");
  }
  {
    GgufWriter w;  // 2^40 * 2^40 elements overflow int64
    w.add_tensor("big", {uint64_t{1} << 40, uint64_t{1} << 40}, 0, std::vector<uint8_t>(4));
    expect_error(w.build(), {"'big'", "overflows"}, "dim product");
  }
  {
    GgufWriter w;
    w.add_tensor("zero", {0}, 0, {});
    expect_error(w.build(), {"'zero'", "dim 0 = 0"}, "zero dim");
  }
  {
    GgufWriter w;
    w.add_tensor("q8", {20}, 8, std::vector<uint8_t>(34));
    expect_error(w.build(), {"'q8'", "row length 20", "block size 32"}, "partial block");
  }
  {
    GgufWriter w;  // declares more bytes than the file holds
    w.add_tensor("short", {1000}, 0, std::vector<uint8_t>(16));
    expect_error(w.build(), {"'short'", "outside"}, "short data");
  }
  {
    GgufWriter w;
    GgufWriter::Layout l;
    w.add_tensor("a", {8}, 0, std::vector<uint8_t>(32));
    auto bytes = w.build(3, 32, &l);
    GgufWriter::patch<uint64_t>(bytes, l.tensor_offset_at[0], uint64_t{1} << 62);
    expect_error(bytes, {"'a'", "outside"}, "offset out of range");
    GgufWriter::patch<uint64_t>(bytes, l.tensor_offset_at[0], 8);
    expect_error(bytes, {"'a'", "offset 8", "alignment 32"}, "misaligned offset");
    GgufWriter::patch<uint64_t>(bytes, l.tensor_offset_at[0], ~uint64_t{0} - 31);
    expect_error(bytes, {"'a'", "outside"}, "offset near 2^64");
  }
}

// Issue 13: a tensor whose data overlapped another's loaded and printed garbage.
TEST(GgufFile, RejectsTensorsWhoseDataOverlapNamingBoth) {
  GgufWriter w;
  GgufWriter::Layout l;
  w.add_tensor("first", {16}, 0, std::vector<uint8_t>(64));
  w.add_tensor("second", {16}, 0, std::vector<uint8_t>(64));
  w.add_tensor("third", {8}, 0, std::vector<uint8_t>(32));
  auto bytes = w.build(3, 32, &l);
  EXPECT_NO_THROW({
    TempFile f("gguf_disjoint");
    open_bytes(bytes, f);
  });
  GgufWriter::patch<uint64_t>(bytes, l.tensor_offset_at[2], 0);  // third onto first
  expect_error(bytes, {"'first' [0, 64)", "'third' [0, 32)", "overlap"}, "same offset");
  GgufWriter::patch<uint64_t>(bytes, l.tensor_offset_at[2], 128);
  GgufWriter::patch<uint64_t>(bytes, l.tensor_offset_at[1], 32);  // second starts inside first
  expect_error(bytes, {"'first' [0, 64)", "'second' [32, 96)", "overlap"}, "partial overlap");
}

TEST(GgufFile, RandomCorruptionThrowsOrParses) {
  // Flipping bytes of the header region must either still parse or throw kvevict::Error; under
  // the asan preset this also checks that no read leaves the mapping.
  GgufWriter::Layout l;
  const auto good = sample_writer().build(3, 32, &l);
  std::mt19937 rng(7);
  int errors = 0;
  for (int trial = 0; trial < 300; ++trial) {
    auto bad = good;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) bad[rng() % l.data_at] ^= static_cast<uint8_t>(1 + rng() % 255);
    TempFile f("gguf_fuzz");
    f.write(bad);
    try {
      auto g = gguf::File::open(f.path());
      for (const auto& t : g->tensors()) (void)gguf::dequantize(t);
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 100) << "most random corruptions of the header should be detected";
}

}  // namespace
}  // namespace kvevict
