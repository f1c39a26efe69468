// A small strict JSON (RFC 8259) value, parser and writer, with no external
// dependencies. Used for safetensors headers and JSON-lines logs.
//
// Objects keep their members in file order and keep duplicate keys, so that
// callers with stricter rules (e.g. safetensors tensor names) can report them.
// Numbers keep their literal text, so integers beyond 2^53 (byte offsets in
// large files) are read back exactly with as_int64().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/error.h"

namespace strata {

namespace detail {
class JsonParser;
}

// Malformed JSON text. offset() is the byte position of the problem; the
// message gives it as "line L, column C".
class JsonError : public Error {
 public:
  JsonError(const std::string& what, size_t offset) : Error(what), offset_(offset) {}
  size_t offset() const { return offset_; }

 private:
  size_t offset_;
};

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  using Array = std::vector<JsonValue>;
  using Member = std::pair<std::string, JsonValue>;
  using Object = std::vector<Member>;

  JsonValue() = default;  // null
  static JsonValue boolean(bool b);
  static JsonValue number(double d);
  static JsonValue integer(int64_t i);
  static JsonValue string(std::string s);
  static JsonValue array(Array items = {});
  static JsonValue object(Object members = {});

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_number() const { return kind_ == Kind::kNumber; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }

  // Accessors throw Error if the value is of another kind.
  bool as_bool() const;
  double as_number() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();
  // True (and sets *out) only for a number written as an integer literal
  // (no fraction or exponent) that fits in int64.
  bool as_int64(int64_t* out) const;

  // First member named `key`, or nullptr (also for non-objects).
  const JsonValue* find(const std::string& key) const;
  // Appends to an array / sets (replacing an existing member) in an object.
  void push_back(JsonValue v);
  void set(const std::string& key, JsonValue v);

  // Compact text with no whitespace, in member order (same bytes as serde_json
  // and Python's json.dumps(separators=(',', ':'), ensure_ascii=False)).
  // Non-finite numbers, which JSON cannot express, are written as null.
  std::string dump() const;
  void dump_to(std::string* out) const;

  static const char* kind_name(Kind k);

 private:
  friend class detail::JsonParser;

  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  double number_ = 0.0;
  std::string text_;  // string contents, or a number's literal text
  Array array_;
  Object object_;
};

// Parses exactly one JSON value (surrounding whitespace allowed). Rejects
// invalid UTF-8, lone surrogates, control characters in strings, trailing
// commas, leading zeros, NaN/Infinity, and nesting deeper than 256.
JsonValue parse_json(std::string_view text);

// `s` as a quoted JSON string literal, escaping as serde_json does: \" \\ \b
// \f \n \r \t, other control characters as \u00XX, everything else raw UTF-8.
// Invalid UTF-8 bytes become U+FFFD so the output is always valid JSON.
std::string json_quote(std::string_view s);
void json_quote_to(std::string_view s, std::string* out);

// Checks UTF-8 strictly (no overlongs, surrogates or code points > U+10FFFF).
// On failure sets *bad_offset (if given) to the first offending byte.
bool is_valid_utf8(std::string_view s, size_t* bad_offset = nullptr);

}  // namespace strata
