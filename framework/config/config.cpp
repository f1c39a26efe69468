// ConfigNode accessors, conversions and serialisation for the prototxt
// dialect declared in config.h; the parser itself is in config_parser.cpp.
//
// Every error is meant to be read by someone editing a prototxt by hand, so
// each one says what was expected, what was found, and where (file:line:col).
#include "framework/config/config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "framework/config/config_problems.h"
#include "framework/error.h"

namespace strata {

namespace {

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

bool is_identifier(const std::string& s) {
  if (s.empty() || !is_ident_start(s[0])) return false;
  return std::all_of(s.begin(), s.end(), is_ident_char);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// A number literal as protobuf text format writes it.
struct Number {
  bool ok = false;        // the text is a valid number literal
  bool integral = false;  // decimal or hex integer literal (no '.', exponent or 'f')
  bool int_overflow = false;
  bool double_overflow = false;
  int64_t i = 0;
  double d = 0;
};

// Accumulates |value| into `mag`, flagging anything beyond 2^63 (the largest
// magnitude any int64 can have, reached only by INT64_MIN).
bool accumulate(uint64_t* mag, unsigned digit, unsigned base) {
  constexpr uint64_t kLimit = uint64_t{1} << 63;
  if (*mag > (kLimit - digit) / base) return false;
  *mag = *mag * base + digit;
  return true;
}

Number parse_number(const std::string& s) {
  Number n;
  size_t p = 0;
  bool neg = false;
  if (p < s.size() && (s[p] == '-' || s[p] == '+')) neg = s[p++] == '-';
  const std::string body = s.substr(p);
  const std::string lb = lower(body);
  if (lb == "inf" || lb == "infinity" || lb == "nan") {
    n.ok = true;
    n.d = lb == "nan" ? std::numeric_limits<double>::quiet_NaN()
                      : (neg ? -1 : 1) * std::numeric_limits<double>::infinity();
    return n;
  }
  uint64_t mag = 0;
  bool fits = true;
  double hex_d = 0;  // stays exact-ish past int64, where `mag` gives up
  if (body.size() > 2 && body[0] == '0' && (body[1] == 'x' || body[1] == 'X')) {
    for (size_t k = 2; k < body.size(); ++k) {
      if (!std::isxdigit(static_cast<unsigned char>(body[k]))) return n;
      const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(body[k])));
      const unsigned digit = static_cast<unsigned>(c <= '9' ? c - '0' : c - 'a' + 10);
      fits = fits && accumulate(&mag, digit, 16);
      hex_d = hex_d * 16 + digit;
    }
    n.ok = n.integral = true;
    n.d = neg ? -hex_d : hex_d;
  } else {
    size_t k = 0, digits = 0;
    bool has_point = false, has_exp = false;
    for (; k < body.size() && std::isdigit(static_cast<unsigned char>(body[k])); ++k, ++digits) {
      fits = fits && accumulate(&mag, static_cast<unsigned>(body[k] - '0'), 10);
    }
    if (k < body.size() && body[k] == '.') {
      has_point = true;
      for (++k; k < body.size() && std::isdigit(static_cast<unsigned char>(body[k])); ++k) ++digits;
    }
    if (digits == 0) return n;
    if (k < body.size() && (body[k] == 'e' || body[k] == 'E')) {
      has_exp = true;
      if (++k < body.size() && (body[k] == '+' || body[k] == '-')) ++k;
      const size_t start = k;
      while (k < body.size() && std::isdigit(static_cast<unsigned char>(body[k]))) ++k;
      if (k == start) return n;
    }
    size_t end = k;
    const bool suffix = k < body.size() && (body[k] == 'f' || body[k] == 'F');
    if (suffix) ++k;
    if (k != body.size()) return n;
    n.ok = true;
    n.integral = !has_point && !has_exp && !suffix;
    // from_chars rather than strtod: it ignores the C locale's decimal point.
    const std::string lit = (neg ? "-" : "") + body.substr(0, end);
    const auto r = std::from_chars(lit.data(), lit.data() + lit.size(), n.d);
    if (r.ec == std::errc::result_out_of_range) {
      n.d = std::strtod(lit.c_str(), nullptr);  // tells overflow (HUGE_VAL) from underflow
      n.double_overflow = std::isinf(n.d);
    }
    if (!n.integral) return n;
  }
  constexpr uint64_t kMaxPos = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  n.int_overflow = !fits || (!neg && mag > kMaxPos);
  if (!n.int_overflow) n.i = neg ? static_cast<int64_t>(0 - mag) : static_cast<int64_t>(mag);
  return n;
}

bool is_valid_bare(const std::string& text) { return is_identifier(text) || parse_number(text).ok; }

// Double-quoted with C escapes, so the parser reads back exactly `s`.
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (u < 0x20 || u == 0x7f) {
          // Always three octal digits, so a following digit cannot join the escape.
          char buf[5];
          std::snprintf(buf, sizeof buf, "\\%03o", static_cast<unsigned>(u));
          out += buf;
        } else {
          out += c;  // UTF-8 bytes pass through untouched
        }
    }
  }
  return out + "\"";
}

