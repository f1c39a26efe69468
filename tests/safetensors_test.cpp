#include "framework/io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/io/json.h"
#include "tests/test_util.h"

namespace strata {
namespace {

std::vector<uint8_t> bytes_of(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

// A safetensors file: 8-byte little-endian header length, header, data.
std::vector<uint8_t> make_file(const std::string& header, const std::string& data = "") {
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// The message of the IoError that opening `bytes` must raise.
std::string open_error(const std::vector<uint8_t>& bytes) {
  try {
    SafetensorsReader::from_buffer(bytes, "t.safetensors");
  } catch (const IoError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("t.safetensors: ", 0), 0u) << msg;
    return msg;
  }
  ADD_FAILURE() << "file was accepted";
  return "";
}

std::string open_error(const std::string& header, const std::string& data = "") {
  return open_error(make_file(header, data));
}

class SafetensorsFileTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"strata_st"};
  std::string dir_ = tmp_.path();
};

// ---------------------------------------------------------------- round trips

TEST_F(SafetensorsFileTest, RoundTripAllDtypesAndShapes) {
  const std::vector<float> w = {1.f, -2.f, 3.5f, 0.f, 1e-8f, -7.25f};
  const std::vector<int32_t> idx = {-1, 0, 2147483647};
  const std::vector<uint8_t> bytes = {0, 1, 255};
  const std::vector<uint16_t> half = {float_to_f16(1.5f), float_to_f16(-2.f)};
  const std::vector<uint16_t> brain = {float_to_bf16(3.f)};
  const float scalar = 42.f;
  const std::string p = dir_ + "/m.safetensors";
  write_safetensors(p,
                    {{"conv1.weight", DType::kF32, {2, 3}, w.data()},
                     {"idx", DType::kI32, {3}, idx.data()},
                     {"mask", DType::kU8, {1, 3}, bytes.data()},
                     {"empty", DType::kF32, {0, 5}, nullptr},
                     {"h", DType::kF16, {2}, half.data()},
                     {"b", DType::kBF16, {1, 1, 1}, brain.data()},
                     {"scalar", DType::kF32, {}, &scalar}},
                    {{"format", "pt"}, {"note", "quote \" and é"}});
  SafetensorsReader r(p);
  EXPECT_EQ(r.path(), p);
  ASSERT_EQ(r.tensors().size(), 7u);
  const std::vector<std::string> order = {"conv1.weight", "idx", "mask", "empty", "h", "b",
                                          "scalar"};
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(r.tensors()[i].name, order[i]);

  const TensorView* t = r.find("conv1.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::kF32);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(t->nbytes, 24u);
  std::vector<float> got(6);
  std::memcpy(got.data(), t->data, 24);
  EXPECT_EQ(got, w);
  EXPECT_EQ(std::memcmp(r.find("idx")->data, idx.data(), 12), 0);
  EXPECT_EQ(std::memcmp(r.find("mask")->data, bytes.data(), 3), 0);
  EXPECT_EQ(r.find("empty")->nbytes, 0u);
  EXPECT_EQ(r.find("empty")->shape, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(r.find("h")->dtype, DType::kF16);
  EXPECT_EQ(std::memcmp(r.find("h")->data, half.data(), 4), 0);
  EXPECT_EQ(r.find("b")->dtype, DType::kBF16);
  EXPECT_TRUE(r.find("scalar")->shape.empty());
  EXPECT_EQ(r.find("scalar")->nbytes, 4u);
  EXPECT_EQ(r.find("missing"), nullptr);
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_EQ(r.metadata().at("note"), "quote \" and é");

  // The header is padded so the data buffer starts 8-byte aligned.
  const std::string raw = read_file_bytes(p);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + n + 24 + 12 + 3 + 0 + 4 + 2 + 4);
}

TEST_F(SafetensorsFileTest, OverwritesAtomicallyAndEmptyFileWorks) {
  const std::string p = dir_ + "/e.safetensors";
  const float x = 1.f;
  write_safetensors(p, {{"x", DType::kF32, {1}, &x}}, {});
  write_safetensors(p, {}, {});
  SafetensorsReader r(p);
  EXPECT_TRUE(r.tensors().empty());
  EXPECT_TRUE(r.metadata().empty());
  EXPECT_EQ(read_file_bytes(p), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
}

TEST_F(SafetensorsFileTest, ReaderIsMovableAndViewsStayValid) {
  const std::string p = dir_ + "/mv.safetensors";
  const std::vector<int32_t> v = {5, 6, 7, 8};
  write_safetensors(p, {{"v", DType::kI32, {4}, v.data()}}, {});
  SafetensorsReader a(p);
  const uint8_t* data = a.find("v")->data;
  SafetensorsReader b(std::move(a));
  EXPECT_EQ(b.find("v")->data, data);
  SafetensorsReader c = SafetensorsReader::from_buffer(make_file("{}"), "other");
  c = std::move(b);
  EXPECT_EQ(std::memcmp(c.find("v")->data, v.data(), 16), 0);
  EXPECT_EQ(c.path(), p);
}

TEST_F(SafetensorsFileTest, MissingFileAndDirectory) {
  const std::string p = dir_ + "/nope.safetensors";
  try {
    SafetensorsReader r(p);
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_CONTAINS(e.what(), p);
    EXPECT_CONTAINS(e.what(), "No such file or directory");
  }
  EXPECT_THROW(SafetensorsReader r(dir_), IoError);
}

TEST_F(SafetensorsFileTest, ShortFileOnDiskIsReported) {
  const std::string p = dir_ + "/short.safetensors";
  write_file_atomically(p, [](std::FILE* f) { fwrite_checked(f, "abc", 3); });
  try {
    SafetensorsReader r(p);
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_CONTAINS(e.what(), p + ": file is too short");
  }
}

// Byte-for-byte what the reference implementation (serde_json, compact, then
// space padding to a multiple of 8) writes for these tensors.
TEST_F(SafetensorsFileTest, MatchesReferenceBytes) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";
  ASSERT_EQ(header.size(), 107u);
  std::string expected("\x70\0\0\0\0\0\0\0", 8);  // 107 + 5 spaces = 112 = 0x70
  expected += header + "     ";
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);  // 1.0f, 2.0f
  expected += std::string("\x01\x02\x03", 3);

  const float a[2] = {1.f, 2.f};
  const uint8_t b[3] = {1, 2, 3};
  const std::string p = dir_ + "/ref.safetensors";
  write_safetensors(p, {{"a", DType::kF32, {2}, a}, {"b", DType::kU8, {3}, b}}, {});
  EXPECT_EQ(read_file_bytes(p), expected);

  const SafetensorsReader r = SafetensorsReader::from_buffer(bytes_of(expected), "ref");
  ASSERT_EQ(r.tensors().size(), 2u);
  float got[2];
  std::memcpy(got, r.find("a")->data, 8);
  EXPECT_EQ(got[1], 2.f);
}

TEST_F(SafetensorsFileTest, MatchesReferenceBytesWithMetadata) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F16","shape":[1,2],"data_offsets":[0,4]}})";
  std::string expected("\x58\0\0\0\0\0\0\0", 8);                  // 87 + 1 space = 88
  expected += header + " " + std::string("\x00\x3c\x00\xc0", 4);  // f16 1.0, -2.0
  const uint16_t w[2] = {float_to_f16(1.f), float_to_f16(-2.f)};
  const std::string p = dir_ + "/meta.safetensors";
  write_safetensors(p, {{"w", DType::kF16, {1, 2}, w}}, {{"format", "pt"}});
  EXPECT_EQ(read_file_bytes(p), expected);
}

