#include "framework/io/npy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/io/file_util.h"
#include "tests/test_util.h"

namespace strata {
namespace {

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A .npy file with the given header dict text, laid out as numpy does (header
// padded with spaces and '\n' so the data starts at a multiple of 64).
std::string npy_file(const std::string& dict, const std::string& data, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  header.append(64 - (prefix + header.size() + 1) % 64, ' ');
  header.push_back('\n');
  std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  for (size_t k = 0; k < prefix - 8; ++k)
    out.push_back(static_cast<char>((header.size() >> (8 * k)) & 0xff));
  return out + header + data;
}

std::string dict(const std::string& descr, const std::string& shape, bool fortran = false) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': " + shape + ", }";
}

NpyArray load(const std::string& bytes) {
  return read_npy_buffer(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x.npy");
}

std::string load_error(const std::string& bytes) {
  try {
    load(bytes);
  } catch (const IoError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("x.npy: ", 0), 0u) << msg;
    return msg;
  }
  ADD_FAILURE() << "file was accepted";
  return "";
}

// np.save(f, np.arange(6, dtype='<f4').reshape(2, 3)) with NumPy 1.24.
const std::string kNumpyF32 = std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
                              "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" +
                              std::string(58, ' ') + "\n" +
                              unhex("000000000000803f0000004000004040000080400000a040");
// np.save(f, np.array(7, dtype='<i4')): a 0-d array.
const std::string kNumpyI32Scalar = std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
                                    "{'descr': '<i4', 'fortran_order': False, 'shape': (), }" +
                                    std::string(62, ' ') + "\n" + unhex("07000000");
// np.save(f, np.arange(3, dtype='<f2').reshape(1, 3, 1)).
const std::string kNumpyF16 = std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
                              "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 3, 1), }" +
                              std::string(55, ' ') + "\n" + unhex("0000003c0040");

class NpyFileTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"strata_npy"};
  std::string dir_ = tmp_.path();
};

TEST_F(NpyFileTest, WritesExactlyWhatNumpyWrites) {
  ASSERT_EQ(kNumpyF32.size(), 152u);
  const std::vector<float> v = {0, 1, 2, 3, 4, 5};
  write_npy(dir_ + "/a.npy", DType::kF32, {2, 3}, v.data());
  EXPECT_EQ(read_file_bytes(dir_ + "/a.npy"), kNumpyF32);

  const int32_t seven = 7;
  write_npy(dir_ + "/s.npy", DType::kI32, {}, &seven);
  EXPECT_EQ(read_file_bytes(dir_ + "/s.npy"), kNumpyI32Scalar);

  const std::vector<uint16_t> h = {float_to_f16(0.f), float_to_f16(1.f), float_to_f16(2.f)};
  write_npy(dir_ + "/h.npy", DType::kF16, {1, 3, 1}, h.data());
  EXPECT_EQ(read_file_bytes(dir_ + "/h.npy"), kNumpyF16);
}

