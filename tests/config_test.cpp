// Tests for the prototxt parser and ConfigNode accessors (framework/config.h).
// Error tests assert on message substrings: the location, what was expected,
// what was found and any suggestion are all part of the contract with users.
#include "framework/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <unistd.h>
#include <vector>

#include "framework/error.h"

namespace strata {
namespace {

ConfigNode parse(const std::string& text) { return parse_config_text(text, "t.prototxt"); }

// The message of the ErrorType thrown by f, or a marker that fails any HasSubstr check.
template <typename ErrorType = ConfigError, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const ErrorType& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<wrong exception type: ") + e.what() + ">";
  }
  return "<no exception>";
}

std::string parse_error(const std::string& text) {
  return message_of([&] { parse(text); });
}

#define EXPECT_CONTAINS(haystack, needle)                                                  \
  do {                                                                                     \
    const std::string h_ = (haystack);                                                     \
    EXPECT_NE(h_.find(needle), std::string::npos) << "message: " << h_ << "\nmissing: " << (needle); \
  } while (0)

// Structural equality, ignoring locations.
void expect_same_tree(const ConfigNode& a, const ConfigNode& b, const std::string& path = "<root>") {
  ASSERT_EQ(a.key(), b.key()) << path;
  ASSERT_EQ(a.is_block(), b.is_block()) << path;
  if (!a.is_block()) {
    EXPECT_EQ(a.text(), b.text()) << path;
    EXPECT_EQ(a.is_quoted(), b.is_quoted()) << path;
    return;
  }
  ASSERT_EQ(a.children().size(), b.children().size()) << path;
  for (size_t i = 0; i < a.children().size(); ++i) {
    expect_same_tree(a.children()[i], b.children()[i], path + "/" + a.children()[i].key());
  }
}

// ---------------------------------------------------------------- locations

TEST(SourceLocation, FormatsFileLineCol) {
  SourceLocation loc{std::make_shared<const std::string>("models/x.prototxt"), 12, 5};
  EXPECT_EQ(loc.str(), "models/x.prototxt:12:5");
  EXPECT_EQ(SourceLocation{}.str(), "<unknown>");
}

TEST(Parse, NodesRecordLineAndColumn) {
  ConfigNode root = parse("name: \"a\"\n\nlayer {\n    type: \"Conv\"\n}\n");
  EXPECT_EQ(root.key(), "");
  EXPECT_TRUE(root.is_block());
  ASSERT_EQ(root.children().size(), 2u);
  EXPECT_EQ(root.children()[0].loc().str(), "t.prototxt:1:1");
  EXPECT_EQ(root.children()[1].loc().str(), "t.prototxt:3:1");
  EXPECT_EQ(root.block("layer").find("type")->loc().str(), "t.prototxt:4:5");
  // Every node of one file shares a single filename string.
  EXPECT_EQ(root.children()[0].loc().file.get(), root.children()[1].loc().file.get());
}

TEST(Parse, EmptyFilenameStillGivesReadableLocations) {
  ConfigNode root = parse_config_text("a: 1", "");
  EXPECT_EQ(root.find("a")->loc().str(), "<string>:1:1");
}

TEST(Parse, CrLfLineEndingsAndByteOrderMark) {
  ConfigNode root = parse("\xEF\xBB\xBF" "a: 1\r\nb: 2\r\n");
  EXPECT_EQ(root.get_int("b"), 2);
  EXPECT_EQ(root.find("b")->loc().line, 2);
  EXPECT_EQ(root.find("b")->loc().col, 1);
}

// ------------------------------------------------------------------ scalars

TEST(Parse, ScalarKinds) {
  ConfigNode root = parse("s: \"hello\" n: 20 f: 0.5 e: MAX b: true q: 'single'");
  const ConfigNode* s = root.find("s");
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->is_block());
  EXPECT_EQ(s->kind(), ConfigNode::Kind::kScalar);
  EXPECT_EQ(s->text(), "hello");
  EXPECT_TRUE(s->is_quoted());
  EXPECT_EQ(root.find("n")->text(), "20");
  EXPECT_FALSE(root.find("n")->is_quoted());
  EXPECT_EQ(root.find("e")->text(), "MAX");
  EXPECT_FALSE(root.find("e")->is_quoted());
  EXPECT_EQ(root.get_string("q"), "single");
  EXPECT_TRUE(root.find("q")->is_quoted());
}

TEST(Parse, StringEscapes) {
  ConfigNode root = parse(R"(a: "x\ny\tz" b: "back\\slash \"dq\" \'sq\'" c: "\x41\x4a\x4B" )"
                          R"(d: "\101\60\0end" e: '\'' f: "it's" g: 'say "hi"' h: "\r\a\b\f\v\?")");
  EXPECT_EQ(root.get_string("a"), "x\ny\tz");
  EXPECT_EQ(root.get_string("b"), "back\\slash \"dq\" 'sq'");
  EXPECT_EQ(root.get_string("c"), "AJK");
  EXPECT_EQ(root.get_string("d"), std::string("A0\0end", 6));
  EXPECT_EQ(root.get_string("e"), "'");
  EXPECT_EQ(root.get_string("f"), "it's");
  EXPECT_EQ(root.get_string("g"), "say \"hi\"");
  EXPECT_EQ(root.get_string("h"), "\r\a\b\f\v?");
}

