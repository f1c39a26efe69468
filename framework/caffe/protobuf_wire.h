// Protocol buffers' binary wire format, read and written without libprotobuf:
// what Caffe's files need (Datum records in LMDB/LevelDB, binaryproto mean
// files, .caffemodel weights).
//
//   message  = field*
//   field    = tag value            tag = varint(number << 3 | wire type)
//   wire type 0 varint   1 fixed64 (8 bytes LE)   2 length-delimited (varint
//             length, then bytes: a string, a nested message or a packed
//             repeated scalar)   5 fixed32 (4 bytes LE)
//
// Reading is bounded: every varint stops at 10 bytes, every length is checked
// against the bytes that remain, and a nested message is read inside its own
// length only. A malformed input is an IoError naming what was read, the
// field and the byte offset; never a read past the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::protobuf {

enum class WireType : uint8_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

struct Field {
  uint32_t number = 0;
  WireType type = WireType::kVarint;
  uint64_t value = 0;       // kVarint, kFixed64 and kFixed32 (the raw bits)
  std::string_view bytes;   // kBytes
  size_t offset = 0;        // of the tag, in the outermost message
};

class WireReader {
 public:
  // `what` names the input in errors ("Datum at key '00000003' of LMDB 'x'").
  // The bytes must outlive the reader.
  WireReader(std::string_view in, std::string what, size_t base_offset = 0);

  // The next field into `f`; false at the end of the message.
  bool next(Field* f);

  // Typed views of a field; `name` is the field's name in errors. Each
  // checks the wire type.
  uint64_t as_uint(const Field& f, const char* name) const;
  int64_t as_int(const Field& f, const char* name) const;   // int32/int64 (two's complement)
  bool as_bool(const Field& f, const char* name) const;
  float as_float(const Field& f, const char* name) const;
  std::string_view as_bytes(const Field& f, const char* name) const;
  // A repeated float / double / int64 field, packed (one kBytes field) or not
  // (one field per value): appends to `out`.
  void append_floats(const Field& f, const char* name, std::vector<float>* out) const;
  void append_doubles(const Field& f, const char* name, std::vector<double>* out) const;
  void append_ints(const Field& f, const char* name, std::vector<int64_t>* out) const;
  // A nested message: a reader over its bytes, offsets still counted from
  // the outermost message.
  WireReader message(const Field& f, const char* name) const;

  const std::string& what() const { return what_; }

 private:
  uint64_t varint(size_t* pos, const char* reading) const;
  [[noreturn]] void wrong_type(const Field& f, const char* name, const char* wanted) const;
  [[noreturn]] void malformed(size_t at, const std::string& why) const;

  std::string_view in_;
  std::string what_;
  size_t base_ = 0;
  size_t pos_ = 0;
};

// Appends fields to a message.
class WireWriter {
 public:
  void put_varint(uint32_t number, uint64_t v);
  void put_int(uint32_t number, int64_t v) { put_varint(number, static_cast<uint64_t>(v)); }
  void put_float(uint32_t number, float v);    // fixed32
  void put_double(uint32_t number, double v);  // fixed64
  void put_bytes(uint32_t number, std::string_view bytes);
  void put_message(uint32_t number, const WireWriter& message) { put_bytes(number, message.str()); }
  void put_packed_floats(uint32_t number, const float* v, size_t n);
  void put_packed_doubles(uint32_t number, const double* v, size_t n);
  void put_packed_ints(uint32_t number, const int64_t* v, size_t n);

  const std::string& str() const { return out_; }

 private:
  void raw_varint(uint64_t v);
  void tag(uint32_t number, WireType type);

  std::string out_;
};

}  // namespace strata::protobuf
