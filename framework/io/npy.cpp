#include "framework/io/npy.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string_view>

#include "framework/io/file_util.h"

// Array bytes are stored little-endian and copied without swapping.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "npy IO assumes a little-endian host");

namespace strata {

namespace {

constexpr uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr const char* kSupported =
    "'<f4', '<f8' (read as float32), '<f2', '<i4', '<i8' (read as int32), '|u1', "
    "'|b1' (read as uint8)";

// The subset of Python literal syntax that numpy writes in .npy headers
// (repr of a dict of str, bool and tuples of int), plus lists and None so that
// headers of unsupported arrays still parse and get a precise error.
struct PyValue {
  enum class Kind { kStr, kBool, kNone, kInt, kTuple, kList, kDict };
  Kind kind = Kind::kNone;
  std::string str;
  bool b = false;
  int64_t i = 0;
  std::vector<PyValue> items;                            // tuple, list
  std::vector<std::pair<std::string, PyValue>> members;  // dict (string keys)
};

class HeaderParser {
 public:
  HeaderParser(std::string_view s, const std::string& what) : s_(s), what_(what) {}

  PyValue parse() {
    skip_ws();
    PyValue v = value(0);
    skip_ws();
    if (pos_ != s_.size()) error("unexpected text after the dict");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& msg) const {
    std::string shown(s_.substr(0, 200));
    while (!shown.empty() && (shown.back() == ' ' || shown.back() == '\n')) shown.pop_back();
    fail<IoError>(what_, ": cannot parse .npy header (", msg, " at character ", pos_ + 1,
                  "): ", shown);
  }

  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool consume(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  bool word(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }

  // Parses the items of a tuple/list/dict after the opening bracket, up to
  // `close`; Python allows a trailing comma.
  template <typename F>
  void sequence(char close, F item) {
    if (consume(close)) return;
    for (;;) {
      skip_ws();
      item();
      if (consume(close)) return;
      if (!consume(',')) error(std::string("expected ',' or '") + close + "'");
      if (consume(close)) return;
    }
  }

  PyValue value(int depth) {
    if (depth > 32) error("nesting too deep");
    skip_ws();
    if (pos_ >= s_.size()) error("unexpected end");
    PyValue v;
    const char c = s_[pos_];
    if (c == '\'' || c == '"') {
      v.kind = PyValue::Kind::kStr;
      v.str = string_literal();
    } else if (word("True") || word("False")) {
      v.kind = PyValue::Kind::kBool;
      v.b = s_[pos_ - 1] == 'e' && s_[pos_ - 2] == 'u';
    } else if (word("None")) {
      v.kind = PyValue::Kind::kNone;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = PyValue::Kind::kInt;
      v.i = integer();
    } else if (c == '(' || c == '[') {
      ++pos_;
      v.kind = c == '(' ? PyValue::Kind::kTuple : PyValue::Kind::kList;
      sequence(c == '(' ? ')' : ']', [&] { v.items.push_back(value(depth + 1)); });
    } else if (c == '{') {
      ++pos_;
      v.kind = PyValue::Kind::kDict;
      sequence('}', [&] {
        if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"'))
          error("expected a string key");
        std::string key = string_literal();
        if (!consume(':')) error("expected ':'");
        v.members.emplace_back(std::move(key), value(depth + 1));
      });
    } else {
      error("unexpected character");
    }
    return v;
  }

  std::string string_literal() {
    const char quote = s_[pos_++];
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) error("unterminated string");
      char c = s_[pos_++];
      if (c == quote) return out;
      if (c == '\\') {
        if (pos_ >= s_.size()) error("unterminated string");
        c = s_[pos_++];
      }
      out.push_back(c);
    }
  }

  int64_t integer() {
    const bool neg = s_[pos_] == '-';
    if (neg) ++pos_;
    if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') error("expected a digit");
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      if (v > (uint64_t{1} << 62)) error("integer too large");
      v = v * 10 + static_cast<uint64_t>(s_[pos_++] - '0');
    }
    if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;  // Python 2 long, in old files
    const int64_t i = static_cast<int64_t>(v);
    return neg ? -i : i;
  }

  std::string_view s_;
  const std::string& what_;
  size_t pos_ = 0;
};

struct DescrInfo {
  DType out;          // what we hand back
  size_t file_size;   // bytes per element in the file
  const char* numpy;  // numpy's name for messages
};

bool lookup_descr(const std::string& descr, DescrInfo* info) {
  if (descr.size() < 3) return false;
  const char order = descr[0];
  const std::string code = descr.substr(1);
  const bool one_byte = code == "u1" || code == "b1";
  // Byte order is meaningless for single bytes; numpy writes '|' there.
  if (one_byte ? (order != '|' && order != '<' && order != '=') : (order != '<' && order != '=')) {
    return false;
  }
  if (code == "f4")
    *info = {DType::kF32, 4, "float32"};
  else if (code == "f8")
    *info = {DType::kF32, 8, "float64"};
  else if (code == "f2")
    *info = {DType::kF16, 2, "float16"};
  else if (code == "i4")
    *info = {DType::kI32, 4, "int32"};
  else if (code == "i8")
    *info = {DType::kI32, 8, "int64"};
  else if (code == "u1")
    *info = {DType::kU8, 1, "uint8"};
  else if (code == "b1")
    *info = {DType::kU8, 1, "bool"};
  else
    return false;
  return true;
}

