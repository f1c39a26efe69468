#include "framework/io/json.h"

#include <charconv>
#include <cmath>
#include <system_error>

namespace strata {

namespace {

constexpr int kMaxDepth = 256;

// Length of the valid UTF-8 sequence starting at s[i] (and its code point in
// *cp), or 0 if the bytes there are not valid UTF-8.
size_t utf8_sequence(std::string_view s, size_t i, uint32_t* cp) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t len;
  uint32_t min;
  uint32_t c;
  if ((b0 & 0xe0) == 0xc0) {
    len = 2, min = 0x80, c = b0 & 0x1fu;
  } else if ((b0 & 0xf0) == 0xe0) {
    len = 3, min = 0x800, c = b0 & 0x0fu;
  } else if ((b0 & 0xf8) == 0xf0) {
    len = 4, min = 0x10000, c = b0 & 0x07u;
  } else {
    return 0;
  }
  if (s.size() - i < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    const uint8_t b = byte(i + k);
    if ((b & 0xc0) != 0x80) return 0;
    c = (c << 6) | (b & 0x3fu);
  }
  if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
  *cp = c;
  return len;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

}  // namespace

namespace detail {

class JsonParser {
 public:
  explicit JsonParser(std::string_view s) : s_(s) {}

  JsonValue parse_document() {
    skip_ws();
    JsonValue v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) error("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& msg) const { error_at(pos_, msg); }

  [[noreturn]] void error_at(size_t at, const std::string& msg) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw JsonError(detail::concat("JSON error at line ", line, ", column ", col, ": ", msg), at);
  }

  std::string describe_here() const {
    if (pos_ >= s_.size()) return "end of input";
    const char c = s_[pos_];
    if (c >= 0x20 && c < 0x7f) return std::string("'") + c + "'";
    return detail::concat("byte 0x", "0123456789abcdef"[(c >> 4) & 0xf],
                          "0123456789abcdef"[c & 0xf]);
  }

  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool consume(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  JsonValue parse_value(int depth) {
    if (pos_ >= s_.size()) error("expected a value, found end of input");
    switch (s_[pos_]) {
      case '{': return parse_object(depth + 1);
      case '[': return parse_array(depth + 1);
      case '"': return JsonValue::string(parse_string());
      case 't': expect_word("true"); return JsonValue::boolean(true);
      case 'f': expect_word("false"); return JsonValue::boolean(false);
      case 'n': expect_word("null"); return JsonValue();
      default: break;
    }
    if (s_[pos_] == '-' || (s_[pos_] >= '0' && s_[pos_] <= '9')) return parse_number();
    error("expected a value, found " + describe_here());
  }

  void expect_word(const char* word) {
    const std::string_view w(word);
    if (s_.substr(pos_, w.size()) != w)
      error("invalid literal (expected '" + std::string(w) + "')");
    pos_ += w.size();
  }

  JsonValue parse_object(int depth) {
    if (depth > kMaxDepth) error("nesting deeper than 256 levels");
    ++pos_;  // '{'
    JsonValue::Object members;
    skip_ws();
    if (consume('}')) return JsonValue::object(std::move(members));
    for (;;) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') {
        error("expected a string key, found " + describe_here());
      }
      std::string key = parse_string();
      skip_ws();
      if (!consume(':')) error("expected ':' after object key, found " + describe_here());
      skip_ws();
      JsonValue v = parse_value(depth);
      members.emplace_back(std::move(key), std::move(v));
      skip_ws();
      if (consume('}')) break;
      if (!consume(',')) error("expected ',' or '}' in object, found " + describe_here());
    }
    return JsonValue::object(std::move(members));
  }

  JsonValue parse_array(int depth) {
    if (depth > kMaxDepth) error("nesting deeper than 256 levels");
    ++pos_;  // '['
    JsonValue::Array items;
    skip_ws();
    if (consume(']')) return JsonValue::array(std::move(items));
    for (;;) {
      skip_ws();
      items.push_back(parse_value(depth));
      skip_ws();
      if (consume(']')) break;
      if (!consume(',')) error("expected ',' or ']' in array, found " + describe_here());
    }
    return JsonValue::array(std::move(items));
  }

  uint32_t parse_hex4() {
    if (s_.size() - pos_ < 4) error("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<uint32_t>(c - 'A' + 10);
      } else {
        error_at(pos_ - 1, "invalid hex digit in \\u escape");
      }
    }
    return v;
  }