// "block 'param' at f:4:3", "layer 'conv1' at f:2:1", "the top level of f".
std::string describe(const ConfigNode& b, bool with_loc) {
  if (b.key().empty()) {
    return b.loc().file ? "the top level of " + *b.loc().file : std::string("the top level");
  }
  std::string out = "block '" + b.key() + "'";
  const ConfigNode* name = nullptr;
  int names = 0;
  for (const ConfigNode& c : b.children()) {
    if (c.key() == "name" && !c.is_block()) name = &c, ++names;
  }
  if (names == 1) out = b.key() + " '" + name->text() + "'";
  if (with_loc && b.loc().file) out += " at " + b.loc().str();
  return out;
}

size_t levenshtein(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

void write_node(const ConfigNode& n, int indent, std::string& out) {
  const std::string pad(static_cast<size_t>(std::max(indent, 0)) * 2, ' ');
  if (!n.is_block()) {
    const bool bare = !n.is_quoted() && is_valid_bare(n.text());
    out += pad + n.key() + ": " + (bare ? n.text() : quote(n.text())) + "\n";
  } else if (n.key().empty()) {
    for (const ConfigNode& c : n.children()) write_node(c, indent, out);
  } else if (n.children().empty()) {
    out += pad + n.key() + " {}\n";
  } else {
    out += pad + n.key() + " {\n";
    for (const ConfigNode& c : n.children()) write_node(c, indent + 1, out);
    out += pad + "}\n";
  }
}

}  // namespace

namespace config_detail {
// config_parser.cpp accepts exactly the bare tokens that to_string is willing
// to write unquoted, which keeps parse(to_string(x)) == x.
bool is_bare_token(const std::string& text) { return is_valid_bare(text); }
}  // namespace config_detail

std::string SourceLocation::str() const {
  if (!file) return "<unknown>";
  if (line <= 0) return *file;
  return *file + ":" + std::to_string(line) + ":" + std::to_string(col);
}

ConfigNode ConfigNode::scalar(std::string key, std::string text, bool quoted, SourceLocation loc) {
  ConfigNode n;
  n.key_ = std::move(key);
  n.kind_ = Kind::kScalar;
  n.text_ = std::move(text);
  n.quoted_ = quoted;
  n.loc_ = std::move(loc);
  return n;
}

ConfigNode ConfigNode::block(std::string key, SourceLocation loc) {
  ConfigNode n;
  n.key_ = std::move(key);
  n.loc_ = std::move(loc);
  return n;
}

// ---- scalar conversions ----

namespace {

std::string shown(const ConfigNode& n) { return n.is_quoted() ? quote(n.text()) : "'" + n.text() + "'"; }

template <typename... Args>
[[noreturn]] void fail_value(const ConfigNode& n, Args&&... args) {
  fail<ConfigError>("key '", n.key(), "' at ", n.loc().str(), ": ", std::forward<Args>(args)...);
}

void require_scalar(const ConfigNode& n, const std::string& what) {
  if (n.is_block()) fail_value(n, "expected ", what, " ('", n.key(), ": value'), found a block ('", n.key(), " { ... }')");
}

// Numbers and booleans in protobuf are never quoted; saying so beats a bare "invalid".
void require_unquoted(const ConfigNode& n, const char* what) {
  if (n.is_quoted()) fail_value(n, "expected ", what, ", found the quoted string ", shown(n), " (write it without quotes)");
}

}  // namespace