TEST(SafetensorsTest, UnpaddedHeaderAndUnalignedDataAreReadable) {
  const std::string header = R"({"x":{"dtype":"I32","data_offsets":[0,4],"shape":[1]}})";
  const SafetensorsReader r =
      SafetensorsReader::from_buffer(make_file(header, std::string("\x2a\0\0\0", 4)), "u");
  int32_t v;
  std::memcpy(&v, r.find("x")->data, 4);
  EXPECT_EQ(v, 42);
}

TEST(SafetensorsTest, TensorsSortedByOffsetNotHeaderOrder) {
  const std::string header = R"({"late":{"dtype":"U8","shape":[2],"data_offsets":[1,3]},)"
                             R"("z0":{"dtype":"U8","shape":[0],"data_offsets":[3,3]},)"
                             R"("early":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  const SafetensorsReader r = SafetensorsReader::from_buffer(make_file(header, "abc"), "s");
  ASSERT_EQ(r.tensors().size(), 3u);
  EXPECT_EQ(r.tensors()[0].name, "early");
  EXPECT_EQ(r.tensors()[1].name, "late");
  EXPECT_EQ(r.tensors()[2].name, "z0");
  EXPECT_EQ(r.find("late")->data[0], 'b');
}

TEST(SafetensorsTest, WriterRejectsBadArguments) {
  const float x = 0;
  EXPECT_THROW(write_safetensors("/tmp/unused.safetensors",
                                 {{"a", DType::kF32, {1}, &x}, {"a", DType::kF32, {1}, &x}}, {}),
               IoError);
  EXPECT_THROW(
      write_safetensors("/tmp/unused.safetensors", {{"__metadata__", DType::kF32, {1}, &x}}, {}),
      IoError);
  EXPECT_THROW(write_safetensors("/tmp/unused.safetensors", {{"n", DType::kF32, {-1}, &x}}, {}),
               IoError);
  EXPECT_THROW(write_safetensors("/tmp/unused.safetensors", {{"n", DType::kF32, {2}, nullptr}}, {}),
               IoError);
  EXPECT_THROW(
      write_safetensors("/tmp/unused.safetensors", {{"bad\xff", DType::kF32, {1}, &x}}, {}),
      IoError);
  EXPECT_FALSE(file_exists("/tmp/unused.safetensors"));
}

