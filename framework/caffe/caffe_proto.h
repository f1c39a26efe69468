// Caffe's messages that carry data and weights (caffe.proto), read and written
// over framework/caffe/protobuf_wire.h:
//
//   Datum      { channels=1 height=2 width=3 data=4 (bytes) label=5
//                float_data=6 (repeated float) encoded=7 (bool) }
//   BlobShape  { dim=1 (repeated int64, packed) }
//   BlobProto  { num=1 channels=2 height=3 width=4 (the legacy 4-D shape)
//                data=5 (packed float) diff=6 shape=7 double_data=8 double_diff=9 }
//
// A Datum is one record of Caffe's LMDB/LevelDB databases; a BlobProto is a
// mean file (.binaryproto) or one parameter blob of a .caffemodel.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "framework/caffe/protobuf_wire.h"
#include "framework/tensor.h"

namespace strata::caffe {

struct Datum {
  int32_t channels = 0;
  int32_t height = 0;
  int32_t width = 0;
  std::string data;               // raw: channels*height*width bytes, CHW (BGR for colour images)
  int32_t label = 0;
  std::vector<float> float_data;  // used instead of data when data is empty
  bool encoded = false;           // data holds a JPEG/PNG file
};

// `what` names the record in errors ("record '00000042' of LMDB 'x'").
Datum parse_datum(std::string_view bytes, const std::string& what);
std::string serialize_datum(const Datum& d);

enum class BlobShapeStyle { kShape, kLegacy };

struct BlobProto {
  Shape shape;                 // from shape.dim, else num/channels/height/width
  BlobShapeStyle style = BlobShapeStyle::kShape;
  std::vector<float> data;     // from data, or double_data converted
};

BlobProto parse_blob_proto(const protobuf::WireReader& outer, const protobuf::Field& field, const char* name);
BlobProto parse_blob_proto(std::string_view bytes, const std::string& what);
// The legacy style writes num/channels/height/width (shape padded with
// leading 1s to 4 axes, which it must fit) as Caffe before 2015 did.
std::string serialize_blob_proto(const BlobProto& b);

// A .binaryproto file (Caffe's mean file, as compute_image_mean writes it):
// a [1, C, H, W] (or [C, H, W]) tensor of floats. IoError naming the path
// when it cannot be read or is not a blob of that form.
Tensor read_binaryproto(const std::string& path);
void write_binaryproto(const std::string& path, const Tensor& mean);

}  // namespace strata::caffe
