#include "framework/caffe/caffe_proto.h"

#include <cstring>
#include <limits>

#include "framework/error.h"
#include "framework/io/file_util.h"

namespace strata::caffe {

using protobuf::Field;
using protobuf::WireReader;
using protobuf::WireWriter;

namespace {

// int32 fields arrive as varints of 64 bits (negative values sign-extended).
int32_t as_int32(const WireReader& r, const Field& f, const char* name) {
  const int64_t v = r.as_int(f, name);
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
    fail<IoError>(r.what(), ": field '", name, "' at byte ", f.offset, " holds ", v, ", outside int32");
  }
  return static_cast<int32_t>(v);
}

}  // namespace

Datum parse_datum(std::string_view bytes, const std::string& what) {
  Datum d;
  WireReader r(bytes, what);
  Field f;
  while (r.next(&f)) {
    switch (f.number) {
      case 1: d.channels = as_int32(r, f, "channels"); break;
      case 2: d.height = as_int32(r, f, "height"); break;
      case 3: d.width = as_int32(r, f, "width"); break;
      case 4: d.data = std::string(r.as_bytes(f, "data")); break;
      case 5: d.label = as_int32(r, f, "label"); break;
      case 6: r.append_floats(f, "float_data", &d.float_data); break;
      case 7: d.encoded = r.as_bool(f, "encoded"); break;
      default: break;  // unknown fields are skipped, as protobuf does
    }
  }
  if (d.channels < 0 || d.height < 0 || d.width < 0) {
    fail<IoError>(what, ": Datum has a negative size (channels ", d.channels, ", height ", d.height, ", width ",
                  d.width, ")");
  }
  return d;
}

std::string serialize_datum(const Datum& d) {
  WireWriter w;
  w.put_int(1, d.channels);
  w.put_int(2, d.height);
  w.put_int(3, d.width);
  if (!d.data.empty()) w.put_bytes(4, d.data);
  w.put_int(5, d.label);
  for (float v : d.float_data) w.put_float(6, v);  // not packed: proto2's default for Datum
  if (d.encoded) w.put_varint(7, 1);
  return w.str();
}

namespace {

BlobProto read_blob(WireReader r) {
  BlobProto b;
  int64_t legacy[4] = {0, 0, 0, 0};
  bool has_legacy = false, has_shape = false;
  std::vector<double> doubles;
  Field f;
  while (r.next(&f)) {
    switch (f.number) {
      case 1:
      case 2:
      case 3:
      case 4: {
        static const char* const names[] = {"num", "channels", "height", "width"};
        legacy[f.number - 1] = as_int32(r, f, names[f.number - 1]);
        has_legacy = true;
        break;
      }
      case 5: r.append_floats(f, "data", &b.data); break;
      case 7: {
        has_shape = true;
        b.shape.clear();
        WireReader s = r.message(f, "shape");
        Field d;
        while (s.next(&d)) {
          if (d.number == 1) s.append_ints(d, "shape.dim", &b.shape);
        }
        break;
      }
      case 8: r.append_doubles(f, "double_data", &doubles); break;
      default: break;  // diff, double_diff: gradients, not needed
    }
  }
  if (!has_shape) {
    b.style = BlobShapeStyle::kLegacy;
    b.shape.assign(legacy, legacy + 4);
    if (!has_legacy) b.shape.clear();
  }
  if (b.data.empty() && !doubles.empty()) b.data.assign(doubles.begin(), doubles.end());
  int64_t count = 1;
  for (int64_t dim : b.shape) {
    if (dim < 0 || dim > (int64_t{1} << 40)) {
      fail<IoError>(r.what(), ": blob has dimension ", dim, " in shape ", shape_str(b.shape),
                    "; the file is damaged");
    }
    // Checked before multiplying: two large dimensions would overflow int64.
    if (dim != 0 && count > (int64_t{1} << 40) / dim) {
      fail<IoError>(r.what(), ": blob shape ", shape_str(b.shape), " is too large");
    }
    count *= dim;
  }
  if (b.shape.empty() && b.data.empty()) return b;
  if (count != static_cast<int64_t>(b.data.size())) {
    fail<IoError>(r.what(), ": blob of shape ", shape_str(b.shape), " (", count, " values) holds ", b.data.size(),
                  " values; the file is damaged or truncated");
  }
  return b;
}

}  // namespace

BlobProto parse_blob_proto(const WireReader& outer, const Field& field, const char* name) {
  return read_blob(outer.message(field, name));
}

BlobProto parse_blob_proto(std::string_view bytes, const std::string& what) {
  return read_blob(WireReader(bytes, what));
}

std::string serialize_blob_proto(const BlobProto& b) {
  WireWriter w;
  if (b.style == BlobShapeStyle::kLegacy) {
    if (b.shape.size() > 4) fail<Error>("a legacy BlobProto holds at most 4 axes, got ", shape_str(b.shape));
    Shape s(4 - b.shape.size(), 1);
    s.insert(s.end(), b.shape.begin(), b.shape.end());
    for (int i = 0; i < 4; ++i) w.put_int(static_cast<uint32_t>(i + 1), s[static_cast<size_t>(i)]);
  } else {
    WireWriter shape;
    shape.put_packed_ints(1, b.shape.data(), b.shape.size());
    w.put_message(7, shape);
  }
  w.put_packed_floats(5, b.data.data(), b.data.size());
  return w.str();
}

Tensor read_binaryproto(const std::string& path) {
  const std::string bytes = read_file_bytes(path);
  const BlobProto b = parse_blob_proto(bytes, "mean file '" + path + "'");
  Shape s = b.shape;
  if (s.size() == 4 && s[0] == 1) s.erase(s.begin());
  if (s.size() != 3 || b.data.empty()) {
    fail<IoError>("mean file '", path, "' holds a blob of shape ", shape_str(b.shape),
                  "; a mean file is one [1, C, H, W] image as Caffe's compute_image_mean writes it");
  }
  Tensor t(s);
  std::memcpy(t.data<float>(), b.data.data(), b.data.size() * sizeof(float));
  return t;
}

void write_binaryproto(const std::string& path, const Tensor& mean) {
  BlobProto b;
  b.style = BlobShapeStyle::kLegacy;
  b.shape = mean.shape();
  const float* p = mean.data<float>();
  b.data.assign(p, p + mean.numel());
  const std::string bytes = serialize_blob_proto(b);
  write_file_atomically(path, [&](std::FILE* f) { fwrite_checked(f, bytes.data(), bytes.size()); });
}

}  // namespace strata::caffe