// ---------------------------------------------------------------- validation

const std::string kF32x2 = std::string(8, '\0');

TEST(SafetensorsValidation, FileShorterThan8Bytes) {
  EXPECT_CONTAINS(open_error(std::vector<uint8_t>{1, 2, 3}), "file is too short");
  EXPECT_CONTAINS(open_error(std::vector<uint8_t>{}), "(0 bytes");
}

TEST(SafetensorsValidation, HeaderLengthOverLimit) {
  std::vector<uint8_t> f = make_file("{}");
  f[0] = 0x01, f[1] = 0xe1, f[2] = 0xf5, f[3] = 0x05;  // 100000001
  EXPECT_CONTAINS(open_error(f), "header length 100000001 exceeds the format's limit of 100000000");
  std::fill(f.begin(), f.begin() + 8, 0xff);
  EXPECT_CONTAINS(open_error(f), "exceeds the format's limit");
}

TEST(SafetensorsValidation, HeaderLengthBeyondFileEnd) {
  std::vector<uint8_t> f = make_file("{}");
  f[0] = 40;
  EXPECT_CONTAINS(open_error(f), "header length 40 goes beyond the end of the file (10 bytes");
}

TEST(SafetensorsValidation, HeaderMustStartWithBrace) {
  EXPECT_CONTAINS(open_error(" {}"), "header does not start with '{'");
  EXPECT_CONTAINS(open_error(""), "header does not start with '{'");
  EXPECT_CONTAINS(open_error("[1]"), "header does not start with '{'");
}

TEST(SafetensorsValidation, HeaderNotUtf8) {
  EXPECT_CONTAINS(open_error("{\"a\xff\":1}"), "header is not valid UTF-8 (at header byte 3)");
  EXPECT_CONTAINS(open_error("{\"\xc0\x80\":1}"), "not valid UTF-8");  // overlong NUL
}

TEST(SafetensorsValidation, HeaderNotJson) {
  const std::string msg = open_error(R"({"a":{"dtype":"F32",}})");
  EXPECT_CONTAINS(msg, "header is not valid JSON");
  EXPECT_CONTAINS(msg, "line 1, column 21: expected a string key");
  EXPECT_CONTAINS(open_error("{} {}"), "unexpected text after the JSON value");
  EXPECT_CONTAINS(open_error("{"), "not valid JSON");
}

TEST(SafetensorsValidation, EntryNotAnObject) {
  EXPECT_CONTAINS(
      open_error(R"({"x":[1,2]})"),
      "tensor 'x': entry must be an object with dtype, shape and data_offsets, found a array");
}

