#include "framework/io/safetensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <sstream>
#include <string_view>

#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/io/json.h"

// Tensor bytes are stored little-endian and handed out without conversion.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors IO assumes a little-endian host");

namespace strata {

namespace {

// The reference implementation refuses larger headers; so do we, which also
// stops a corrupt length from making us parse the weights as JSON.
constexpr uint64_t kMaxHeaderBytes = 100000000;
constexpr const char* kSupported = "F32, F16, BF16, I32, U8";

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

// product(shape) * elem_size, or false on overflow.
bool byte_size(const std::vector<int64_t>& shape, uint64_t elem_size, uint64_t* out) {
  uint64_t n = elem_size;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *out = n;
  return true;
}

struct Entry {
  TensorView view;
  uint64_t begin;
  uint64_t end;
};

}  // namespace

struct SafetensorsReader::Impl {
  std::string path;
  std::vector<uint8_t> owned;  // from_buffer
  void* map = nullptr;         // constructor from a path
  size_t map_size = 0;
  std::vector<TensorView> tensors;
  std::map<std::string, size_t> index;
  std::map<std::string, std::string> metadata;

  ~Impl() {
    if (map) ::munmap(map, map_size);
  }

  void parse(const uint8_t* bytes, size_t size);
  void parse_metadata(const JsonValue& v);
  Entry parse_entry(const std::string& name, const JsonValue& v, uint64_t data_size) const;
  template <typename... Args>
  [[noreturn]] void bad(Args&&... args) const {
    fail<IoError>(path, ": ", std::forward<Args>(args)...);
  }
};

void SafetensorsReader::Impl::parse(const uint8_t* bytes, size_t size) {
  if (size < 8) {
    bad("file is too short to be safetensors (", size,
        " bytes; the header length field alone takes 8)");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kMaxHeaderBytes) {
    bad("header length ", n, " exceeds the format's limit of ", kMaxHeaderBytes,
        " bytes (not a safetensors file?)");
  }
  if (n > size - 8) {
    bad("header length ", n, " goes beyond the end of the file (", size, " bytes; truncated?)");
  }
  const std::string_view header(reinterpret_cast<const char*>(bytes + 8), n);
  if (header.empty() || header[0] != '{') {
    bad("header does not start with '{' (not a safetensors file?)");
  }
  size_t bad_at = 0;
  if (!is_valid_utf8(header, &bad_at))
    bad("header is not valid UTF-8 (at header byte ", bad_at, ")");
  JsonValue root;
  try {
    root = parse_json(header);
  } catch (const JsonError& e) {
    bad("header is not valid JSON: ", e.what());
  }
  if (!root.is_object()) bad("header is not a JSON object");

  const uint8_t* data = bytes + 8 + n;
  const uint64_t data_size = size - 8 - n;
  std::vector<Entry> entries;
  std::set<std::string> seen;
  for (const JsonValue::Member& m : root.as_object()) {
    if (!seen.insert(m.first).second) {
      bad(m.first == "__metadata__" ? "duplicate \"__metadata__\" in header"
                                    : "duplicate tensor name '" + m.first + "' in header");
    }
    if (m.first == "__metadata__") {
      parse_metadata(m.second);
    } else {
      entries.push_back(parse_entry(m.first, m.second, data_size));
    }
  }

  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // The format requires the tensors to tile the data buffer exactly.
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered) {
      bad("tensors '", prev->view.name, "' [", prev->begin, ", ", prev->end, "] and '", e.view.name,
          "' [", e.begin, ", ", e.end, "] overlap in the data buffer");
    }
    if (e.begin > covered) {
      bad("bytes [", covered, ", ", e.begin,
          ") of the data buffer belong to no tensor (the format requires the buffer to be "
          "fully covered)");
    }
    covered = e.end;
    prev = &e;
  }
  if (covered != data_size) {
    bad("the last ", data_size - covered, " bytes of the data buffer (from offset ", covered,
        ") belong to no tensor (the format requires the buffer to be fully covered)");
  }

  tensors.reserve(entries.size());
  for (Entry& e : entries) {
    e.view.data = data + e.begin;
    index.emplace(e.view.name, tensors.size());
    tensors.push_back(std::move(e.view));
  }
}