TEST(Parse, AdjacentStringsConcatenate) {
  ConfigNode root = parse("a: \"foo\" 'bar'\n   # comment between\n  \"baz\"\nb: 1");
  EXPECT_EQ(root.get_string("a"), "foobarbaz");
  EXPECT_EQ(root.get_int("b"), 1);
  EXPECT_EQ(root.children().size(), 2u);
}

TEST(Parse, Utf8PassesThrough) {
  ConfigNode root = parse("a: \"caf\xC3\xA9\"");
  EXPECT_EQ(root.get_string("a"), "caf\xC3\xA9");
}

TEST(Parse, CommentsWhitespaceAndSeparators) {
  ConfigNode root = parse(
      "# leading comment\n"
      "a: 1, b: 2; c: \"x#not a comment\"  # trailing comment\n"
      "\t\n  d\t:\n  4\n"
      "blk { x: 1; y: 2, } # done\n");
  EXPECT_EQ(root.get_int("a"), 1);
  EXPECT_EQ(root.get_int("b"), 2);
  EXPECT_EQ(root.get_string("c"), "x#not a comment");
  EXPECT_EQ(root.get_int("d"), 4);
  EXPECT_EQ(root.block("blk").get_int("y"), 2);
  EXPECT_EQ(root.children().size(), 5u);
}

TEST(Parse, EmptyInputGivesEmptyRoot) {
  EXPECT_TRUE(parse("").children().empty());
  EXPECT_TRUE(parse("  # only a comment\n\n").children().empty());
}

// ------------------------------------------------------------------ numbers