TEST(SafetensorsValidation, MissingFields) {
  EXPECT_CONTAINS(open_error(R"({"x":{"shape":[2],"data_offsets":[0,8]}})", kF32x2),
                  "tensor 'x' has no \"dtype\"");
  EXPECT_CONTAINS(open_error(R"({"x":{"dtype":"F32","data_offsets":[0,8]}})", kF32x2),
                  "tensor 'x' has no \"shape\"");
  EXPECT_CONTAINS(open_error(R"({"x":{"dtype":"F32","shape":[2]}})", kF32x2),
                  "tensor 'x' has no \"data_offsets\"");
}

TEST(SafetensorsValidation, WrongFieldTypes) {
  EXPECT_CONTAINS(open_error(R"({"x":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", kF32x2),
                  "tensor 'x': \"dtype\" must be a string, found a number");
  EXPECT_CONTAINS(open_error(R"({"x":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", kF32x2),
                  "\"shape\" must be an array, found a number");
  EXPECT_CONTAINS(open_error(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":"0-8"}})", kF32x2),
                  "\"data_offsets\" must be an array, found a string");
  EXPECT_CONTAINS(open_error(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", kF32x2),
                  "data_offsets [0] must be two non-negative integers");
  EXPECT_CONTAINS(open_error(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}})", kF32x2),
                  "must be two non-negative integers");
  EXPECT_CONTAINS(open_error(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", kF32x2),
                  "must be two non-negative integers");
  EXPECT_CONTAINS(
      open_error(R"({"x":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", kF32x2),
      "tensor 'x': duplicate key 'dtype'");
}

TEST(SafetensorsValidation, UnsupportedDtype) {
  EXPECT_CONTAINS(open_error(R"({"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", kF32x2),
                  "unsupported dtype 'F64' for tensor 'x' (supported: F32, F16, BF16, I32, U8)");
  EXPECT_CONTAINS(open_error(R"({"x":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", kF32x2),
                  "unsupported dtype 'I64'");
  EXPECT_CONTAINS(open_error(R"({"x":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", kF32x2),
                  "unsupported dtype 'f32'");
}

TEST(SafetensorsValidation, BadShapeDims) {
  EXPECT_CONTAINS(
      open_error(R"({"x":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,8]}})", kF32x2),
      "tensor 'x': shape [2,-1] has dimension -1, which is not a non-negative integer");
  EXPECT_CONTAINS(open_error(R"({"x":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", kF32x2),
                  "has dimension 2.5");
  EXPECT_CONTAINS(open_error(R"({"x":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", kF32x2),
                  "has dimension \"2\"");
  EXPECT_CONTAINS(
      open_error(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                 kF32x2),
      "is too large");
}

TEST(SafetensorsValidation, OffsetsEndBeforeBegin) {
  EXPECT_CONTAINS(open_error(R"({"x":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}})", kF32x2),
                  "tensor 'x': data_offsets [8, 0] end before they begin");
}

TEST(SafetensorsValidation, OffsetsBeyondDataBuffer) {
  EXPECT_CONTAINS(open_error(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", kF32x2),
                  "tensor 'x' data_offsets [0, 16] go beyond the end of the data buffer (8 bytes");
}

TEST(SafetensorsValidation, SizeMismatch) {
  const std::string data(100, '\0');
  EXPECT_CONTAINS(
      open_error(R"({"fc.weight":{"dtype":"F32","shape":[5,6],"data_offsets":[0,100]}})", data),
      "t.safetensors: tensor 'fc.weight' data_offsets [0, 100] do not match dtype F32 and shape "
      "[5, 6] (expected 120 bytes)");
}

TEST(SafetensorsValidation, OverlappingTensors) {
  EXPECT_CONTAINS(open_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                             kF32x2),
                  "tensors 'a' [0, 8] and 'b' [4, 8] overlap in the data buffer");
  // An empty tensor strictly inside another one is also out of place.
  EXPECT_CONTAINS(open_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                             kF32x2),
                  "overlap");
}

TEST(SafetensorsValidation, HolesInDataBuffer) {
  EXPECT_CONTAINS(open_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", kF32x2),
                  "bytes [0, 4) of the data buffer belong to no tensor");
  EXPECT_CONTAINS(open_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", kF32x2),
                  "the last 4 bytes of the data buffer (from offset 4) belong to no tensor");
  EXPECT_CONTAINS(open_error("{}", "x"), "the last 1 bytes");
}