void SafetensorsReader::Impl::parse_metadata(const JsonValue& v) {
  if (!v.is_object()) {
    bad("\"__metadata__\" must be an object of strings, found a ", JsonValue::kind_name(v.kind()));
  }
  for (const JsonValue::Member& m : v.as_object()) {
    if (!m.second.is_string()) {
      bad("\"__metadata__\" value for key '", m.first, "' must be a string, found a ",
          JsonValue::kind_name(m.second.kind()));
    }
    if (!metadata.emplace(m.first, m.second.as_string()).second) {
      bad("duplicate key '", m.first, "' in \"__metadata__\"");
    }
  }
}

Entry SafetensorsReader::Impl::parse_entry(const std::string& name, const JsonValue& v,
                                           uint64_t data_size) const {
  const std::string t = "tensor '" + name + "'";
  if (!v.is_object()) {
    bad(t, ": entry must be an object with dtype, shape and data_offsets, found a ",
        JsonValue::kind_name(v.kind()));
  }
  std::set<std::string> keys;
  for (const JsonValue::Member& m : v.as_object()) {
    if (!keys.insert(m.first).second) bad(t, ": duplicate key '", m.first, "'");
  }
  const auto field = [&](const char* key, JsonValue::Kind kind) -> const JsonValue& {
    const JsonValue* f = v.find(key);
    if (!f) bad(t, " has no \"", key, "\"");
    if (f->kind() != kind) {
      bad(t, ": \"", key, "\" must be a", kind == JsonValue::Kind::kArray ? "n " : " ",
          JsonValue::kind_name(kind), ", found a ", JsonValue::kind_name(f->kind()));
    }
    return *f;
  };
  Entry e{};
  e.view.name = name;

  const std::string& dtype = field("dtype", JsonValue::Kind::kString).as_string();
  if (!dtype_from_safetensors_name(dtype, &e.view.dtype)) {
    bad("unsupported dtype '", dtype, "' for ", t, " (supported: ", kSupported, ")");
  }

  const JsonValue& shape = field("shape", JsonValue::Kind::kArray);
  for (const JsonValue& d : shape.as_array()) {
    int64_t dim = 0;
    if (!d.as_int64(&dim) || dim < 0) {
      bad(t, ": shape ", shape.dump(), " has dimension ", d.dump(),
          ", which is not a non-negative integer");
    }
    e.view.shape.push_back(dim);
  }

  const JsonValue& offsets = field("data_offsets", JsonValue::Kind::kArray);
  int64_t begin = 0, end = 0;
  if (offsets.as_array().size() != 2 || !offsets.as_array()[0].as_int64(&begin) ||
      !offsets.as_array()[1].as_int64(&end) || begin < 0 || end < 0) {
    bad(t, ": data_offsets ", offsets.dump(), " must be two non-negative integers [begin, end]");
  }
  e.begin = static_cast<uint64_t>(begin);
  e.end = static_cast<uint64_t>(end);
  const std::string offs = detail::concat("data_offsets [", begin, ", ", end, "]");
  if (end < begin) bad(t, ": ", offs, " end before they begin");

  uint64_t expected = 0;
  if (!byte_size(e.view.shape, dtype_size(e.view.dtype), &expected)) {
    bad(t, ": shape ", shape_str(e.view.shape), " is too large");
  }
  if (e.end - e.begin != expected) {
    bad(t, " ", offs, " do not match dtype ", dtype, " and shape ", shape_str(e.view.shape),
        " (expected ", expected, " bytes)");
  }
  if (e.end > data_size) {
    bad(t, " ", offs, " go beyond the end of the data buffer (", data_size,
        " bytes; truncated file?)");
  }
  e.view.nbytes = static_cast<size_t>(expected);
  return e;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : impl_(new Impl) {
  impl_->path = path;
  const OpenedFile file = open_regular_file(path);
  const int fd = file.fd;
  const size_t size = file.size;
  if (size >= 8) {  // shorter files are reported by parse(); mmap rejects length 0
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int saved = errno;
      ::close(fd);
      fail<IoError>("cannot map '", path, "': ", std::strerror(saved));
    }
    impl_->map = p;
    impl_->map_size = size;
  }
  ::close(fd);
  impl_->parse(static_cast<const uint8_t*>(impl_->map), size);
}