std::string ConfigNode::as_string() const {
  require_scalar(*this, "a string");
  return text_;
}

double ConfigNode::as_double_or_nonfinite() const {
  require_scalar(*this, "a number");
  require_unquoted(*this, "a number");
  const Number n = parse_number(text_);
  if (!n.ok) fail_value(*this, "expected a number, found ", shown(*this));
  if (n.double_overflow) fail_value(*this, "expected a number within double range, found '", text_, "' (too large)");
  return n.d;
}

double ConfigNode::as_double() const {
  const double d = as_double_or_nonfinite();
  if (!std::isfinite(d)) fail_value(*this, "expected a finite number, found '", text_, "'");
  return d;
}

int64_t ConfigNode::as_int() const {
  require_scalar(*this, "an integer");
  require_unquoted(*this, "an integer");
  const Number n = parse_number(text_);
  if (!n.ok) fail_value(*this, "expected an integer, found ", shown(*this));
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  if (n.integral) {
    if (!n.int_overflow) return n.i;
  } else if (std::isnan(n.d)) {
    fail_value(*this, "expected an integer, found '", text_, "'");
  } else if (n.d != std::trunc(n.d)) {
    fail_value(*this, "expected an integer, found '", text_, "' (it has a fractional part)");
  } else if (n.d >= -0x1p63 && n.d < 0x1p63) {
    return static_cast<int64_t>(n.d);  // float literals naming a whole number: 2.0, 1e3
  }
  fail_value(*this, "expected an integer between ", kMin, " and ", kMax, ", found '", text_, "' (out of range)");
}

bool ConfigNode::as_bool() const {
  require_scalar(*this, "a boolean");
  require_unquoted(*this, "a boolean");
  if (text_ == "true" || text_ == "True" || text_ == "1") return true;
  if (text_ == "false" || text_ == "False" || text_ == "0") return false;
  fail_value(*this, "expected a boolean (true/false, True/False or 1/0), found ", shown(*this));
}

std::string ConfigNode::as_enum(const std::vector<std::string>& allowed) const {
  require_scalar(*this, "one of " + join(allowed, ", "));
  if (std::find(allowed.begin(), allowed.end(), text_) != allowed.end()) return text_;
  const std::string near = nearest_key(text_, allowed);
  fail_value(*this, "expected one of ", join(allowed, ", "), ", found ", shown(*this),
             near.empty() ? "" : "; did you mean '" + near + "'?");
}

// ---- block access ----

bool ConfigNode::has(const std::string& key) const { return count(key) > 0; }

int ConfigNode::count(const std::string& key) const {
  return static_cast<int>(std::count_if(children_.begin(), children_.end(),
                                        [&](const ConfigNode& c) { return c.key_ == key; }));
}

std::vector<const ConfigNode*> ConfigNode::all(const std::string& key) const {
  std::vector<const ConfigNode*> out;
  for (const ConfigNode& c : children_) {
    if (c.key_ == key) out.push_back(&c);
  }
  return out;
}

const ConfigNode* ConfigNode::find(const std::string& key) const {
  const std::vector<const ConfigNode*> hits = all(key);
  if (hits.empty()) return nullptr;
  if (hits.size() > 1) {
    std::string where;
    for (size_t i = 0; i < hits.size(); ++i) {
      where += (i == 0 ? "" : i + 1 == hits.size() ? " and " : ", ") + hits[i]->loc().str();
    }
    fail<ConfigError>("key '", key, "' given ", hits.size(), " times in ", describe(*this, false), " (at ",
                      where, "); expected once");
  }
  return hits[0];
}

