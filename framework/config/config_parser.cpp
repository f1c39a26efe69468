// The prototxt (protobuf text format) parser: text in, ConfigNode tree out.
//
// Every syntax error is meant for someone editing a prototxt by hand, so each
// says what was expected, what was found, and where (file:line:col).
#include "framework/config/config.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "framework/error.h"

namespace strata {

namespace config_detail {
// Defined in config.cpp next to the number grammar it depends on.
bool is_bare_token(const std::string& text);
}  // namespace config_detail

namespace {

// Bounds recursion so a hostile or broken file cannot overflow the stack.
constexpr int kMaxDepth = 1000;

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_quote(char c) { return c == '"' || c == '\''; }
// Characters that end a bare token (number or identifier).
bool is_delim(char c) { return is_space(c) || std::strchr("{}<>[]:,;#\"'", c) != nullptr; }

class Parser {
 public:
  Parser(const std::string& text, std::shared_ptr<const std::string> file)
      : s_(text), file_(std::move(file)) {
    if (s_.compare(0, 3, "\xEF\xBB\xBF") == 0) pos_ = 3;  // editors on Windows add a BOM
    // UTF-16 (Windows' "Unicode"): a byte-order mark, or a NUL in every other
    // byte of the first line. Said as such, not as a stray byte at 1:1.
    const bool bom16 = s_.compare(0, 2, "\xFF\xFE") == 0 || s_.compare(0, 2, "\xFE\xFF") == 0;
    const bool nul = s_.find('\0') != std::string::npos && s_.find('\0') < 64;
    if (bom16 || nul) {
      fail<ConfigError>(*file_, ": the file is ", bom16 ? "UTF-16 (it starts with a UTF-16 byte-order mark)"
                                                      : "not text (it holds NUL bytes; UTF-16?)",
                        "; save it as UTF-8 (plain text)");
    }
  }

  ConfigNode parse_root() {
    ConfigNode root = ConfigNode::block("", here());
    parse_entries(root, '\0', 0);
    return root;
  }

 private:
  bool eof() const { return pos_ >= s_.size(); }
  char peek() const { return s_[pos_]; }
  SourceLocation here() const { return SourceLocation{file_, line_, col_}; }

  // A line ends at \n, \r\n, or a lone \r (old Mac files).
  bool at_line_end() const {
    return peek() == '\n' || (peek() == '\r' && (pos_ + 1 >= s_.size() || s_[pos_ + 1] != '\n'));
  }

  void advance() {
    const bool line_end = at_line_end();
    ++pos_;
    if (line_end) {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
  }

  template <typename... Args>
  [[noreturn]] void error_at(const SourceLocation& loc, Args&&... args) const {
    fail<ConfigError>(loc.str(), ": ", std::forward<Args>(args)...);
  }

  void skip_space() {
    while (!eof()) {
      if (is_space(peek())) {
        advance();
      } else if (peek() == '#') {
        while (!eof() && !at_line_end()) advance();
      } else {
        break;
      }
    }
  }

  std::string word() const {
    size_t end = pos_;
    while (end < s_.size() && !is_delim(s_[end])) ++end;
    return s_.substr(pos_, end - pos_);
  }

  // What sits at the current position, phrased for "found ...".
  std::string found() const {
    if (eof()) return "end of file";
    const char c = peek();
    if (is_quote(c)) return "a quoted string";
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') return "end of line";
    if (u < 0x20 || u == 0x7f) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "byte 0x%02X", static_cast<unsigned>(u));
      return buf;
    }
    if (u >= 0x80) return non_ascii();
    if (!is_delim(c)) {
      std::string w = word();
      return "'" + (w.size() > 40 ? w.substr(0, 40) + "..." : w) + "'";
    }
    return std::string("'") + c + "'";
  }