TEST(SafetensorsValidation, DuplicateNames) {
  EXPECT_CONTAINS(open_error(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                             R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                             "xy"),
                  "duplicate tensor name 'a'");
  EXPECT_CONTAINS(open_error(R"({"__metadata__":{},"__metadata__":{}})"),
                  "duplicate \"__metadata__\"");
}

TEST(SafetensorsValidation, MetadataMustHoldStrings) {
  EXPECT_CONTAINS(open_error(R"({"__metadata__":{"epoch":3}})"),
                  "\"__metadata__\" value for key 'epoch' must be a string, found a number");
  EXPECT_CONTAINS(open_error(R"({"__metadata__":["a"]})"),
                  "\"__metadata__\" must be an object of strings, found a array");
  EXPECT_CONTAINS(open_error(R"({"__metadata__":{"k":"1","k":"2"}})"),
                  "duplicate key 'k' in \"__metadata__\"");
}

TEST(SafetensorsValidation, ZeroElementTensorsAllowed) {
  const SafetensorsReader r = SafetensorsReader::from_buffer(
      make_file(R"({"e":{"dtype":"F32","shape":[3,0],"data_offsets":[0,0]},)"
                R"("f":{"dtype":"I32","shape":[0],"data_offsets":[0,0]}})"),
      "z");
  ASSERT_EQ(r.tensors().size(), 2u);
  EXPECT_EQ(r.find("e")->nbytes, 0u);
}

// Feeds many corrupted versions of a valid file through the parser: each must
// either load or throw strata::Error, never crash (sanitizers check the rest).
TEST(SafetensorsFuzzTest, RandomMutationsNeverCrash) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("b":{"dtype":"U8","shape":[3],"data_offsets":[16,19]},"c":{"dtype":"BF16","shape":[0],"data_offsets":[19,19]}})";
  const std::vector<uint8_t> valid = make_file(header, std::string(19, '\x11'));
  ASSERT_NO_THROW(SafetensorsReader::from_buffer(valid, "seed"));
  std::mt19937 rng(12345);
  int loaded = 0, rejected = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<uint8_t> f = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 6) {
        case 0:  // bit flip anywhere
          if (!f.empty()) f[rng() % f.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 1:  // truncate
          f.resize(rng() % (f.size() + 1));
          break;
        case 2: {  // tweak the header length
          uint64_t n = 0;
          if (f.size() >= 8) {
            std::memcpy(&n, f.data(), 8);
            n += static_cast<uint64_t>(static_cast<int64_t>(rng() % 17) - 8);
            if (rng() % 8 == 0) n = uint64_t{rng()} << (rng() % 40);
            std::memcpy(f.data(), &n, 8);
          }
          break;
        }
        case 3:  // overwrite a header byte with JSON punctuation or a digit
          if (f.size() > 8)
            f[8 + rng() % (f.size() - 8)] =
                static_cast<uint8_t>("{}[],:\"0123456789-.e \\"[rng() % 22]);
          break;
        case 4:  // insert or delete a byte
          if (!f.empty() && rng() % 2) {
            f.erase(f.begin() + static_cast<std::ptrdiff_t>(rng() % f.size()));
          } else {
            f.insert(f.begin() + static_cast<std::ptrdiff_t>(rng() % (f.size() + 1)),
                     static_cast<uint8_t>(rng()));
          }
          break;
        default:  // append junk
          f.push_back(static_cast<uint8_t>(rng()));
          break;
      }
    }
    try {
      const SafetensorsReader r = SafetensorsReader::from_buffer(f, "mutant");
      for (const TensorView& t : r.tensors()) {
        volatile uint8_t sink = 0;
        for (size_t k = 0; k < t.nbytes; ++k) sink = sink ^ t.data[k];  // must be in bounds
      }
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_EQ(loaded + rejected, 20000);
  EXPECT_GT(rejected, 10000);
}

// ---------------------------------------------------------------- JSON

TEST(JsonTest, ParsesAndDumpsCompactly) {
  const JsonValue v =
      parse_json(" {\"a\" : [1, -2.5e3, true, false, null, \"x\\ty\"], \"b\": {}} \n");
  EXPECT_EQ(v.dump(), R"({"a":[1,-2.5e3,true,false,null,"x\ty"],"b":{}})");
  EXPECT_EQ(v.find("a")->as_array().size(), 6u);
  EXPECT_DOUBLE_EQ(v.find("a")->as_array()[1].as_number(), -2500.0);
  EXPECT_EQ(v.find("zzz"), nullptr);
}