const ConfigNode& ConfigNode::block(const std::string& key) const {
  static const ConfigNode empty;
  const ConfigNode* n = find(key);
  if (!n) return empty;
  if (!n->is_block()) fail_value(*n, "expected a block ('", key, " { ... }'), found the value ", shown(*n));
  return *n;
}

namespace {
const ConfigNode& require(const ConfigNode& b, const std::string& key) {
  const ConfigNode* n = b.find(key);
  if (!n) fail<ConfigError>("missing required key '", key, "' in ", describe(b, true), " (expected '", key, ": ...')");
  return *n;
}
}  // namespace

std::string ConfigNode::get_string(const std::string& key) const { return require(*this, key).as_string(); }
std::string ConfigNode::get_string(const std::string& key, const std::string& def) const {
  const ConfigNode* n = find(key);
  return n ? n->as_string() : def;
}
double ConfigNode::get_double(const std::string& key) const { return require(*this, key).as_double(); }
double ConfigNode::get_double(const std::string& key, double def) const {
  const ConfigNode* n = find(key);
  return n ? n->as_double() : def;
}
int64_t ConfigNode::get_int(const std::string& key) const { return require(*this, key).as_int(); }
int64_t ConfigNode::get_int(const std::string& key, int64_t def) const {
  const ConfigNode* n = find(key);
  return n ? n->as_int() : def;
}
bool ConfigNode::get_bool(const std::string& key, bool def) const {
  const ConfigNode* n = find(key);
  return n ? n->as_bool() : def;
}
std::string ConfigNode::get_enum(const std::string& key, const std::vector<std::string>& allowed,
                                 const std::string& def) const {
  const ConfigNode* n = find(key);
  return n ? n->as_enum(allowed) : def;
}

std::vector<std::string> ConfigNode::get_strings(const std::string& key) const {
  std::vector<std::string> out;
  for (const ConfigNode* n : all(key)) out.push_back(n->as_string());
  return out;
}
std::vector<double> ConfigNode::get_doubles(const std::string& key) const {
  std::vector<double> out;
  for (const ConfigNode* n : all(key)) out.push_back(n->as_double());
  return out;
}
std::vector<int64_t> ConfigNode::get_ints(const std::string& key) const {
  std::vector<int64_t> out;
  for (const ConfigNode* n : all(key)) out.push_back(n->as_int());
  return out;
}

void ConfigNode::check_keys(const std::vector<std::string>& known, const std::string& context) const {
  // Every unknown key of the block in one error (framework/config/config_problems.h).
  ConfigProblems problems;
  const std::string where = context.empty() ? describe(*this, false) : context;
  for (const ConfigNode& c : children_) {
    if (std::find(known.begin(), known.end(), c.key_) != known.end()) continue;
    const std::string near = nearest_key(c.key_, known);
    problems.add(detail::concat("unknown key '", c.key_, "' in ", where, " at ", c.loc_.str(),
                                near.empty() ? "" : "; did you mean '" + near + "'?",
                                known.empty() ? " (this block takes no keys)"
                                              : " (known keys: " + join(known, ", ") + ")"));
  }
  problems.throw_if_any(where);
}

std::string ConfigNode::to_string(int indent) const {
  std::string out;
  write_node(*this, indent, out);
  return out;
}

std::string nearest_key(const std::string& key, const std::vector<std::string>& candidates) {
  // Case-insensitive distance, so "max" still finds "MAX"; exact-case distance
  // breaks ties.
  const size_t limit = std::max<size_t>(2, key.size() / 3);
  const std::string lkey = lower(key);
  std::string best;
  size_t best_d = SIZE_MAX, best_exact = SIZE_MAX;
  for (const std::string& c : candidates) {
    const size_t d = levenshtein(lkey, lower(c));
    // A candidate that shares nothing with the key is noise, not a suggestion.
    if (d > limit || (d > 0 && d >= std::max(key.size(), c.size()))) continue;
    const size_t exact = levenshtein(key, c);
    if (d < best_d || (d == best_d && exact < best_exact)) best = c, best_d = d, best_exact = exact;
  }
  return best;
}

}  // namespace strata