std::string py_shape(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '(';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) os << ',';
  os << ')';
  return os.str();
}

const char* descr_for(DType t) {
  switch (t) {
    case DType::kF32: return "<f4";
    case DType::kF16: return "<f2";
    case DType::kI32: return "<i4";
    case DType::kU8: return "|u1";
    case DType::kBF16: return nullptr;
  }
  return nullptr;
}

void convert_data(const uint8_t* src, const DescrInfo& info, int64_t numel, const std::string& what,
                  std::vector<uint8_t>* out) {
  const size_t n = static_cast<size_t>(numel);
  out->resize(n * dtype_size(info.out));
  uint8_t* dst = out->data();
  const std::string numpy = info.numpy;
  if (numpy == "float64") {
    for (size_t k = 0; k < n; ++k) {
      double d;
      std::memcpy(&d, src + 8 * k, 8);
      // Out-of-range double -> float is undefined behaviour; NumPy gives inf.
      const float inf = std::numeric_limits<float>::infinity();
      const float f = std::isfinite(d) && std::fabs(d) > std::numeric_limits<float>::max()
                          ? (d > 0 ? inf : -inf)
                          : static_cast<float>(d);
      std::memcpy(dst + 4 * k, &f, 4);
    }
  } else if (numpy == "int64") {
    for (size_t k = 0; k < n; ++k) {
      int64_t v;
      std::memcpy(&v, src + 8 * k, 8);
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
        fail<IoError>(what, ": int64 element ", k, " (value ", v,
                      ") does not fit in int32; only int32-range values can be loaded");
      }
      const int32_t i = static_cast<int32_t>(v);
      std::memcpy(dst + 4 * k, &i, 4);
    }
  } else if (numpy == "bool") {
    for (size_t k = 0; k < n; ++k) dst[k] = src[k] ? 1 : 0;
  } else if (n > 0) {
    std::memcpy(dst, src, n * info.file_size);
  }
}

}  // namespace

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

NpyArray read_npy_buffer(const uint8_t* bytes, size_t size, const std::string& what) {
  if (size < sizeof(kMagic) || std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0) {
    fail<IoError>(what, ": not a .npy file (it does not start with the magic \"\\x93NUMPY\")");
  }
  if (size < 8) fail<IoError>(what, ": truncated .npy header (file has only ", size, " bytes)");
  const int major = bytes[6], minor = bytes[7];
  if (major < 1 || major > 3 || minor != 0) {
    fail<IoError>(what, ": unsupported .npy format version ", major, ".", minor,
                  " (supported: 1.0, 2.0, 3.0)");
  }
  const size_t len_bytes = major == 1 ? 2 : 4;
  const size_t header_start = 8 + len_bytes;
  if (size < header_start) {
    fail<IoError>(what, ": truncated .npy header (file has only ", size, " bytes)");
  }
  size_t hlen = 0;
  for (size_t k = len_bytes; k-- > 0;) hlen = (hlen << 8) | bytes[8 + k];
  if (hlen > size - header_start) {
    fail<IoError>(what, ": truncated .npy header (header length field says ", hlen,
                  " bytes, but only ", size - header_start, " follow)");
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes + header_start), hlen);
  const PyValue dict = HeaderParser(text, what).parse();
  if (dict.kind != PyValue::Kind::kDict) {
    fail<IoError>(what, ": .npy header is not a dict: ", text.substr(0, 200));
  }
  const PyValue* descr = nullptr;
  const PyValue* fortran = nullptr;
  const PyValue* shape_v = nullptr;
  for (const auto& [key, v] : dict.members) {
    const PyValue** slot = key == "descr"           ? &descr
                           : key == "fortran_order" ? &fortran
                           : key == "shape"         ? &shape_v
                                                    : nullptr;
    if (!slot) fail<IoError>(what, ": .npy header has unexpected key '", key, "'");
    if (*slot) fail<IoError>(what, ": .npy header has key '", key, "' twice");
    *slot = &v;
  }
  for (const auto& [name, v] : {std::pair<const char*, const PyValue*>{"descr", descr},
                                {"fortran_order", fortran},
                                {"shape", shape_v}}) {
    if (!v) fail<IoError>(what, ": .npy header has no '", name, "'");
  }
  if (fortran->kind != PyValue::Kind::kBool) {
    fail<IoError>(what, ": .npy header 'fortran_order' must be True or False");
  }
  NpyArray arr;
  if (shape_v->kind != PyValue::Kind::kTuple)
    fail<IoError>(what, ": .npy header 'shape' must be a tuple");
  for (const PyValue& d : shape_v->items) {
    if (d.kind != PyValue::Kind::kInt || d.i < 0) {
      fail<IoError>(what, ": .npy header 'shape' must hold non-negative integers");
    }
    arr.shape.push_back(d.i);
  }
  if (descr->kind != PyValue::Kind::kStr) {
    fail<IoError>(what, ": unsupported dtype (structured arrays are not supported; supported: ",
                  kSupported, ")");
  }
  DescrInfo info{};
  if (!lookup_descr(descr->str, &info)) {
    DescrInfo le{};
    if (descr->str.size() >= 3 && descr->str[0] == '>' &&
        lookup_descr("<" + descr->str.substr(1), &le)) {
      fail<IoError>(what, ": array is big-endian ('", descr->str,
                    "'); convert it in Python with arr.astype('<", descr->str.substr(1),
                    "') and save again");
    }
    fail<IoError>(what, ": unsupported dtype '", descr->str, "' (supported: ", kSupported, ")");
  }
  arr.dtype = info.out;
  // Fortran order only changes the layout when two or more dims exceed 1.
  int big_dims = 0;
  for (int64_t d : arr.shape) big_dims += d > 1;
  if (fortran->b && big_dims > 1) {
    fail<IoError>(what, ": array of shape ", py_shape(arr.shape),
                  " is stored in Fortran order; save np.ascontiguousarray(arr) instead");
  }
  uint64_t expected = info.file_size;
  for (int64_t d : arr.shape) {
    if (__builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected)) {
      fail<IoError>(what, ": shape ", py_shape(arr.shape), " is too large");
    }
  }
  const size_t have = size - header_start - hlen;
  if (have < expected) {
    fail<IoError>(what, ": expected ", expected, " bytes of data for shape ", py_shape(arr.shape),
                  " ", info.numpy, ", file has ", have);
  }
  if (have > expected) {
    fail<IoError>(what, ": ", have - expected, " unexpected bytes after the ", expected,
                  " bytes of data for shape ", py_shape(arr.shape), " ", info.numpy,
                  " (corrupt file or wrong header?)");
  }
  convert_data(bytes + header_start + hlen, info, static_cast<int64_t>(expected / info.file_size),
               what, &arr.data);
  return arr;
}