SafetensorsReader SafetensorsReader::from_buffer(std::vector<uint8_t> bytes,
                                                 const std::string& what) {
  SafetensorsReader r;
  r.impl_.reset(new Impl);
  r.impl_->path = what;
  r.impl_->owned = std::move(bytes);
  r.impl_->parse(r.impl_->owned.data(), r.impl_->owned.size());
  return r;
}

SafetensorsReader::~SafetensorsReader() = default;
SafetensorsReader::SafetensorsReader(SafetensorsReader&&) noexcept = default;
SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&&) noexcept = default;

const std::vector<TensorView>& SafetensorsReader::tensors() const { return impl_->tensors; }

const TensorView* SafetensorsReader::find(const std::string& name) const {
  const auto it = impl_->index.find(name);
  return it == impl_->index.end() ? nullptr : &impl_->tensors[it->second];
}

const std::map<std::string, std::string>& SafetensorsReader::metadata() const {
  return impl_->metadata;
}

const std::string& SafetensorsReader::path() const { return impl_->path; }

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const auto check_utf8 = [&](const std::string& s, const char* what) {
    if (!is_valid_utf8(s)) fail<IoError>(path, ": ", what, " '", s, "' is not valid UTF-8");
  };
  JsonValue root = JsonValue::object();
  if (!metadata.empty()) {
    JsonValue meta = JsonValue::object();
    for (const auto& [k, v] : metadata) {
      check_utf8(k, "metadata key");
      check_utf8(v, "metadata value");
      meta.as_object().emplace_back(k, JsonValue::string(v));
    }
    root.as_object().emplace_back("__metadata__", std::move(meta));
  }
  std::set<std::string> names;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    check_utf8(t.name, "tensor name");
    if (t.name == "__metadata__")
      fail<IoError>(path, ": '__metadata__' is reserved, not a tensor name");
    if (!names.insert(t.name).second) fail<IoError>(path, ": duplicate tensor name '", t.name, "'");
    JsonValue shape = JsonValue::array();
    for (int64_t d : t.shape) {
      if (d < 0) {
        fail<IoError>(path, ": tensor '", t.name, "' has negative dimension in shape ",
                      shape_str(t.shape));
      }
      shape.push_back(JsonValue::integer(d));
    }
    uint64_t n = 0;
    if (!byte_size(t.shape, dtype_size(t.dtype), &n) || n > uint64_t{INT64_MAX} - offset) {
      fail<IoError>(path, ": tensor '", t.name, "' shape ", shape_str(t.shape), " is too large");
    }
    if (n > 0 && !t.data) fail<IoError>(path, ": tensor '", t.name, "' has no data");
    JsonValue entry = JsonValue::object();
    entry.as_object().emplace_back("dtype", JsonValue::string(dtype_safetensors_name(t.dtype)));
    entry.as_object().emplace_back("shape", std::move(shape));
    entry.as_object().emplace_back(
        "data_offsets", JsonValue::array({JsonValue::integer(static_cast<int64_t>(offset)),
                                          JsonValue::integer(static_cast<int64_t>(offset + n))}));
    root.as_object().emplace_back(t.name, std::move(entry));
    sizes.push_back(n);
    offset += n;
  }
  std::string header = root.dump();
  header.append((8 - header.size() % 8) % 8, ' ');

  write_file_atomically(path, [&](std::FILE* f) {
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
    fwrite_checked(f, len, 8);
    fwrite_checked(f, header.data(), header.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      fwrite_checked(f, tensors[i].data, static_cast<size_t>(sizes[i]));
    }
  });
}

}  // namespace strata
