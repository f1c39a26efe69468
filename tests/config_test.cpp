// Tests for the prototxt parser and ConfigNode accessors (framework/config/config.h):
// locations, scalars, numbers, blocks, list syntax and to_string. Error tests
// assert on message substrings: the location, what was expected, what was
// found and any suggestion are all part of the contract with users. Syntax
// errors, unknown keys, files and Caffe's LeNet are in config_errors_test.cpp.
#include "framework/config/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "framework/error.h"
#include "tests/config_test_util.h"

namespace strata {
namespace {

using config_test::expect_same_tree;
using config_test::message_of;
using config_test::parse;
using config_test::parse_error;

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
  EXPECT_EQ(root.find("e")->as_double_or_nonfinite(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(root.find("f")->as_double_or_nonfinite(), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(root.find("g")->as_double_or_nonfinite()));
  // A setting is a finite number: inf and nan are named errors.
  for (const char* key : {"e", "f", "g", "m"}) {
    EXPECT_CONTAINS(message_of([&] { root.get_double(key); }), "expected a finite number");
  }
  EXPECT_DOUBLE_EQ(root.get_double("h"), 1.5);
  EXPECT_DOUBLE_EQ(root.get_double("i"), -3.0);
  EXPECT_DOUBLE_EQ(root.get_double("j"), 1000.0);
  EXPECT_DOUBLE_EQ(root.get_double("k"), 2.5);
  EXPECT_DOUBLE_EQ(root.get_double("l"), -0.25);
  EXPECT_TRUE(std::isinf(root.find("m")->as_double_or_nonfinite()));
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
}  // namespace
}  // namespace strata
