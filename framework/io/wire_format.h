// Binary fields for bytes that travel between processes (the rendezvous
// store's protocol, transport and communicator headers, snapshot messages
// between ranks): little-endian integers whatever the machine, and
// length-prefixed byte strings (u64 length, then the bytes). Reading is
// bounds-checked: a truncated input is an Error naming what was being read,
// never a read past the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "framework/error.h"

namespace strata::wire {

// ---- fixed positions (headers of a known size) ----

inline void store_u32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
inline void store_u64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
inline uint32_t load_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
inline uint64_t load_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// ---- appending to a message ----

inline void put_u32(std::string& out, uint32_t v) {
  char b[4];
  store_u32(b, v);
  out.append(b, 4);
}
inline void put_u64(std::string& out, uint64_t v) {
  char b[8];
  store_u64(b, v);
  out.append(b, 8);
}
// u64 length, then the bytes.
inline void put_bytes(std::string& out, const void* data, size_t n) {
  put_u64(out, n);
  out.append(static_cast<const char*>(data), n);
}
inline void put_bytes(std::string& out, std::string_view s) { put_bytes(out, s.data(), s.size()); }

// ---- reading a message in order ----

class Reader {
 public:
  // `what` names the input in errors ("the layer states from rank 2").
  // The bytes must outlive the reader.
  Reader(std::string_view in, std::string what) : in_(in), what_(std::move(what)) {}

  uint32_t u32() { return load_u32(take(4)); }
  uint64_t u64() { return load_u64(take(8)); }
  // A field written by put_bytes.
  std::string bytes() {
    const uint64_t n = u64();
    if (n > in_.size() - pos_) truncated(n);
    return std::string(take(static_cast<size_t>(n)), static_cast<size_t>(n));
  }
  bool done() const { return pos_ == in_.size(); }
  size_t offset() const { return pos_; }

 private:
  const char* take(size_t n) {
    if (n > in_.size() - pos_) truncated(n);
    const char* p = in_.data() + pos_;
    pos_ += n;
    return p;
  }
  [[noreturn]] void truncated(uint64_t wanted) const {
    fail<Error>(what_, ": truncated (", wanted, " more bytes wanted at offset ", pos_, " of ", in_.size(),
                "); the writer and the reader disagree on the format, or the bytes were cut short");
  }

  std::string_view in_;
  std::string what_;
  size_t pos_ = 0;
};

}  // namespace strata::wire