TEST_F(NpyFileTest, RoundTripEveryWritableDtype) {
  const std::vector<float> f = {1.5f, -0.f, std::numeric_limits<float>::infinity()};
  const std::vector<int32_t> i = {INT32_MIN, 0, INT32_MAX, 5};
  const std::vector<uint8_t> u = {0, 128, 255};
  write_npy(dir_ + "/f.npy", DType::kF32, {3}, f.data());
  write_npy(dir_ + "/i.npy", DType::kI32, {2, 2}, i.data());
  write_npy(dir_ + "/u.npy", DType::kU8, {3, 1}, u.data());
  write_npy(dir_ + "/e.npy", DType::kF32, {4, 0, 2}, nullptr);

  const NpyArray a = read_npy(dir_ + "/f.npy");
  EXPECT_EQ(a.dtype, DType::kF32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(a.numel(), 3);
  EXPECT_EQ(std::memcmp(a.as<float>(), f.data(), 12), 0);
  const NpyArray b = read_npy(dir_ + "/i.npy");
  EXPECT_EQ(b.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(std::vector<int32_t>(b.as<int32_t>(), b.as<int32_t>() + 4), i);
  const NpyArray c = read_npy(dir_ + "/u.npy");
  EXPECT_EQ(c.dtype, DType::kU8);
  EXPECT_EQ(c.as<uint8_t>()[2], 255);
  const NpyArray e = read_npy(dir_ + "/e.npy");
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(e.data.empty());
}

TEST_F(NpyFileTest, WriteRejectsBf16AndBadShapes) {
  const uint16_t x = 0;
  try {
    write_npy(dir_ + "/b.npy", DType::kBF16, {1}, &x);
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_CONTAINS(e.what(), "bf16 has no NumPy dtype");
  }
  EXPECT_THROW(write_npy(dir_ + "/n.npy", DType::kU8, {-1}, &x), IoError);
  EXPECT_THROW(write_npy(dir_ + "/n.npy", DType::kU8, {2}, nullptr), IoError);
  EXPECT_FALSE(file_exists(dir_ + "/b.npy"));
  EXPECT_FALSE(file_exists(dir_ + "/n.npy"));
}

TEST_F(NpyFileTest, MissingFileNamesPath) {
  try {
    read_npy(dir_ + "/none.npy");
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_CONTAINS(e.what(), dir_ + "/none.npy");
    EXPECT_CONTAINS(e.what(), "No such file");
  }
}

TEST(NpyReadTest, NumpyFilesAsWritten) {
  const NpyArray a = load(kNumpyF32);
  EXPECT_EQ(a.as<float>()[5], 5.f);
  const NpyArray s = load(kNumpyI32Scalar);
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.as<int32_t>()[0], 7);
  const NpyArray h = load(kNumpyF16);
  EXPECT_EQ(h.dtype, DType::kF16);
  EXPECT_EQ(f16_to_float(h.as<uint16_t>()[2]), 2.f);
}

TEST(NpyReadTest, Float64ConvertsToFloat32) {
  // np.array([1.5, -2.25, 1e300])
  const NpyArray a = load(
      npy_file(dict("<f8", "(3,)"), unhex("000000000000f83f00000000000002c09c7500883ce4377e")));
  EXPECT_EQ(a.dtype, DType::kF32);
  EXPECT_EQ(a.data.size(), 12u);
  EXPECT_EQ(a.as<float>()[0], 1.5f);
  EXPECT_EQ(a.as<float>()[1], -2.25f);
  EXPECT_TRUE(std::isinf(a.as<float>()[2]));
}

TEST(NpyReadTest, Int64ConvertsToInt32WithRangeCheck) {
  const std::vector<int64_t> ok = {1, -2, INT32_MIN, INT32_MAX};
  const NpyArray a = load(npy_file(dict("<i8", "(2, 2)"), raw(ok)));
  EXPECT_EQ(a.dtype, DType::kI32);
  EXPECT_EQ(std::vector<int32_t>(a.as<int32_t>(), a.as<int32_t>() + 4),
            (std::vector<int32_t>{1, -2, INT32_MIN, INT32_MAX}));
  // np.array([1, -2, 3000000000])
  EXPECT_CONTAINS(load_error(npy_file(dict("<i8", "(3,)"),
                                      unhex("0100000000000000feffffffffffffff005ed0b200000000"))),
                  "int64 element 2 (value 3000000000) does not fit in int32");
}

TEST(NpyReadTest, BoolAndUint8) {
  // np.array([True, False, True, True])
  const NpyArray b = load(npy_file(dict("|b1", "(4,)"), unhex("01000101")));
  EXPECT_EQ(b.dtype, DType::kU8);
  EXPECT_EQ(std::vector<uint8_t>(b.as<uint8_t>(), b.as<uint8_t>() + 4),
            (std::vector<uint8_t>{1, 0, 1, 1}));
  const NpyArray u = load(npy_file(dict("|u1", "(0,)"), ""));
  EXPECT_EQ(u.numel(), 0);
}

TEST(NpyReadTest, Versions2And3) {
  // np.lib.format.write_array(f, np.array([1, 2], dtype='<i4'), version=(2, 0)) and (3, 0).
  for (const char v : {'\x02', '\x03'}) {
    const std::string file = std::string("\x93NUMPY", 6) + v +
                             std::string("\x00\x74\x00\x00\x00", 5) +
                             "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }" +
                             std::string(58, ' ') + "\n" + unhex("0100000002000000");
    const NpyArray a = load(file);
    EXPECT_EQ(a.as<int32_t>()[1], 2);
  }
  EXPECT_EQ(load(npy_file(dict("<i4", "(1,)"), unhex("05000000"), 3)).as<int32_t>()[0], 5);
}

TEST(NpyReadTest, LenientHeaderSpellings) {
  // Python 2 era headers: long suffixes and double quotes; key order free.
  const NpyArray a =
      load(npy_file("{\"shape\": (2L,), \"fortran_order\": False, \"descr\": \"<i4\"}",
                    unhex("0100000002000000")));
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2}));
  // Fortran order is harmless when at most one dim exceeds 1.
  EXPECT_EQ(load(npy_file(dict("<f4", "(1, 3)", true), std::string(12, '\0'))).numel(), 3);
}

TEST(NpyReadTest, AsChecksType) {
  const NpyArray a = load(kNumpyF32);
  EXPECT_THROW(a.as<int32_t>(), Error);
  EXPECT_THROW(a.as<uint16_t>(), Error);
}

// ------------------------------------------------------------------ errors

TEST(NpyErrorTest, BadMagic) {
  EXPECT_CONTAINS(load_error("PK\x03\x04 not npy at all"), "not a .npy file");
  EXPECT_CONTAINS(load_error(""), "not a .npy file");
}

