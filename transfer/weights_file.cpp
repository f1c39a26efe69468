#include "transfer/weights_file.h"

#include <cstring>
#include <string_view>

#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/io/json.h"

namespace strata::transfer {

SafetensorsReader open_weights_file(const std::string& path, std::map<std::string, std::string>* foreign) {
  std::map<std::string, std::string> ignored;
  if (!foreign) foreign = &ignored;
  try {
    return SafetensorsReader(path);
  } catch (const IoError& e) {
    if (std::string(e.what()).find("unsupported dtype") == std::string::npos) throw;
  }
  const std::string bytes = read_file_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  JsonValue root = parse_json(std::string_view(bytes).substr(8, n));  // the reader parsed it already
  for (JsonValue::Member& m : root.as_object()) {
    if (m.first == "__metadata__" || !m.second.is_object()) continue;
    const JsonValue* dtype = m.second.find("dtype");
    const JsonValue* offsets = m.second.find("data_offsets");
    DType known;
    int64_t begin = 0, end = 0;
    if (!dtype || !dtype->is_string() || dtype_from_safetensors_name(dtype->as_string(), &known) || !offsets ||
        !offsets->is_array() || offsets->as_array().size() != 2 || !offsets->as_array()[0].as_int64(&begin) ||
        !offsets->as_array()[1].as_int64(&end) || end < begin) {
      continue;  // supported, or malformed: the reader reports the latter below
    }
    (*foreign)[m.first] = dtype->as_string();
    JsonValue bytes_entry = JsonValue::object();
    bytes_entry.set("dtype", JsonValue::string("U8"));
    bytes_entry.set("shape", JsonValue::array({JsonValue::integer(end - begin)}));
    bytes_entry.set("data_offsets", JsonValue::array({JsonValue::integer(begin), JsonValue::integer(end)}));
    m.second = std::move(bytes_entry);
  }
  std::string header = root.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  const size_t data_size = bytes.size() - 8 - n;
  std::vector<uint8_t> out(8 + header.size() + data_size);
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(header.size() >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  if (data_size) std::memcpy(out.data() + 8 + header.size(), bytes.data() + 8 + n, data_size);
  return SafetensorsReader::from_buffer(std::move(out), path);
}


}  // namespace strata::transfer