NpyArray read_npy_buffer(const std::vector<uint8_t>& bytes, const std::string& what) {
  return read_npy_buffer(bytes.data(), bytes.size(), what);
}

NpyArray read_npy(const std::string& path) {
  const std::string bytes = read_file_bytes(path);
  return read_npy_buffer(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

void write_npy(const std::string& path, DType dtype, const std::vector<int64_t>& shape,
               const void* data) {
  const char* descr = descr_for(dtype);
  if (!descr) {
    fail<IoError>(path, ": ", dtype_name(dtype),
                  " has no NumPy dtype; convert to f32 before writing .npy");
  }
  uint64_t nbytes = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0) fail<IoError>(path, ": negative dimension in shape ", py_shape(shape));
    if (__builtin_mul_overflow(nbytes, static_cast<uint64_t>(d), &nbytes)) {
      fail<IoError>(path, ": shape ", py_shape(shape), " is too large");
    }
  }
  if (nbytes > 0 && !data) fail<IoError>(path, ": no data given for shape ", py_shape(shape));

  // Same text as numpy.lib.format._write_array_header, including the spaces it
  // reserves so the first dimension can grow in place.
  std::string dict = std::string("{'descr': '") + descr +
                     "', 'fortran_order': False, 'shape': " + py_shape(shape) + ", }";
  if (!shape.empty()) dict.append(21 - std::to_string(shape[0]).size(), ' ');
  // Pad so prefix + header + '\n' is a multiple of 64 (numpy always adds at
  // least one space, hence 64 rather than 0 when already aligned).
  const auto wrap = [&](size_t prefix_len) {
    const size_t padlen = 64 - (prefix_len + dict.size() + 1) % 64;
    return dict + std::string(padlen, ' ') + "\n";
  };
  std::string header = wrap(10);
  // Headers over 64 KiB (absurdly many dims) need the 4-byte length of v2.0.
  const bool v2 = header.size() > 0xffff;
  if (v2) header = wrap(12);
  std::string prefix(reinterpret_cast<const char*>(kMagic), sizeof(kMagic));
  prefix.push_back(static_cast<char>(v2 ? 2 : 1));
  prefix.push_back(0);
  for (size_t k = 0; k < (v2 ? 4u : 2u); ++k) {
    prefix.push_back(static_cast<char>((header.size() >> (8 * k)) & 0xff));
  }

  write_file_atomically(path, [&](std::FILE* f) {
    fwrite_checked(f, prefix.data(), prefix.size());
    fwrite_checked(f, header.data(), header.size());
    fwrite_checked(f, data, static_cast<size_t>(nbytes));
  });
}

}  // namespace strata
