#include "framework/caffe/protobuf_wire.h"

#include <cstring>
#include <utility>

#include "framework/error.h"

namespace strata::protobuf {

namespace {

const char* type_name(WireType t) {
  switch (t) {
    case WireType::kVarint: return "varint";
    case WireType::kFixed64: return "fixed64";
    case WireType::kBytes: return "length-delimited";
    case WireType::kFixed32: return "fixed32";
  }
  return "?";
}

uint32_t load_le32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

uint64_t load_le64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

double bits_to_double(uint64_t b) {
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}

}  // namespace

WireReader::WireReader(std::string_view in, std::string what, size_t base_offset)
    : in_(in), what_(std::move(what)), base_(base_offset) {}

void WireReader::malformed(size_t at, const std::string& why) const {
  fail<IoError>(what_, ": malformed protobuf at byte ", base_ + at, ": ", why,
                "; the record is damaged or is not the message expected here");
}

uint64_t WireReader::varint(size_t* pos, const char* reading) const {
  uint64_t v = 0;
  const size_t start = *pos;
  for (int i = 0; i < 10; ++i) {
    if (*pos >= in_.size()) malformed(start, std::string("the ") + reading + " (a varint) is cut short");
    const auto byte = static_cast<unsigned char>(in_[(*pos)++]);
    if (i == 9 && byte > 1) malformed(start, std::string("the ") + reading + " (a varint) overflows 64 bits");
    v |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
    if (!(byte & 0x80)) return v;
  }
  malformed(start, std::string("the ") + reading + " (a varint) is longer than 10 bytes");
}

bool WireReader::next(Field* f) {
  if (pos_ >= in_.size()) return false;
  const size_t start = pos_;
  const uint64_t tag = varint(&pos_, "field tag");
  const uint64_t number = tag >> 3;
  const auto type = static_cast<unsigned>(tag & 7);
  if (number == 0 || number > 0x1fffffff) malformed(start, "field number " + std::to_string(number) + " is invalid");
  f->number = static_cast<uint32_t>(number);
  f->offset = base_ + start;
  f->value = 0;
  f->bytes = {};
  const std::string field = "field " + std::to_string(number);
  switch (type) {
    case 0:
      f->type = WireType::kVarint;
      f->value = varint(&pos_, field.c_str());
      return true;
    case 1:
      f->type = WireType::kFixed64;
      if (in_.size() - pos_ < 8) malformed(start, field + " (fixed64) needs 8 bytes, " +
                                                      std::to_string(in_.size() - pos_) + " remain");
      f->value = load_le64(in_.data() + pos_);
      pos_ += 8;
      return true;
    case 5:
      f->type = WireType::kFixed32;
      if (in_.size() - pos_ < 4) malformed(start, field + " (fixed32) needs 4 bytes, " +
                                                      std::to_string(in_.size() - pos_) + " remain");
      f->value = load_le32(in_.data() + pos_);
      pos_ += 4;
      return true;
    case 2: {
      f->type = WireType::kBytes;
      const uint64_t n = varint(&pos_, (field + " length").c_str());
      if (n > in_.size() - pos_) {
        malformed(start, field + " declares " + std::to_string(n) + " bytes, but only " +
                             std::to_string(in_.size() - pos_) + " remain");
      }
      f->bytes = in_.substr(pos_, static_cast<size_t>(n));
      f->value = pos_;  // where the payload starts, for message()
      pos_ += static_cast<size_t>(n);
      return true;
    }
    case 3:
    case 4:
      malformed(start, field + " is a group (wire type " + std::to_string(type) +
                           "), which proto2's Caffe messages never use");
    default:
      malformed(start, field + " has wire type " + std::to_string(type) + ", which does not exist");
  }
}

void WireReader::wrong_type(const Field& f, const char* name, const char* wanted) const {
  fail<IoError>(what_, ": field '", name, "' (number ", f.number, ") at byte ", f.offset, " is ",
                type_name(f.type), ", expected ", wanted,
                "; the record is damaged or is not the message expected here");
}

uint64_t WireReader::as_uint(const Field& f, const char* name) const {
  if (f.type != WireType::kVarint) wrong_type(f, name, "a varint");
  return f.value;
}

int64_t WireReader::as_int(const Field& f, const char* name) const {
  return static_cast<int64_t>(as_uint(f, name));
}

bool WireReader::as_bool(const Field& f, const char* name) const { return as_uint(f, name) != 0; }

float WireReader::as_float(const Field& f, const char* name) const {
  if (f.type != WireType::kFixed32) wrong_type(f, name, "a float (fixed32)");
  return bits_to_float(static_cast<uint32_t>(f.value));
}

std::string_view WireReader::as_bytes(const Field& f, const char* name) const {
  if (f.type != WireType::kBytes) wrong_type(f, name, "length-delimited bytes");
  return f.bytes;
}

void WireReader::append_floats(const Field& f, const char* name, std::vector<float>* out) const {
  if (f.type == WireType::kFixed32) {
    out->push_back(as_float(f, name));
    return;
  }
  if (f.type != WireType::kBytes) wrong_type(f, name, "floats (fixed32 or packed)");
  if (f.bytes.size() % 4 != 0) {
    fail<IoError>(what_, ": field '", name, "' at byte ", f.offset, " packs ", f.bytes.size(),
                  " bytes, not a whole number of 4-byte floats; the record is damaged");
  }
  const size_t n = f.bytes.size() / 4;
  out->reserve(out->size() + n);
  for (size_t i = 0; i < n; ++i) out->push_back(bits_to_float(load_le32(f.bytes.data() + 4 * i)));
}

void WireReader::append_doubles(const Field& f, const char* name, std::vector<double>* out) const {
  if (f.type == WireType::kFixed64) {
    out->push_back(bits_to_double(f.value));
    return;
  }
  if (f.type != WireType::kBytes) wrong_type(f, name, "doubles (fixed64 or packed)");
  if (f.bytes.size() % 8 != 0) {
    fail<IoError>(what_, ": field '", name, "' at byte ", f.offset, " packs ", f.bytes.size(),
                  " bytes, not a whole number of 8-byte doubles; the record is damaged");
  }
  const size_t n = f.bytes.size() / 8;
  out->reserve(out->size() + n);
  for (size_t i = 0; i < n; ++i) out->push_back(bits_to_double(load_le64(f.bytes.data() + 8 * i)));
}

void WireReader::append_ints(const Field& f, const char* name, std::vector<int64_t>* out) const {
  if (f.type == WireType::kVarint) {
    out->push_back(static_cast<int64_t>(f.value));
    return;
  }
  if (f.type != WireType::kBytes) wrong_type(f, name, "integers (varint or packed)");
  WireReader packed(f.bytes, what_ + " (packed field '" + name + "')", base_ + static_cast<size_t>(f.value));
  size_t pos = 0;
  while (pos < f.bytes.size()) out->push_back(static_cast<int64_t>(packed.varint(&pos, name)));
}

WireReader WireReader::message(const Field& f, const char* name) const {
  const std::string_view bytes = as_bytes(f, name);
  return WireReader(bytes, what_, base_ + static_cast<size_t>(f.value));
}

// ---- writing ----

void WireWriter::raw_varint(uint64_t v) {
  while (v >= 0x80) {
    out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out_.push_back(static_cast<char>(v));
}

void WireWriter::tag(uint32_t number, WireType type) {
  raw_varint((static_cast<uint64_t>(number) << 3) | static_cast<uint64_t>(type));
}

void WireWriter::put_varint(uint32_t number, uint64_t v) {
  tag(number, WireType::kVarint);
  raw_varint(v);
}

void WireWriter::put_float(uint32_t number, float v) {
  tag(number, WireType::kFixed32);
  uint32_t b;
  std::memcpy(&b, &v, 4);
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((b >> (8 * i)) & 0xff));
}

void WireWriter::put_double(uint32_t number, double v) {
  tag(number, WireType::kFixed64);
  uint64_t b;
  std::memcpy(&b, &v, 8);
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((b >> (8 * i)) & 0xff));
}

void WireWriter::put_bytes(uint32_t number, std::string_view bytes) {
  tag(number, WireType::kBytes);
  raw_varint(bytes.size());
  out_.append(bytes.data(), bytes.size());
}

void WireWriter::put_packed_floats(uint32_t number, const float* v, size_t n) {
  tag(number, WireType::kBytes);
  raw_varint(uint64_t{4} * n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, &v[i], 4);
    for (int k = 0; k < 4; ++k) out_.push_back(static_cast<char>((b >> (8 * k)) & 0xff));
  }
}

void WireWriter::put_packed_doubles(uint32_t number, const double* v, size_t n) {
  tag(number, WireType::kBytes);
  raw_varint(uint64_t{8} * n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t b;
    std::memcpy(&b, &v[i], 8);
    for (int k = 0; k < 8; ++k) out_.push_back(static_cast<char>((b >> (8 * k)) & 0xff));
  }
}

void WireWriter::put_packed_ints(uint32_t number, const int64_t* v, size_t n) {
  WireWriter body;
  for (size_t i = 0; i < n; ++i) body.raw_varint(static_cast<uint64_t>(v[i]));
  put_bytes(number, body.str());
}

}  // namespace strata::protobuf
