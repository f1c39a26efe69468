// The protobuf wire decoder/encoder (framework/caffe/protobuf_wire.h) and
// Caffe's Datum / BlobProto messages (framework/caffe/caffe_proto.h): bytes
// spelled out by hand as protoc writes them, round trips, and damaged input
// refused with the field and offset named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "framework/caffe/caffe_proto.h"
#include "framework/error.h"
#include "framework/caffe/protobuf_wire.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using protobuf::Field;
using protobuf::WireReader;
using protobuf::WireType;
using protobuf::WireWriter;
using test::error_of;

std::string bytes(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s.push_back(static_cast<char>(b));
  return s;
}

TEST(ProtobufWire, ReadsEachWireTypeAsProtocWritesIt) {
  // field 1 varint 150 (0x96 0x01), field 2 string "hi", field 3 fixed32 1.5f,
  // field 4 fixed64 (double 2.0), field 5 varint -1 (10 bytes).
  const std::string in = bytes({0x08, 0x96, 0x01, 0x12, 0x02, 'h', 'i', 0x1d, 0x00, 0x00, 0xc0, 0x3f, 0x21, 0, 0, 0,
                                0, 0, 0, 0, 0x40, 0x28, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01});
  WireReader r(in, "test message");
  Field f;
  ASSERT_TRUE(r.next(&f));
  EXPECT_EQ(f.number, 1u);
  EXPECT_EQ(r.as_uint(f, "a"), 150u);
  ASSERT_TRUE(r.next(&f));
  EXPECT_EQ(f.number, 2u);
  EXPECT_EQ(r.as_bytes(f, "b"), "hi");
  ASSERT_TRUE(r.next(&f));
  EXPECT_EQ(r.as_float(f, "c"), 1.5f);
  ASSERT_TRUE(r.next(&f));
  std::vector<double> d;
  r.append_doubles(f, "d", &d);
  EXPECT_EQ(d, std::vector<double>{2.0});
  ASSERT_TRUE(r.next(&f));
  EXPECT_EQ(r.as_int(f, "e"), -1);
  EXPECT_FALSE(r.next(&f));
}

TEST(ProtobufWire, PackedAndUnpackedRepeatedFloatsReadAlike) {
  const std::vector<float> v = {1.0f, -2.5f, 3.25f};
  WireWriter packed, loose;
  packed.put_packed_floats(5, v.data(), v.size());
  for (float x : v) loose.put_float(5, x);
  for (const std::string& s : {packed.str(), loose.str()}) {
    WireReader r(s, "floats");
    std::vector<float> got;
    Field f;
    while (r.next(&f)) r.append_floats(f, "data", &got);
    EXPECT_EQ(got, v);
  }
}

TEST(ProtobufWire, WriterRoundTripsNestedMessagesAndPackedInts) {
  WireWriter inner;
  const std::vector<int64_t> dims = {64, 3, 7, 300};
  inner.put_packed_ints(1, dims.data(), dims.size());
  WireWriter outer;
  outer.put_varint(1, 7);
  outer.put_message(7, inner);
  WireReader r(outer.str(), "outer");
  Field f;
  ASSERT_TRUE(r.next(&f));
  ASSERT_TRUE(r.next(&f));
  EXPECT_EQ(f.number, 7u);
  WireReader sub = r.message(f, "shape");
  Field g;
  std::vector<int64_t> got;
  while (sub.next(&g)) sub.append_ints(g, "dim", &got);
  EXPECT_EQ(got, dims);
}