  // The UTF-8 character at the current position, named: keys, numbers and
  // bare words are ASCII, and a character copied from a web page or a word
  // processor (a non-breaking space, typographic quotes) looks like one that is.
  std::string non_ascii() const {
    const auto b = [&](size_t i) { return pos_ + i < s_.size() ? static_cast<unsigned char>(s_[pos_ + i]) : 0u; };
    unsigned cp = 0;
    if ((b(0) & 0xE0) == 0xC0 && (b(1) & 0xC0) == 0x80) {
      cp = ((b(0) & 0x1Fu) << 6) | (b(1) & 0x3Fu);
    } else if ((b(0) & 0xF0) == 0xE0 && (b(1) & 0xC0) == 0x80 && (b(2) & 0xC0) == 0x80) {
      cp = ((b(0) & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
    } else {
      char buf[64];
      std::snprintf(buf, sizeof buf, "byte 0x%02X (not UTF-8 text)", b(0));
      return buf;
    }
    const char* what = cp == 0xA0                      ? " (a non-breaking space: type a plain space)"
                       : cp >= 0x2000 && cp <= 0x200B  ? " (a typographic space: type a plain space)"
                       : cp == 0x3000                  ? " (an ideographic space: type a plain space)"
                       : cp == 0x201C || cp == 0x201D  ? " (a typographic double quote: type \")"
                       : cp == 0x2018 || cp == 0x2019  ? " (a typographic single quote: type ')"
                       : cp == 0xFEFF                  ? " (a byte-order mark inside the file)"
                                                       : " (outside quotes, write keys and values in ASCII)";
    char buf[32];
    std::snprintf(buf, sizeof buf, "the character U+%04X", cp);
    return buf + std::string(what);
  }

  void parse_entries(ConfigNode& block, char closer, int depth) {
    for (;;) {
      skip_space();
      if (eof()) {
        if (closer == '\0') return;
        error_at(here(), "block '", block.key(), "' opened at ", block.loc().str(),
                 " is never closed: expected '", closer, "', found end of file");
      }
      const char c = peek();
      if (c == closer) {
        advance();
        return;
      }
      if (!is_ident_start(c)) {
        if (closer == '\0' && (c == '}' || c == '>')) {
          error_at(here(), "unexpected '", c, "': no block is open here (expected a key or end of file)");
        }
        if (closer == '\0') error_at(here(), "expected a key, found ", found());
        error_at(here(), "expected a key or '", closer, "' closing block '", block.key(), "' opened at ",
                 block.loc().str(), ", found ", found());
      }
      const SourceLocation key_loc = here();
      std::string key;
      while (!eof() && is_ident_char(peek())) key += peek(), advance();
      skip_space();
      if (!eof() && peek() == ':') {
        advance();
        skip_space();
        parse_value(block, key, key_loc, depth);
      } else if (!eof() && (peek() == '{' || peek() == '<')) {
        parse_block(block, key, key_loc, depth);
      } else {
        error_at(here(), "expected ':' or '{' after key '", key, "', found ", found());
      }
      skip_space();
      if (!eof() && (peek() == ',' || peek() == ';')) advance();
    }
  }

  // At '{' or '<'.
  void parse_block(ConfigNode& parent, const std::string& key, const SourceLocation& loc, int depth) {
    if (depth >= kMaxDepth) {
      error_at(here(), "expected blocks nested at most ", kMaxDepth, " deep, found deeper nesting in '",
               key, "'");
    }
    const char closer = peek() == '{' ? '}' : '>';
    advance();
    ConfigNode b = ConfigNode::block(key, loc);
    parse_entries(b, closer, depth + 1);
    parent.add_child(std::move(b));
  }

  // Just after "key:" and any whitespace.
  void parse_value(ConfigNode& parent, const std::string& key, const SourceLocation& loc, int depth) {
    if (!eof() && (peek() == '{' || peek() == '<')) return parse_block(parent, key, loc, depth);
    if (!eof() && peek() == '[') return parse_list(parent, key, depth);
    parent.add_child(parse_scalar(key, loc, "after '" + key + ":'"));
  }

  // `key: [a, b, c]` is shorthand for `key: a key: b key: c`.
  void parse_list(ConfigNode& parent, const std::string& key, int depth) {
    const SourceLocation open = here();
    advance();
    skip_space();
    if (!eof() && peek() == ']') return advance();
    for (;;) {
      skip_space();
      const SourceLocation el = here();
      if (!eof() && (peek() == '{' || peek() == '<')) {
        parse_block(parent, key, el, depth);
      } else {
        parent.add_child(parse_scalar(key, el, "in the list for key '" + key + "'"));
      }
      skip_space();
      if (eof()) {
        error_at(here(), "list for key '", key, "' opened at ", open.str(),
                 " is never closed: expected ']', found end of file");
      }
      if (peek() == ']') return advance();
      if (peek() != ',') error_at(here(), "expected ',' or ']' in the list for key '", key, "', found ", found());
      advance();
    }
  }

  ConfigNode parse_scalar(const std::string& key, const SourceLocation& loc, const std::string& where) {
    if (!eof() && is_quote(peek())) {
      std::string text;
      do {  // adjacent literals concatenate, as in C
        text += read_string();
        skip_space();
      } while (!eof() && is_quote(peek()));
      return ConfigNode::scalar(key, std::move(text), true, loc);
    }
    const std::string w = eof() ? std::string() : word();
    if (w.empty()) {
      error_at(here(), "expected a value (number, identifier or quoted string) ", where, ", found ", found());
    }
    if (!config_detail::is_bare_token(w)) {
      // Name the first non-ASCII character (a non-breaking space, a typographic quote) where it is.
      for (size_t i = 0; i < w.size(); ++i) {
        if (static_cast<unsigned char>(w[i]) < 0x80) continue;
        Parser at = *this;
        for (size_t k = 0; k < i; ++k) at.advance();
        error_at(at.here(), "expected a number, identifier or quoted string ", where, ", found ", at.non_ascii());
      }
      error_at(here(), "expected a number, identifier or quoted string ", where, ", found '", w, "'");
    }
    for (size_t k = 0; k < w.size(); ++k) advance();
    return ConfigNode::scalar(key, w, false, loc);
  }

  [[noreturn]] void unterminated(const SourceLocation& start, char q) const {
    error_at(start, "string is never closed: expected a closing ", q, " before the end of the line, found ",
             eof() ? "end of file" : "end of line");
  }

  // One quoted literal with its escapes resolved; at the opening quote.
  std::string read_string() {
    const SourceLocation start = here();
    const char q = peek();
    advance();
    std::string out;
    for (;;) {
      if (eof() || peek() == '\n') unterminated(start, q);
      const SourceLocation esc = here();
      const char c = peek();
      advance();
      if (c == q) return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (eof() || peek() == '\n') unterminated(start, q);
      const char e = peek();
      advance();
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\\': case '\'': case '"': case '?': out += e; break;
        case 'x': case 'X': {
          unsigned v = 0;
          int n = 0;
          for (; n < 2 && !eof() && std::isxdigit(static_cast<unsigned char>(peek())); ++n, advance()) {
            const char h = static_cast<char>(std::tolower(static_cast<unsigned char>(peek())));
            v = v * 16 + static_cast<unsigned>(h <= '9' ? h - '0' : h - 'a' + 10);
          }
          if (n == 0) error_at(here(), "expected hex digits after '\\", e, "' in string, found ", found());
          out += static_cast<char>(v);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            unsigned v = static_cast<unsigned>(e - '0');
            for (int n = 1; n < 3 && !eof() && peek() >= '0' && peek() <= '7'; ++n, advance()) {
              v = v * 8 + static_cast<unsigned>(peek() - '0');
            }
            if (v > 0xff) error_at(esc, "expected an octal escape between \\0 and \\377, found a larger one");
            out += static_cast<char>(v);
            break;
          }
          error_at(esc, "unknown escape sequence '\\", e,
                   "' in string; expected one of \\n \\t \\r \\\\ \\\" \\' \\xHH or octal \\NNN");
      }
    }
  }

  const std::string& s_;
  std::shared_ptr<const std::string> file_;
  size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
};

}  // namespace

ConfigNode parse_config_text(const std::string& text, const std::string& filename) {
  auto file = std::make_shared<const std::string>(filename.empty() ? "<string>" : filename);
  return Parser(text, std::move(file)).parse_root();
}

ConfigNode parse_config_file(const std::string& path) {
  // A device or a pipe (/dev/zero, a FIFO) could be read forever.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    fail<IoError>("config file '", path, "' is not a regular file (a device, pipe or socket); give the path of a "
                  "prototxt file");
  }
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail<IoError>("cannot read config file '", path, "': ", std::strerror(errno));
  std::string text;
  char buf[65536];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, got);
  // A directory opens fine and only fails on read (EISDIR), so check here too.
  const int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (err) fail<IoError>("cannot read config file '", path, "': ", std::strerror(err));
  return parse_config_text(text, path);
}

}  // namespace strata