TEST(JsonTest, ExactLargeIntegers) {
  const JsonValue v =
      parse_json("[9007199254740993, 9223372036854775807, 9223372036854775808, 1.0, -0]");
  int64_t i = 0;
  ASSERT_TRUE(v.as_array()[0].as_int64(&i));
  EXPECT_EQ(i, 9007199254740993);
  ASSERT_TRUE(v.as_array()[1].as_int64(&i));
  EXPECT_EQ(i, INT64_MAX);
  EXPECT_FALSE(v.as_array()[2].as_int64(&i));
  EXPECT_FALSE(v.as_array()[3].as_int64(&i));
  EXPECT_TRUE(v.as_array()[4].as_int64(&i));
  EXPECT_EQ(JsonValue::integer(-7).dump(), "-7");
  EXPECT_EQ(JsonValue::number(0.1).dump(), "0.1");
  EXPECT_EQ(JsonValue::number(1.0 / 0.0).dump(), "null");
}

TEST(JsonTest, StringEscapesAndUnicode) {
  EXPECT_EQ(parse_json(R"("\u00e9\ud83d\ude00\/\"\\")").as_string(), "é\xf0\x9f\x98\x80/\"\\");
  EXPECT_EQ(json_quote("a\"b\\c\n\x01/é"), "\"a\\\"b\\\\c\\n\\u0001/é\"");
  EXPECT_EQ(json_quote("bad\xff"), "\"bad\xef\xbf\xbd\"");
  JsonValue o = JsonValue::object();
  o.set("k", JsonValue::string("v1"));
  o.set("k", JsonValue::string("v2"));
  o.set("n", JsonValue::array({JsonValue::integer(1), JsonValue()}));
  EXPECT_EQ(o.dump(), R"({"k":"v2","n":[1,null]})");
  EXPECT_EQ(parse_json(o.dump()).dump(), o.dump());
}

TEST(JsonTest, KeepsDuplicateKeysInOrder) {
  const JsonValue v = parse_json(R"({"a":1,"a":2})");
  ASSERT_EQ(v.as_object().size(), 2u);
  EXPECT_EQ(v.find("a")->dump(), "1");
}

TEST(JsonTest, RejectsInvalidText) {
  for (const char* bad : {"",
                          "[1,]",
                          "{\"a\":1,}",
                          "01",
                          "1.",
                          ".5",
                          "-",
                          "1e",
                          "+1",
                          "NaN",
                          "Infinity",
                          "tru",
                          "[1 2]",
                          "{\"a\" 1}",
                          "{1:2}",
                          "\"abc",
                          "\"\\x\"",
                          "\"\\ud800\"",
                          "\"\\udc00\"",
                          "\"\\ud800\\u0041\"",
                          "\"a\nb\"",
                          "\"\xff\"",
                          "\"\xed\xa0\x80\"",
                          "[] []",
                          "'a'",
                          "[\"\\u12G4\"]"}) {
    EXPECT_THROW(parse_json(bad), JsonError) << bad;
  }
  EXPECT_THROW(parse_json(std::string(300, '[') + std::string(300, ']')), JsonError);
  EXPECT_NO_THROW(parse_json(std::string(200, '[') + std::string(200, ']')));
}

TEST(JsonTest, ErrorGivesLineAndColumn) {
  try {
    parse_json("{\n  \"a\": 1,\n  \"b\" 2\n}");
    ADD_FAILURE();
  } catch (const JsonError& e) {
    EXPECT_CONTAINS(e.what(), "line 3, column 7");
    EXPECT_CONTAINS(e.what(), "expected ':'");
    EXPECT_EQ(e.offset(), 18u);
  }
}

TEST(JsonTest, Utf8Validation) {
  size_t at = 99;
  EXPECT_TRUE(is_valid_utf8("plain é \xf4\x8f\xbf\xbf"));
  EXPECT_FALSE(is_valid_utf8("ab\xf4\x90\x80\x80", &at));  // > U+10FFFF
  EXPECT_EQ(at, 2u);
  EXPECT_FALSE(is_valid_utf8("\xe0\x80\xaf"));  // overlong
  EXPECT_FALSE(is_valid_utf8("\xc3"));          // truncated
}

}  // namespace
}  // namespace strata