TEST(ProtobufWire, TruncatedInputIsRefusedWithFieldAndOffset) {
  // A length that claims more bytes than remain.
  std::string msg = error_of<IoError>([] {
    const std::string in = bytes({0x08, 0x01, 0x22, 0x10, 'a', 'b'});
    WireReader r(in, "record 'k'");
    Field f;
    while (r.next(&f)) {
    }
  });
  EXPECT_NE(msg.find("record 'k'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("field 4 declares 16 bytes, but only 2 remain"), std::string::npos) << msg;

  // A varint cut short, a fixed32 cut short, an oversized length (2^63).
  for (const std::string& in : {bytes({0x08, 0x80}), bytes({0x0d, 0x00, 0x00}),
                                bytes({0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})}) {
    msg = error_of<IoError>([&] {
      WireReader r(in, "cut");
      Field f;
      while (r.next(&f)) {
      }
    });
    EXPECT_NE(msg.find("cut: malformed protobuf at byte "), std::string::npos) << msg;
    EXPECT_NE(msg.find("field 1"), std::string::npos) << msg;
  }
  // An 11-byte varint, field number 0, a group, wire type 7.
  for (const std::string& in :
       {bytes({0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}), bytes({0x00, 0x01}),
        bytes({0x0b}), bytes({0x0f})}) {
    EXPECT_THROW(
        {
          WireReader r(in, "bad");
          Field f;
          while (r.next(&f)) {
          }
        },
        IoError);
  }
}

TEST(ProtobufWire, WrongWireTypeNamesTheField) {
  const std::string in = bytes({0x08, 0x05});
  WireReader r(in, "Datum");
  Field f;
  ASSERT_TRUE(r.next(&f));
  const std::string msg = error_of<IoError>([&] { r.as_bytes(f, "data"); });
  EXPECT_NE(msg.find("field 'data' (number 1) at byte 0 is varint, expected length-delimited"), std::string::npos)
      << msg;
  const std::string packed = bytes({0x2a, 0x03, 1, 2, 3});  // 3 bytes of packed floats
  WireReader r2(packed, "BlobProto");
  ASSERT_TRUE(r2.next(&f));
  std::vector<float> out;
  EXPECT_NE(error_of<IoError>([&] { r2.append_floats(f, "data", &out); }).find("not a whole number"),
            std::string::npos);
}

TEST(CaffeProto, DatumMatchesProtocBytes) {
  // Datum { channels: 1 height: 2 width: 2 data: "\x01\x02\x03\x04" label: 7 },
  // as protoc serialises it (convert_mnist_data's records look like this).
  const std::string wire = bytes({0x08, 0x01, 0x10, 0x02, 0x18, 0x02, 0x22, 0x04, 1, 2, 3, 4, 0x28, 0x07});
  caffe::Datum d;
  d.channels = 1;
  d.height = 2;
  d.width = 2;
  d.data = bytes({1, 2, 3, 4});
  d.label = 7;
  EXPECT_EQ(caffe::serialize_datum(d), wire);
  const caffe::Datum back = caffe::parse_datum(wire, "record");
  EXPECT_EQ(back.channels, 1);
  EXPECT_EQ(back.height, 2);
  EXPECT_EQ(back.width, 2);
  EXPECT_EQ(back.data, d.data);
  EXPECT_EQ(back.label, 7);
  EXPECT_FALSE(back.encoded);

  caffe::Datum f;
  f.channels = 2;
  f.height = f.width = 1;
  f.float_data = {0.5f, -1.0f};
  f.encoded = false;
  const caffe::Datum fb = caffe::parse_datum(caffe::serialize_datum(f), "record");
  EXPECT_EQ(fb.float_data, f.float_data);
  EXPECT_TRUE(fb.data.empty());
}

TEST(CaffeProto, BlobProtoReadsLegacyAndShapeFieldsAndDoubles) {
  caffe::BlobProto b;
  b.shape = {2, 3};
  b.data = {1, 2, 3, 4, 5, 6};
  caffe::BlobProto back = caffe::parse_blob_proto(caffe::serialize_blob_proto(b), "blob");
  EXPECT_EQ(back.shape, (Shape{2, 3}));
  EXPECT_EQ(back.style, caffe::BlobShapeStyle::kShape);
  EXPECT_EQ(back.data, b.data);

  b.style = caffe::BlobShapeStyle::kLegacy;
  back = caffe::parse_blob_proto(caffe::serialize_blob_proto(b), "blob");
  EXPECT_EQ(back.shape, (Shape{1, 1, 2, 3}));
  EXPECT_EQ(back.style, caffe::BlobShapeStyle::kLegacy);

  WireWriter w;
  const std::vector<double> dd = {0.25, 0.5};
  const std::vector<int64_t> dims = {2};
  WireWriter shape;
  shape.put_packed_ints(1, dims.data(), dims.size());
  w.put_message(7, shape);
  w.put_packed_doubles(8, dd.data(), dd.size());
  back = caffe::parse_blob_proto(w.str(), "blob");
  EXPECT_EQ(back.data, (std::vector<float>{0.25f, 0.5f}));

  b.data.pop_back();
  const std::string msg = error_of<IoError>([&] { caffe::parse_blob_proto(caffe::serialize_blob_proto(b), "blob x"); });
  EXPECT_NE(msg.find("blob x: blob of shape [1, 1, 2, 3] (6 values) holds 5 values"), std::string::npos) << msg;
}

TEST(CaffeProto, BinaryprotoMeanFileRoundTripsAndWrongShapeIsNamed) {
  test::TempDir dir("caffe_proto");
  Tensor mean({1, 2, 2, 3});
  for (int64_t i = 0; i < mean.numel(); ++i) mean.data<float>()[i] = static_cast<float>(i) * 0.5f;
  caffe::write_binaryproto(dir.file("mean.binaryproto"), mean);
  const Tensor back = caffe::read_binaryproto(dir.file("mean.binaryproto"));
  EXPECT_EQ(back.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(test::values(back), test::values(mean));

  test::write_text(dir.file("bad.binaryproto"), bytes({0x08, 0x01, 0x10, 0x02, 0x2a, 0x04, 0, 0}));
  const std::string msg = error_of<IoError>([&] { caffe::read_binaryproto(dir.file("bad.binaryproto")); });
  EXPECT_NE(msg.find("bad.binaryproto"), std::string::npos) << msg;
}

// Every seed of the fuzz corpus (tests/fuzz/corpus_caffe_proto) is replayed:
// the valid ones parse as what their name says, the invalid ones are refused.
TEST(CaffeProto, FuzzCorpusSeedsParseOrAreRefused) {
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/tests/fuzz/corpus_caffe_proto";
  int seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ++seeds;
    auto walk = [&] {
      WireReader r(bytes, name);
      Field f;
      while (r.next(&f)) {
      }
    };
    if (name.rfind("invalid_", 0) == 0) {
      EXPECT_THROW(walk(), IoError) << name;
    } else if (name.rfind("datum_", 0) == 0) {
      EXPECT_GT(caffe::parse_datum(bytes, name).channels, 0) << name;
    } else if (name.rfind("blob_", 0) == 0) {
      EXPECT_FALSE(caffe::parse_blob_proto(bytes, name).data.empty()) << name;
    } else {
      EXPECT_NO_THROW(walk()) << name;
    }
  }
  EXPECT_EQ(seeds, 7);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Found by the fuzzer: two large dimensions whose product overflows int64
// must be refused as too large, not multiplied.
TEST(CaffeProto, HugeShapeProductIsRefusedWithoutOverflow) {
  caffe::BlobProto b;
  b.shape = {int64_t{1000000000000}, int64_t{11542724607}};
  b.data = {1.0f};
  const std::string bytes = caffe::serialize_blob_proto(b);
  try {
    caffe::parse_blob_proto(bytes, "huge.binaryproto");
    FAIL() << "a shape of 1.15e22 values was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("too large"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