  std::string parse_string() {
    const size_t start = pos_;
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) error_at(start, "unterminated string");
      const uint8_t c = static_cast<uint8_t>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) error("unescaped control character in string");
      if (c == '\\') {
        ++pos_;
        if (pos_ >= s_.size()) error_at(start, "unterminated string");
        const char e = s_[pos_++];
        switch (e) {
          case '"': out.push_back('"'); break;
          case '\\': out.push_back('\\'); break;
          case '/': out.push_back('/'); break;
          case 'b': out.push_back('\b'); break;
          case 'f': out.push_back('\f'); break;
          case 'n': out.push_back('\n'); break;
          case 'r': out.push_back('\r'); break;
          case 't': out.push_back('\t'); break;
          case 'u': {
            const size_t esc = pos_ - 2;
            uint32_t cp = parse_hex4();
            if (cp >= 0xdc00 && cp <= 0xdfff) error_at(esc, "lone low surrogate in \\u escape");
            if (cp >= 0xd800 && cp <= 0xdbff) {
              if (s_.substr(pos_, 2) != "\\u") error_at(esc, "high surrogate not followed by \\u");
              pos_ += 2;
              const uint32_t lo = parse_hex4();
              if (lo < 0xdc00 || lo > 0xdfff) error_at(esc, "invalid surrogate pair");
              cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            append_utf8(cp, &out);
            break;
          }
          default: error_at(pos_ - 1, "invalid escape character in string");
        }
        continue;
      }
      uint32_t cp;
      const size_t len = utf8_sequence(s_, pos_, &cp);
      if (len == 0) error("invalid UTF-8 in string");
      out.append(s_.data() + pos_, len);
      pos_ += len;
    }
  }

  JsonValue parse_number() {
    const size_t start = pos_;
    const auto digit = [&] { return pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9'; };
    consume('-');
    if (!digit()) error("expected a digit");
    if (s_[pos_] == '0') {
      ++pos_;
      if (digit()) error_at(start, "numbers may not have leading zeros");
    } else {
      while (digit()) ++pos_;
    }
    if (consume('.')) {
      if (!digit()) error("expected a digit after '.'");
      while (digit()) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (!consume('+')) consume('-');
      if (!digit()) error("expected a digit in exponent");
      while (digit()) ++pos_;
    }
    const std::string_view lit = s_.substr(start, pos_ - start);
    double d = 0.0;
    const auto res = std::from_chars(lit.data(), lit.data() + lit.size(), d);
    if (res.ec == std::errc::result_out_of_range) {
      // Only the magnitude is lost: tiny values go to zero, huge ones to infinity.
      bool huge = true;
      const size_t e = lit.find_first_of("eE");
      if (e != std::string_view::npos && lit.substr(e + 1, 1) == "-") huge = false;
      d = huge ? HUGE_VAL : 0.0;
      if (lit[0] == '-') d = -d;
    } else if (res.ec != std::errc() || res.ptr != lit.data() + lit.size()) {
      error_at(start, "invalid number");
    }
    JsonValue v = JsonValue::number(d);
    v.text_ = std::string(lit);
    return v;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace detail

JsonValue JsonValue::boolean(bool b) {
  JsonValue v;
  v.kind_ = Kind::kBool;
  v.bool_ = b;
  return v;
}

JsonValue JsonValue::number(double d) {
  JsonValue v;
  v.kind_ = Kind::kNumber;
  v.number_ = d;
  return v;
}

JsonValue JsonValue::integer(int64_t i) {
  JsonValue v = number(static_cast<double>(i));
  v.text_ = std::to_string(i);  // exact, also beyond 2^53
  return v;
}

JsonValue JsonValue::string(std::string s) {
  JsonValue v;
  v.kind_ = Kind::kString;
  v.text_ = std::move(s);
  return v;
}

JsonValue JsonValue::array(Array items) {
  JsonValue v;
  v.kind_ = Kind::kArray;
  v.array_ = std::move(items);
  return v;
}

JsonValue JsonValue::object(Object members) {
  JsonValue v;
  v.kind_ = Kind::kObject;
  v.object_ = std::move(members);
  return v;
}

const char* JsonValue::kind_name(Kind k) {
  switch (k) {
    case Kind::kNull: return "null";
    case Kind::kBool: return "boolean";
    case Kind::kNumber: return "number";
    case Kind::kString: return "string";
    case Kind::kArray: return "array";
    case Kind::kObject: return "object";
  }
  return "?";
}

#define STRATA_JSON_EXPECT(k) \
  STRATA_CHECK(kind_ == (k), "JSON value is a ", kind_name(kind_), ", not a ", kind_name(k))

bool JsonValue::as_bool() const {
  STRATA_JSON_EXPECT(Kind::kBool);
  return bool_;
}
double JsonValue::as_number() const {
  STRATA_JSON_EXPECT(Kind::kNumber);
  return number_;
}
const std::string& JsonValue::as_string() const {
  STRATA_JSON_EXPECT(Kind::kString);
  return text_;
}
const JsonValue::Array& JsonValue::as_array() const {
  STRATA_JSON_EXPECT(Kind::kArray);
  return array_;
}
JsonValue::Array& JsonValue::as_array() {
  STRATA_JSON_EXPECT(Kind::kArray);
  return array_;
}
const JsonValue::Object& JsonValue::as_object() const {
  STRATA_JSON_EXPECT(Kind::kObject);
  return object_;
}
JsonValue::Object& JsonValue::as_object() {
  STRATA_JSON_EXPECT(Kind::kObject);
  return object_;
}

#undef STRATA_JSON_EXPECT

bool JsonValue::as_int64(int64_t* out) const {
  if (kind_ != Kind::kNumber || text_.empty()) return false;
  if (text_.find_first_of(".eE") != std::string::npos) return false;
  int64_t v = 0;
  const auto res = std::from_chars(text_.data(), text_.data() + text_.size(), v);
  if (res.ec != std::errc() || res.ptr != text_.data() + text_.size()) return false;
  *out = v;
  return true;
}

const JsonValue* JsonValue::find(const std::string& key) const {
  if (kind_ != Kind::kObject) return nullptr;
  for (const Member& m : object_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

void JsonValue::push_back(JsonValue v) { as_array().push_back(std::move(v)); }

void JsonValue::set(const std::string& key, JsonValue v) {
  for (Member& m : as_object()) {
    if (m.first == key) {
      m.second = std::move(v);
      return;
    }
  }
  object_.emplace_back(key, std::move(v));
}

std::string JsonValue::dump() const {
  std::string out;
  dump_to(&out);
  return out;
}

void JsonValue::dump_to(std::string* out) const {
  switch (kind_) {
    case Kind::kNull: *out += "null"; return;
    case Kind::kBool: *out += bool_ ? "true" : "false"; return;
    case Kind::kNumber: {
      if (!text_.empty()) {
        *out += text_;
      } else if (!std::isfinite(number_)) {
        *out += "null";
      } else {
        char buf[32];
        const auto res = std::to_chars(buf, buf + sizeof(buf), number_);
        out->append(buf, res.ptr);
      }
      return;
    }
    case Kind::kString: json_quote_to(text_, out); return;
    case Kind::kArray: {
      out->push_back('[');
      for (size_t i = 0; i < array_.size(); ++i) {
        if (i) out->push_back(',');
        array_[i].dump_to(out);
      }
      out->push_back(']');
      return;
    }
    case Kind::kObject: {
      out->push_back('{');
      for (size_t i = 0; i < object_.size(); ++i) {
        if (i) out->push_back(',');
        json_quote_to(object_[i].first, out);
        out->push_back(':');
        object_[i].second.dump_to(out);
      }
      out->push_back('}');
      return;
    }
  }
}

JsonValue parse_json(std::string_view text) { return detail::JsonParser(text).parse_document(); }

void json_quote_to(std::string_view s, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if (c >= 0x80) {
      uint32_t cp;
      const size_t len = utf8_sequence(s, i, &cp);
      if (len == 0) {
        *out += "\xef\xbf\xbd";  // U+FFFD
        ++i;
      } else {
        out->append(s.data() + i, len);
        i += len;
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default:
        if (c < 0x20) {
          *out += "\\u00";
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 0xf]);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

std::string json_quote(std::string_view s) {
  std::string out;
  json_quote_to(s, &out);
  return out;
}

bool is_valid_utf8(std::string_view s, size_t* bad_offset) {
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp;
    const size_t len = utf8_sequence(s, i, &cp);
    if (len == 0) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

}  // namespace strata