TEST(Conversions, Doubles) {
  ConfigNode root = parse(
      "a: 1e-4 b: .5 c: 5. d: 0x1F e: inf f: -inf g: nan h: 1.5f i: -3 j: 1E+3 k: 2.5F "
      "l: -0.25 m: Infinity n: 1e-400 o: 99999999999999999999 p: 0x10000000000000000 q: -0");
  EXPECT_DOUBLE_EQ(root.get_double("a"), 1e-4);
  EXPECT_DOUBLE_EQ(root.get_double("b"), 0.5);
  EXPECT_DOUBLE_EQ(root.get_double("c"), 5.0);
  EXPECT_DOUBLE_EQ(root.get_double("d"), 31.0);
  EXPECT_EQ(root.get_double("e"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(root.get_double("f"), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(root.get_double("g")));
  EXPECT_DOUBLE_EQ(root.get_double("h"), 1.5);
  EXPECT_DOUBLE_EQ(root.get_double("i"), -3.0);
  EXPECT_DOUBLE_EQ(root.get_double("j"), 1000.0);
  EXPECT_DOUBLE_EQ(root.get_double("k"), 2.5);
  EXPECT_DOUBLE_EQ(root.get_double("l"), -0.25);
  EXPECT_TRUE(std::isinf(root.get_double("m")));
  EXPECT_EQ(root.get_double("n"), 0.0);  // underflow is harmless
  // Integer literals beyond int64 are still fine as doubles.
  EXPECT_DOUBLE_EQ(root.get_double("o"), 1e20);
  EXPECT_DOUBLE_EQ(root.get_double("p"), 18446744073709551616.0);
  EXPECT_EQ(root.get_double("q"), 0.0);
}

TEST(Conversions, DoubleErrors) {
  ConfigNode root = parse("a: MAX\nb: \"0.5\"\nc: 1e999\nd { }");
  std::string m = message_of([&] { root.get_double("a"); });
  EXPECT_CONTAINS(m, "key 'a' at t.prototxt:1:1");
  EXPECT_CONTAINS(m, "expected a number, found 'MAX'");
  m = message_of([&] { root.get_double("b"); });
  EXPECT_CONTAINS(m, "t.prototxt:2:1");
  EXPECT_CONTAINS(m, "found the quoted string \"0.5\" (write it without quotes)");
  m = message_of([&] { root.get_double("c"); });
  EXPECT_CONTAINS(m, "found '1e999' (too large)");
  m = message_of([&] { root.get_double("d"); });
  EXPECT_CONTAINS(m, "key 'd' at t.prototxt:4:1: expected a number ('d: value'), found a block ('d { ... }')");
}

TEST(Conversions, Ints) {
  ConfigNode root = parse(
      "a: 20 b: -42 c: 0x1F d: 0XfF e: 2.0 f: 1e3 g: 9223372036854775807 h: -9223372036854775808 "
      "i: -0x10 j: 0");
  EXPECT_EQ(root.get_int("a"), 20);
  EXPECT_EQ(root.get_int("b"), -42);
  EXPECT_EQ(root.get_int("c"), 31);
  EXPECT_EQ(root.get_int("d"), 255);
  EXPECT_EQ(root.get_int("e"), 2);
  EXPECT_EQ(root.get_int("f"), 1000);
  EXPECT_EQ(root.get_int("g"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(root.get_int("h"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(root.get_int("i"), -16);
  EXPECT_EQ(root.get_int("j"), 0);
}

TEST(Conversions, IntErrors) {
  ConfigNode root = parse(
      "layer {\n  num_output: 3.5\n  big: 9223372036854775808\n  neg: -9223372036854775809\n"
      "  huge: 1e30\n  word: MAX\n  quoted: \"5\"\n  nanv: nan\n  hex: 0x8000000000000000\n}");
  const ConfigNode& l = root.block("layer");
  std::string m = message_of([&] { l.get_int("num_output"); });
  EXPECT_CONTAINS(m, "key 'num_output' at t.prototxt:2:3: expected an integer, found '3.5' (it has a fractional part)");
  for (const char* key : {"big", "neg", "huge", "hex"}) {
    m = message_of([&] { l.get_int(key); });
    EXPECT_CONTAINS(m, "expected an integer between -9223372036854775808 and 9223372036854775807");
    EXPECT_CONTAINS(m, "(out of range)");
  }
  EXPECT_CONTAINS(message_of([&] { l.get_int("big"); }), "t.prototxt:3:3");
  EXPECT_CONTAINS(message_of([&] { l.get_int("word"); }), "expected an integer, found 'MAX'");
  EXPECT_CONTAINS(message_of([&] { l.get_int("quoted"); }), "expected an integer, found the quoted string \"5\"");
  EXPECT_CONTAINS(message_of([&] { l.get_int("nanv"); }), "expected an integer, found 'nan'");
}

TEST(Conversions, Bools) {
  ConfigNode root = parse("a: true b: false c: True d: False e: 1 f: 0 g: yes h: \"true\"");
  EXPECT_TRUE(root.get_bool("a", false));
  EXPECT_FALSE(root.get_bool("b", true));
  EXPECT_TRUE(root.get_bool("c", false));
  EXPECT_FALSE(root.get_bool("d", true));
  EXPECT_TRUE(root.get_bool("e", false));
  EXPECT_FALSE(root.get_bool("f", true));
  EXPECT_TRUE(root.get_bool("absent", true));
  std::string m = message_of([&] { root.get_bool("g", false); });
  EXPECT_CONTAINS(m, "key 'g' at t.prototxt:1:");
  EXPECT_CONTAINS(m, "expected a boolean (true/false, True/False or 1/0), found 'yes'");
  EXPECT_CONTAINS(message_of([&] { root.get_bool("h", false); }), "found the quoted string \"true\"");
}

TEST(Conversions, Enums) {
  ConfigNode root = parse("pool: MAX\nq: \"AVE\"\nbad: MAXX\nlow: max\nfar: BANANA");
  const std::vector<std::string> allowed = {"MAX", "AVE", "STOCHASTIC"};
  EXPECT_EQ(root.get_enum("pool", allowed, "AVE"), "MAX");
  EXPECT_EQ(root.get_enum("q", allowed, "MAX"), "AVE");
  EXPECT_EQ(root.get_enum("absent", allowed, "STOCHASTIC"), "STOCHASTIC");
  std::string m = message_of([&] { root.find("bad")->as_enum(allowed); });
  EXPECT_CONTAINS(m, "key 'bad' at t.prototxt:3:1: expected one of MAX, AVE, STOCHASTIC, found 'MAXX'; did you mean 'MAX'?");
  EXPECT_CONTAINS(message_of([&] { root.find("low")->as_enum(allowed); }), "did you mean 'MAX'?");
  m = message_of([&] { root.find("far")->as_enum(allowed); });
  EXPECT_CONTAINS(m, "expected one of MAX, AVE, STOCHASTIC, found 'BANANA'");
  EXPECT_EQ(m.find("did you mean"), std::string::npos) << m;
}

TEST(Conversions, StringAcceptsBareTokens) {
  ConfigNode root = parse("a: TRAIN b: 5 c { }");
  EXPECT_EQ(root.get_string("a"), "TRAIN");
  EXPECT_EQ(root.get_string("b"), "5");
  EXPECT_CONTAINS(message_of([&] { root.get_string("c"); }),
                  "key 'c' at t.prototxt:1:15: expected a string ('c: value'), found a block ('c { ... }')");
}

// ------------------------------------------------------------------- blocks

TEST(Parse, BlockForms) {
  ConfigNode root = parse("a { x: 1 } b: { x: 2 } c < x: 3 > d: < x: 4 > e {} f: {}");
  EXPECT_EQ(root.block("a").get_int("x"), 1);
  EXPECT_EQ(root.block("b").get_int("x"), 2);
  EXPECT_EQ(root.block("c").get_int("x"), 3);
  EXPECT_EQ(root.block("d").get_int("x"), 4);
  EXPECT_TRUE(root.find("e")->is_block());
  EXPECT_TRUE(root.find("e")->children().empty());
  EXPECT_TRUE(root.find("f")->is_block());
}

TEST(Parse, DeepNesting) {
  ConfigNode root = parse("a { b { c { d < e { f: \"deep\" } > } } }");
  EXPECT_EQ(root.block("a").block("b").block("c").block("d").block("e").get_string("f"), "deep");
}

TEST(Parse, NestingLimit) {
  std::string text;
  for (int i = 0; i < 1100; ++i) text += "a {";
  std::string m = parse_error(text);
  EXPECT_CONTAINS(m, "t.prototxt:1:3003: expected blocks nested at most 1000 deep");
}

TEST(Parse, RepeatedKeysKeepFileOrder) {
  ConfigNode root = parse("top: \"a\"\nlayer { name: \"one\" }\nx: 1\nlayer { name: \"two\" }\ntop: \"b\"");
  EXPECT_EQ(root.count("layer"), 2);
  EXPECT_EQ(root.count("nothing"), 0);
  EXPECT_TRUE(root.has("x"));
  EXPECT_FALSE(root.has("y"));
  std::vector<const ConfigNode*> layers = root.all("layer");
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0]->get_string("name"), "one");
  EXPECT_EQ(layers[1]->get_string("name"), "two");
  EXPECT_EQ(root.get_strings("top"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(root.all("missing").empty());
}

TEST(Blocks, RepeatedKeyWhereOneExpected) {
  ConfigNode root = parse("x: 1\nx: 2\nlayer {\n  name: \"conv1\"\n  k: 1\n  k: 2\n  k: 3\n}");
  std::string m = message_of([&] { root.find("x"); });
  EXPECT_CONTAINS(m, "key 'x' given 2 times in the top level of t.prototxt (at t.prototxt:1:1 and t.prototxt:2:1); expected once");
  m = message_of([&] { root.block("layer").get_int("k"); });
  EXPECT_CONTAINS(m, "key 'k' given 3 times in layer 'conv1' (at t.prototxt:5:3, t.prototxt:6:3 and t.prototxt:7:3); expected once");
  EXPECT_CONTAINS(message_of([&] { root.get_int("x", 0); }), "given 2 times");
  EXPECT_CONTAINS(message_of([&] { root.block("x"); }), "given 2 times");
}

TEST(Blocks, AbsentBlockIsSharedEmptyBlock) {
  ConfigNode root = parse("a: 1");
  const ConfigNode& e1 = root.block("missing");
  const ConfigNode& e2 = root.block("other");
  EXPECT_EQ(&e1, &e2);
  EXPECT_TRUE(e1.is_block());
  EXPECT_TRUE(e1.children().empty());
  EXPECT_EQ(e1.get_int("num_output", 7), 7);
  EXPECT_EQ(root.find("missing"), nullptr);
  EXPECT_EQ(ConfigNode().block("x").block("y").get_string("z", "dflt"), "dflt");
}

TEST(Blocks, ScalarWhereBlockExpected) {
  ConfigNode root = parse("conv: 5\nq: \"s\"");
  EXPECT_CONTAINS(message_of([&] { root.block("conv"); }),
                  "key 'conv' at t.prototxt:1:1: expected a block ('conv { ... }'), found the value '5'");
  EXPECT_CONTAINS(message_of([&] { root.block("q"); }), "found the value \"s\"");
}

TEST(Blocks, RequiredKeys) {
  ConfigNode root = parse("layer {\n  name: \"conv1\"\n  param { }\n}\n");
  std::string m = message_of([&] { root.block("layer").get_int("num_output"); });
  EXPECT_CONTAINS(m, "missing required key 'num_output' in layer 'conv1' at t.prototxt:1:1 (expected 'num_output: ...')");
  m = message_of([&] { root.block("layer").block("param").get_double("lr_mult"); });
  EXPECT_CONTAINS(m, "missing required key 'lr_mult' in block 'param' at t.prototxt:3:3");
  EXPECT_CONTAINS(message_of([&] { root.get_string("name"); }),
                  "missing required key 'name' in the top level of t.prototxt");
}

TEST(Blocks, DefaultedGetters) {
  ConfigNode root = parse("s: \"v\" d: 0.25 i: 3");
  EXPECT_EQ(root.get_string("s", "x"), "v");
  EXPECT_EQ(root.get_string("no", "x"), "x");
  EXPECT_DOUBLE_EQ(root.get_double("d", 1.0), 0.25);
  EXPECT_DOUBLE_EQ(root.get_double("no", 1.0), 1.0);
  EXPECT_EQ(root.get_int("i", 9), 3);
  EXPECT_EQ(root.get_int("no", 9), 9);
  EXPECT_EQ(root.get_string("s"), "v");
  EXPECT_DOUBLE_EQ(root.get_double("d"), 0.25);
  EXPECT_EQ(root.get_int("i"), 3);
}

TEST(Blocks, RepeatedGettersCheckEveryElement) {
  ConfigNode root = parse("dim: 1 dim: 2 dim: 3.5 v: 0.5 v: 1e2");
  EXPECT_EQ(root.get_doubles("v"), (std::vector<double>{0.5, 100.0}));
  EXPECT_CONTAINS(message_of([&] { root.get_ints("dim"); }), "found '3.5' (it has a fractional part)");
  EXPECT_TRUE(root.get_ints("none").empty());
}

TEST(Blocks, BuiltByHand) {
  ConfigNode b = ConfigNode::block("layer", SourceLocation{});
  b.add_child(ConfigNode::scalar("num_output", "20", false, SourceLocation{}));
  EXPECT_EQ(b.get_int("num_output"), 20);
  b.mutable_children()[0] = ConfigNode::scalar("num_output", "30", false, SourceLocation{});
  EXPECT_EQ(b.get_int("num_output"), 30);
  EXPECT_CONTAINS(message_of([&] { b.get_int("missing"); }), "missing required key 'missing' in block 'layer'");
  EXPECT_TRUE(ConfigNode().is_block());
}

// -------------------------------------------------------------- list syntax

TEST(Parse, ListSyntax) {
  ConfigNode root = parse("dim: [1, 2, 3]\nname: [\"a\", 'b' \"c\"]\nempty: []\nnested: [{x: 1}, <x: 2>]\nz: 0");
  EXPECT_EQ(root.get_ints("dim"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(root.count("dim"), 3);
  EXPECT_EQ(root.all("dim")[1]->loc().str(), "t.prototxt:1:10");
  EXPECT_EQ(root.get_strings("name"), (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(root.count("empty"), 0);
  ASSERT_EQ(root.count("nested"), 2);
  EXPECT_EQ(root.all("nested")[1]->get_int("x"), 2);
  EXPECT_EQ(root.get_int("z"), 0);
  EXPECT_EQ(parse("a: [ 1 ,\n 2 # two\n ]").get_ints("a"), (std::vector<int64_t>{1, 2}));
}

TEST(ParseErrors, ListErrors) {
  std::string m = parse_error("dim: [1, 2 3]");
  EXPECT_CONTAINS(m, "t.prototxt:1:12: expected ',' or ']' in the list for key 'dim', found '3'");
  m = parse_error("dim: [1, 2,\n");
  EXPECT_CONTAINS(m, "t.prototxt:2:1: expected a value (number, identifier or quoted string) in the list for key 'dim', found end of file");
  m = parse_error("dim: [1, 2\n\n");
  EXPECT_CONTAINS(m, "t.prototxt:3:1: list for key 'dim' opened at t.prototxt:1:6 is never closed: expected ']', found end of file");
  m = parse_error("dim: [1, ]");
  EXPECT_CONTAINS(m, "t.prototxt:1:10: expected a value (number, identifier or quoted string) in the list for key 'dim', found ']'");
}

// ------------------------------------------------------------ syntax errors

TEST(ParseErrors, MissingColon) {
  std::string m = message_of([] {
    parse_config_text("layer {\n  type: \"Data\"\n  name = \"data\"\n}", "models/x.prototxt");
  });
  EXPECT_CONTAINS(m, "models/x.prototxt:3:8: expected ':' or '{' after key 'name', found '='");
  EXPECT_CONTAINS(parse_error("name \"x\""), "t.prototxt:1:6: expected ':' or '{' after key 'name', found a quoted string");
  EXPECT_CONTAINS(parse_error("name"), "t.prototxt:1:5: expected ':' or '{' after key 'name', found end of file");
  EXPECT_CONTAINS(parse_error("name 5"), "found '5'");
}

TEST(ParseErrors, UnclosedBlock) {
  std::string m = message_of([] { parse_config_text("name: \"x\"\nlayer {\n  type: \"Data\"\n", "x"); });
  EXPECT_CONTAINS(m, "x:4:1: block 'layer' opened at x:2:1 is never closed: expected '}', found end of file");
  m = parse_error("a < b: 1");
  EXPECT_CONTAINS(m, "block 'a' opened at t.prototxt:1:1 is never closed: expected '>'");
}

TEST(ParseErrors, UnexpectedCloser) {
  std::string m = parse_error("a: 1\n}\n");
  EXPECT_CONTAINS(m, "t.prototxt:2:1: unexpected '}': no block is open here (expected a key or end of file)");
  m = parse_error("a { b: 1 >");
  EXPECT_CONTAINS(m, "t.prototxt:1:10: expected a key or '}' closing block 'a' opened at t.prototxt:1:1, found '>'");
  m = parse_error("a < b: 1 }");
  EXPECT_CONTAINS(m, "expected a key or '>' closing block 'a' opened at t.prototxt:1:1, found '}'");
}

TEST(ParseErrors, BadKeys) {
  EXPECT_CONTAINS(parse_error("a: 1\n  5x: 2"), "t.prototxt:2:3: expected a key, found '5x'");
  EXPECT_CONTAINS(parse_error("\"key\": 2"), "t.prototxt:1:1: expected a key, found a quoted string");
  EXPECT_CONTAINS(parse_error("a: 1;;"), "t.prototxt:1:6: expected a key, found ';'");
  EXPECT_CONTAINS(parse_error("a: 1\n\x01"), "t.prototxt:2:1: expected a key, found byte 0x01");
}

TEST(ParseErrors, BadValues) {
  EXPECT_CONTAINS(parse_error("a:"), "t.prototxt:1:3: expected a value (number, identifier or quoted string) after 'a:', found end of file");
  EXPECT_CONTAINS(parse_error("a { b: }"), "t.prototxt:1:8: expected a value (number, identifier or quoted string) after 'b:', found '}'");
  EXPECT_CONTAINS(parse_error("lr: 1.2.3"), "t.prototxt:1:5: expected a number, identifier or quoted string after 'lr:', found '1.2.3'");
  EXPECT_CONTAINS(parse_error("lr: 0.1x"), "found '0.1x'");
  EXPECT_CONTAINS(parse_error("lr: 1e"), "found '1e'");
  EXPECT_CONTAINS(parse_error("lr: -MAX"), "found '-MAX'");
  EXPECT_CONTAINS(parse_error("lr: 0x"), "found '0x'");
  EXPECT_CONTAINS(parse_error("a: : 1"), "after 'a:', found ':'");
}

TEST(ParseErrors, UnterminatedString) {
  std::string m = parse_error("a: 1\nname: \"conv1\n}");
  EXPECT_CONTAINS(m, "t.prototxt:2:7: string is never closed: expected a closing \" before the end of the line, found end of line");
  m = parse_error("name: 'abc");
  EXPECT_CONTAINS(m, "t.prototxt:1:7: string is never closed: expected a closing ' before the end of the line, found end of file");
  EXPECT_CONTAINS(parse_error("name: \"abc\\"), "string is never closed");
}

TEST(ParseErrors, BadEscapes) {
  EXPECT_CONTAINS(parse_error("a: \"x\\qy\""),
                  "t.prototxt:1:6: unknown escape sequence '\\q' in string; expected one of \\n \\t \\r \\\\ \\\" \\' \\xHH or octal \\NNN");
  EXPECT_CONTAINS(parse_error("a: \"\\xZZ\""), "t.prototxt:1:7: expected hex digits after '\\x' in string, found 'ZZ'");
  EXPECT_CONTAINS(parse_error("a: \"\\777\""), "t.prototxt:1:5: expected an octal escape between \\0 and \\377");
}

// ---------------------------------------------------------------- check_keys

TEST(CheckKeys, UnknownKeyWithSuggestion) {
  ConfigNode root = parse_config_text(
      "layer {\n  name: \"conv1\"\n  convolution_param {\n    num_ouput: 20\n  }\n}", "f.prototxt");
  const ConfigNode& cp = root.block("layer").block("convolution_param");
  std::string m = message_of([&] {
    cp.check_keys({"num_output", "kernel_size", "stride"}, "convolution_param of layer 'conv1'");
  });
  EXPECT_EQ(m,
            "unknown key 'num_ouput' in convolution_param of layer 'conv1' at f.prototxt:4:5; "
            "did you mean 'num_output'? (known keys: num_output, kernel_size, stride)");
}

TEST(CheckKeys, NoSuggestionAndDefaultContext) {
  ConfigNode root = parse("layer {\n  name: \"ip1\"\n  zzz: 1\n}\nfoo: 1");
  std::string m = message_of([&] { root.block("layer").check_keys({"name", "type", "bottom", "top"}, ""); });
  EXPECT_EQ(m, "unknown key 'zzz' in layer 'ip1' at t.prototxt:3:3 (known keys: name, type, bottom, top)");
  m = message_of([&] { root.check_keys({}, "the net"); });
  EXPECT_EQ(m, "unknown key 'layer' in the net at t.prototxt:1:1 (this block takes no keys)");
  EXPECT_NO_THROW(root.block("layer").check_keys({"name", "zzz"}, "layer"));
  EXPECT_NO_THROW(root.check_keys({"layer", "foo"}, "net"));
}

// -------------------------------------------------------------- nearest_key

TEST(NearestKey, PicksClosePlausibleTypos) {
  const std::vector<std::string> keys = {"num_output", "kernel_size", "stride", "pad", "bias_term"};
  EXPECT_EQ(nearest_key("num_ouput", keys), "num_output");
  EXPECT_EQ(nearest_key("kernelsize", keys), "kernel_size");
  EXPECT_EQ(nearest_key("strid", keys), "stride");
  EXPECT_EQ(nearest_key("pads", keys), "pad");
  EXPECT_EQ(nearest_key("stride", keys), "stride");
  EXPECT_EQ(nearest_key("Stride", keys), "stride");
  EXPECT_EQ(nearest_key("weight_filler", keys), "");
  EXPECT_EQ(nearest_key("x", {"lr", "wd"}), "");  // shares nothing: not a typo
  EXPECT_EQ(nearest_key("anything", {}), "");
  // Long keys get a proportionally larger budget: 15 chars allows 5 edits.
  EXPECT_EQ(nearest_key("weight_fillerzz", {"weight_filler"}), "weight_filler");
  EXPECT_EQ(nearest_key("abcdefghi", {"abcxyzwvi"}), "");
  // Closest wins; exact case breaks ties.
  EXPECT_EQ(nearest_key("pool", {"pooling", "pool_"}), "pool_");
  EXPECT_EQ(nearest_key("Max", {"MAX", "Max"}), "Max");
}

// ------------------------------------------------------------- to_string

TEST(ToString, Format) {
  ConfigNode root = parse("name: \"net\" layer { type: CONV param { lr_mult: 1 } e {} } v: 0.5");
  EXPECT_EQ(root.to_string(),
            "name: \"net\"\n"
            "layer {\n"
            "  type: CONV\n"
            "  param {\n"
            "    lr_mult: 1\n"
            "  }\n"
            "  e {}\n"
            "}\n"
            "v: 0.5\n");
  EXPECT_EQ(root.block("layer").block("param").to_string(1), "  param {\n    lr_mult: 1\n  }\n");
  EXPECT_EQ(root.find("name")->to_string(), "name: \"net\"\n");
}

TEST(ToString, EscapesStrings) {
  ConfigNode root = parse(R"(a: "q\"b\\n\nt\tr\r\001\x7f'z")");
  EXPECT_EQ(root.to_string(), "a: \"q\\\"b\\\\n\\nt\\tr\\r\\001\\177'z\"\n");
}

TEST(ToString, RoundTrip) {
  const std::string text =
      "name: \"weird \\\"net\\\"\\n\\t\\\\ \\x01\\0009 caf\xC3\xA9\" # comment\n"
      "single: 'it\\'s'\n"
      "dims: [1, -2, 0x1F]\n"
      "vals: [.5, 5., 1e-4, -inf, nan, 1.5f]\n"
      "layer: < name: \"a\" type: CONV; inner { deeper { x: true } } >\n"
      "layer { empty {} empty: {} }\n"
      "blocks: [{ k: 1 }, { k: 2 }]\n"
      "joined: \"a\" \"b\"\n"
      "empty_string: \"\"\n";
  ConfigNode first = parse(text);
  ConfigNode second = parse(first.to_string());
  expect_same_tree(first, second);
  EXPECT_EQ(first.to_string(), second.to_string());
}

TEST(ToString, HandBuiltScalarsStayParseable) {
  ConfigNode root;
  root.add_child(ConfigNode::scalar("a", "two words", false, SourceLocation{}));
  root.add_child(ConfigNode::scalar("b", "", false, SourceLocation{}));
  root.add_child(ConfigNode::scalar("c", "7", false, SourceLocation{}));
  EXPECT_EQ(root.to_string(), "a: \"two words\"\nb: \"\"\nc: 7\n");
  ConfigNode back = parse(root.to_string());
  EXPECT_EQ(back.get_string("a"), "two words");
  EXPECT_EQ(back.get_int("c"), 7);
}

// ------------------------------------------------------------------- files

TEST(Files, ReadsFileAndRecordsPath) {
  char path[] = "/tmp/strata_config_test_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string body = "name: \"lenet\"\nlayer {\n  bad = 1\n}\n";
  ASSERT_EQ(write(fd, body.data(), body.size()), static_cast<ssize_t>(body.size()));
  close(fd);
  std::string m = message_of([&] { parse_config_file(path); });
  EXPECT_CONTAINS(m, std::string(path) + ":3:7: expected ':' or '{' after key 'bad', found '='");

  FILE* f = std::fopen(path, "w");
  ASSERT_NE(f, nullptr);
  std::fputs("name: \"lenet\"\n", f);
  std::fclose(f);
  ConfigNode root = parse_config_file(path);
  EXPECT_EQ(root.get_string("name"), "lenet");
  EXPECT_EQ(root.find("name")->loc().str(), std::string(path) + ":1:1");
  std::remove(path);
}

TEST(Files, MissingFileIsIoError) {
  std::string m = message_of<IoError>([] { parse_config_file("/nonexistent/dir/x.prototxt"); });
  EXPECT_EQ(m, "cannot read config file '/nonexistent/dir/x.prototxt': No such file or directory");
  m = message_of<IoError>([] { parse_config_file("/tmp"); });
  EXPECT_EQ(m, "cannot read config file '/tmp': Is a directory");
}

// ------------------------------------------------------------ Caffe LeNet

const char* const kLeNetTrainVal = R"(name: "LeNet"
layer {
  name: "mnist"
  type: "Data"
  top: "data"
  top: "label"
  include {
    phase: TRAIN
  }
  transform_param {
    scale: 0.00390625
  }
  data_param {
    source: "examples/mnist/mnist_train_lmdb"
    batch_size: 64
    backend: LMDB
  }
}
layer {
  name: "mnist"
  type: "Data"
  top: "data"
  top: "label"
  include {
    phase: TEST
  }
  transform_param {
    scale: 0.00390625
  }
  data_param {
    source: "examples/mnist/mnist_test_lmdb"
    batch_size: 100
    backend: LMDB
  }
}
layer {
  name: "conv1"
  type: "Convolution"
  bottom: "data"
  top: "conv1"
  param {
    lr_mult: 1
  }
  param {
    lr_mult: 2
  }
  convolution_param {
    num_output: 20
    kernel_size: 5
    stride: 1
    weight_filler {
      type: "xavier"
    }
    bias_filler {
      type: "constant"
    }
  }
}
layer {
  name: "pool1"
  type: "Pooling"
  bottom: "conv1"
  top: "pool1"
  pooling_param {
    pool: MAX
    kernel_size: 2
    stride: 2
  }
}
layer {
  name: "ip1"
  type: "InnerProduct"
  bottom: "pool1"
  top: "ip1"
  param { lr_mult: 1 }
  param { lr_mult: 2 }
  inner_product_param {
    num_output: 500
    weight_filler { type: "xavier" }
    bias_filler { type: "constant" }
  }
}
layer {
  name: "relu1"
  type: "ReLU"
  bottom: "ip1"
  top: "ip1"
}
layer {
  name: "accuracy"
  type: "Accuracy"
  bottom: "ip1"
  bottom: "label"
  top: "accuracy"
  include {
    phase: TEST
  }
}
layer {
  name: "loss"
  type: "SoftmaxWithLoss"
  bottom: "ip1"
  bottom: "label"
  top: "loss"
}
)";

TEST(LeNet, TrainValPrototxt) {
  ConfigNode net = parse_config_text(kLeNetTrainVal, "examples/mnist/lenet_train_test.prototxt");
  EXPECT_EQ(net.get_string("name"), "LeNet");
  EXPECT_NO_THROW(net.check_keys({"name", "layer"}, "net"));
  std::vector<const ConfigNode*> layers = net.all("layer");
  ASSERT_EQ(layers.size(), 8u);

  const ConfigNode& train_data = *layers[0];
  EXPECT_EQ(train_data.get_string("type"), "Data");
  EXPECT_EQ(train_data.get_strings("top"), (std::vector<std::string>{"data", "label"}));
  EXPECT_EQ(train_data.block("include").get_enum("phase", {"TRAIN", "TEST"}, "TEST"), "TRAIN");
  EXPECT_DOUBLE_EQ(train_data.block("transform_param").get_double("scale"), 0.00390625);
  EXPECT_EQ(train_data.block("data_param").get_int("batch_size"), 64);
  EXPECT_EQ(layers[1]->block("include").get_string("phase"), "TEST");
  EXPECT_EQ(layers[1]->block("data_param").get_string("source"), "examples/mnist/mnist_test_lmdb");

  const ConfigNode& conv = *layers[2];
  EXPECT_EQ(conv.get_string("name"), "conv1");
  std::vector<const ConfigNode*> params = conv.all("param");
  ASSERT_EQ(params.size(), 2u);
  EXPECT_DOUBLE_EQ(params[0]->get_double("lr_mult"), 1.0);
  EXPECT_DOUBLE_EQ(params[1]->get_double("lr_mult"), 2.0);
  const ConfigNode& cp = conv.block("convolution_param");
  EXPECT_NO_THROW(cp.check_keys({"num_output", "kernel_size", "stride", "pad", "weight_filler", "bias_filler"},
                                "convolution_param of layer 'conv1'"));
  EXPECT_EQ(cp.get_int("num_output"), 20);
  EXPECT_EQ(cp.get_int("kernel_size"), 5);
  EXPECT_EQ(cp.get_int("stride", 1), 1);
  EXPECT_EQ(cp.get_int("pad", 0), 0);
  EXPECT_EQ(cp.block("weight_filler").get_string("type"), "xavier");
  EXPECT_EQ(cp.block("bias_filler").get_string("type"), "constant");
  EXPECT_EQ(cp.block("weight_filler").loc().str(), "examples/mnist/lenet_train_test.prototxt:51:5");
  // The repeated 'param' key is a user error only where one is expected.
  EXPECT_CONTAINS(message_of([&] { conv.block("param"); }),
                  "key 'param' given 2 times in layer 'conv1' (at examples/mnist/lenet_train_test.prototxt:41:3 "
                  "and examples/mnist/lenet_train_test.prototxt:44:3); expected once");

  EXPECT_EQ(layers[3]->block("pooling_param").get_enum("pool", {"MAX", "AVE", "STOCHASTIC"}, "MAX"), "MAX");
  EXPECT_EQ(layers[4]->block("inner_product_param").get_int("num_output"), 500);
  EXPECT_EQ(layers[4]->count("param"), 2);
  EXPECT_EQ(layers[6]->get_strings("bottom"), (std::vector<std::string>{"ip1", "label"}));
  EXPECT_TRUE(layers[7]->block("include").children().empty());  // absent: applies to every phase

  expect_same_tree(net, parse(net.to_string()));
}

TEST(LeNet, TypoInLayerIsReportedWithLocation) {
  const std::string text =
      "layer {\n  name: \"conv1\"\n  type: \"Convolution\"\n  convolution_param {\n"
      "    num_output: 20\n    kernel_sise: 5\n  }\n}\n";
  ConfigNode net = parse_config_text(text, "lenet.prototxt");
  const ConfigNode& cp = net.block("layer").block("convolution_param");
  std::string m = message_of([&] {
    cp.check_keys({"num_output", "kernel_size", "stride"}, "convolution_param of layer 'conv1'");
  });
  EXPECT_CONTAINS(m, "unknown key 'kernel_sise' in convolution_param of layer 'conv1' at lenet.prototxt:6:5");
  EXPECT_CONTAINS(m, "did you mean 'kernel_size'?");
}

TEST(LeNet, LegacyLayersSyntax) {
  ConfigNode net = parse(
      "name: \"LeNet\"\n"
      "layers {\n  name: \"conv1\"\n  type: CONVOLUTION\n  bottom: \"data\"\n  top: \"conv1\"\n"
      "  blobs_lr: 1\n  blobs_lr: 2\n  convolution_param { num_output: 20 kernel_size: 5 stride: 1 }\n}\n"
      "input_dim: 64 input_dim: 1 input_dim: 28 input_dim: 28\n");
  const ConfigNode& l = net.block("layers");
  EXPECT_EQ(l.get_enum("type", {"DATA", "CONVOLUTION", "POOLING"}, "DATA"), "CONVOLUTION");
  EXPECT_EQ(l.get_doubles("blobs_lr"), (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(net.get_ints("input_dim"), (std::vector<int64_t>{64, 1, 28, 28}));
}

}  // namespace
}  // namespace strata