TEST(NpyErrorTest, UnsupportedVersion) {
  std::string f = kNumpyF32;
  f[6] = 4;
  EXPECT_CONTAINS(load_error(f), "unsupported .npy format version 4.0");
}

TEST(NpyErrorTest, TruncatedHeader) {
  EXPECT_CONTAINS(load_error(std::string("\x93NUMPY\x01", 7)), "truncated .npy header");
  EXPECT_CONTAINS(load_error(kNumpyF32.substr(0, 9)), "truncated .npy header");
  EXPECT_CONTAINS(load_error(kNumpyF32.substr(0, 60)),
                  "truncated .npy header (header length field says 118 bytes, but only 50 follow)");
}

TEST(NpyErrorTest, UnparsableHeader) {
  EXPECT_CONTAINS(
      load_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", "")),
      "cannot parse .npy header");
  EXPECT_CONTAINS(load_error(npy_file("{'descr' '<f4'}", "")), "expected ':'");
  EXPECT_CONTAINS(load_error(npy_file("[1, 2]", "")), ".npy header is not a dict");
  EXPECT_CONTAINS(load_error(npy_file("{'descr': '<f4', 'fortran_order': False}", "")),
                  ".npy header has no 'shape'");
  EXPECT_CONTAINS(load_error(npy_file(dict("<f4", "(2,)").substr(0, 56) + "'extra': 1, }", "")),
                  "unexpected key 'extra'");
  EXPECT_CONTAINS(load_error(npy_file(dict("<f4", "(2, -1)"), "")),
                  "'shape' must hold non-negative integers");
  EXPECT_CONTAINS(load_error(npy_file(dict("<f4", "[2]"), "")), "'shape' must be a tuple");
  EXPECT_CONTAINS(load_error(npy_file("{'descr': '<f4', 'fortran_order': 0, 'shape': ()}", "")),
                  "'fortran_order' must be True or False");
  EXPECT_CONTAINS(load_error(npy_file(std::string(100, '(') + std::string(100, ')'), "")),
                  "nesting too deep");
}

TEST(NpyErrorTest, DataShorterThanShape) {
  EXPECT_CONTAINS(load_error(npy_file(dict("<f4", "(32, 32)"), std::string(100, '\0'))),
                  "x.npy: expected 4096 bytes of data for shape (32, 32) float32, file has 100");
  EXPECT_CONTAINS(load_error(npy_file(dict("<i8", "(3,)"), std::string(8, '\0'))),
                  "expected 24 bytes of data for shape (3,) int64, file has 8");
  EXPECT_CONTAINS(load_error(npy_file(dict("<f4", "(4294967296, 4294967296, 4)"), "")),
                  "is too large");
}

TEST(NpyErrorTest, TrailingBytes) {
  EXPECT_CONTAINS(load_error(kNumpyF32 + "junk"), "4 unexpected bytes after the 24 bytes of data");
}

TEST(NpyErrorTest, UnsupportedDtypeListsSupported) {
  const std::string msg = load_error(npy_file(dict("<c8", "(1,)"), std::string(8, '\0')));
  EXPECT_CONTAINS(msg, "unsupported dtype '<c8' (supported: '<f4', '<f8' (read as float32)");
  EXPECT_CONTAINS(msg, "'|b1'");
  EXPECT_CONTAINS(load_error(npy_file(dict("<U5", "(1,)"), "")), "unsupported dtype '<U5'");
  EXPECT_CONTAINS(load_error(npy_file(
                      "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", "")),
                  "structured arrays are not supported");
}

TEST(NpyErrorTest, BigEndianSaysHowToFix) {
  // np.arange(3, dtype='>f4')
  EXPECT_CONTAINS(load_error(npy_file(dict(">f4", "(3,)"), unhex("000000003f80000040000000"))),
                  "array is big-endian ('>f4'); convert it in Python with arr.astype('<f4')");
  EXPECT_CONTAINS(load_error(npy_file(dict(">i8", "(1,)"), std::string(8, '\0'))),
                  "arr.astype('<i8')");
}

TEST(NpyErrorTest, FortranOrderSaysHowToFix) {
  // np.asfortranarray(np.arange(6, dtype='<f4').reshape(2, 3))
  EXPECT_CONTAINS(
      load_error(npy_file(dict("<f4", "(2, 3)", true),
                          unhex("00000000000040400000803f00008040000000400000a040"))),
      "array of shape (2, 3) is stored in Fortran order; save np.ascontiguousarray(arr) instead");
}

// Truncating a valid file anywhere must give an IoError, never a crash.
TEST(NpyErrorTest, EveryTruncationIsAnError) {
  for (size_t n = 0; n < kNumpyF32.size(); ++n) {
    EXPECT_THROW(load(kNumpyF32.substr(0, n)), IoError) << n;
  }
}

}  // namespace
}  // namespace strata
