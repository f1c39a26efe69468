// A parsed protobuf-text-format file (the prototxt dialect): a tree of nodes,
// each keeping the file, line and column it came from, so that every owner
// (Net, layer, solver) can check its own keys and point at the exact spot.
//
//   name: "lenet"            scalar: key, text, quoted?
//   layer {                  block: key, children in file order
//     convolution_param { num_output: 20 }
//   }
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strata {

struct SourceLocation {
  std::shared_ptr<const std::string> file;  // shared by every node of one file
  int line = 0;                             // 1-based
  int col = 0;                              // 1-based
  // "path/to/file.prototxt:12:5" ("<unknown>" when no file was recorded).
  std::string str() const;
};

class ConfigNode {
 public:
  enum class Kind { kScalar, kBlock };

  ConfigNode() = default;  // an empty block, used for absent optional blocks
  static ConfigNode scalar(std::string key, std::string text, bool quoted, SourceLocation loc);
  static ConfigNode block(std::string key, SourceLocation loc);

  const std::string& key() const { return key_; }
  Kind kind() const { return kind_; }
  bool is_block() const { return kind_ == Kind::kBlock; }
  const SourceLocation& loc() const { return loc_; }

  // ---- scalars ----
  // The literal text: string contents with escapes resolved, or the bare token
  // (number, identifier, true/false).
  const std::string& text() const { return text_; }
  bool is_quoted() const { return quoted_; }
  // Conversions; each throws ConfigError naming key, value and location.
  std::string as_string() const;  // quoted or bare identifier
  // A finite number: ints, floats, 1e-4, 0x1F, 1.5f. inf and nan are errors
  // here (no setting means anything with them, and a NaN passes every `<`
  // range check); as_double_or_nonfinite() also takes inf, -inf and nan.
  double as_double() const;
  double as_double_or_nonfinite() const;
  int64_t as_int() const;         // rejects fractions and out-of-range values
  bool as_bool() const;           // true/false (also True/False, 1/0)
  // An identifier (unquoted) or string that must be one of `allowed`;
  // the error lists the allowed values and the nearest one.
  std::string as_enum(const std::vector<std::string>& allowed) const;

  // ---- blocks ----
  const std::vector<ConfigNode>& children() const { return children_; }
  std::vector<ConfigNode>& mutable_children() { return children_; }
  void add_child(ConfigNode child) { children_.push_back(std::move(child)); }

  bool has(const std::string& key) const;
  int count(const std::string& key) const;
  // Every child with this key, in file order.
  std::vector<const ConfigNode*> all(const std::string& key) const;
  // The single child with this key; nullptr if absent; ConfigError if repeated.
  const ConfigNode* find(const std::string& key) const;
  // The child block with this key, or a shared empty block if absent.
  // ConfigError if the key is a scalar or repeated.
  const ConfigNode& block(const std::string& key) const;

  // Typed getters for single scalar keys. The defaulted forms return `def`
  // when absent; the others throw ConfigError "missing required key ...".
  // Every error names the key, the enclosing block and the location.
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& def) const;
  double get_double(const std::string& key) const;  // finite (as_double)
  double get_double(const std::string& key, double def) const;
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t def) const;
  bool get_bool(const std::string& key, bool def) const;
  std::string get_enum(const std::string& key, const std::vector<std::string>& allowed,
                       const std::string& def) const;
  // Repeated scalar keys (all occurrences, in order); empty if absent.
  std::vector<std::string> get_strings(const std::string& key) const;
  std::vector<double> get_doubles(const std::string& key) const;
  std::vector<int64_t> get_ints(const std::string& key) const;

  // Throws ConfigError on the first child whose key is not in `known`:
  //   "unknown key 'num_ouput' in convolution_param of layer 'conv1'
  //    at models/x.prototxt:12:5; did you mean 'num_output'?"
  // `context` is the human description ("convolution_param of layer 'conv1'").
  void check_keys(const std::vector<std::string>& known, const std::string& context) const;

  // Re-serialises in prototxt form (for logs and tests).
  std::string to_string(int indent = 0) const;

 private:
  std::string key_;
  Kind kind_ = Kind::kBlock;
  std::string text_;
  bool quoted_ = false;
  SourceLocation loc_;
  std::vector<ConfigNode> children_;
};

// The root is a block with an empty key holding the top-level entries.
// Syntax errors throw ConfigError "file:line:col: expected ..., found ...".
ConfigNode parse_config_text(const std::string& text, const std::string& filename);
// IoError when the file cannot be read (names the path and the OS reason).
ConfigNode parse_config_file(const std::string& path);

// The candidate closest to `key` by edit distance, or "" if none is close
// enough to be a plausible typo.
std::string nearest_key(const std::string& key, const std::vector<std::string>& candidates);

}  // namespace strata
