// What users see when a config is wrong, and whole files: syntax errors,
// unknown keys with suggestions (check_keys, nearest_key), reading files, and
// Caffe's LeNet prototxt (accepted as written; a typo in it reported at its
// location). Error tests assert on message substrings: the location, what was
// expected, what was found and any suggestion are all part of the contract
// with users. The parser's accepted syntax and the accessors are in
// config_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/error.h"
#include "tests/caffe_lenet.h"
#include "tests/config_test_util.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using config_test::expect_same_tree;
using config_test::message_of;
using config_test::parse;
using config_test::parse_error;

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

// Files saved by other editors: old Mac line endings (\r alone) end lines,
// comments included; UTF-16 is named as such; a character copied from a web
// page or a word processor is named with its code point.
TEST(ParseErrors, EncodingsAndLookalikeCharactersAreNamed) {
  const ConfigNode mac = parse_config_text("# a comment\rname: \"x\"\rlayer { type: \"Data\" }\r", "mac.prototxt");
  EXPECT_EQ(mac.get_string("name", ""), "x");
  EXPECT_CONTAINS(parse_error("# c\rname: \"x\"\r  bad = 1\r"), "t.prototxt:3:7: expected ':' or '{' after key 'bad'");
  const std::string utf16("\xFF\xFEn\0a\0m\0e\0", 10);
  EXPECT_CONTAINS(message_of([&] { parse_config_text(utf16, "w.prototxt"); }),
                  "w.prototxt: the file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8");
  const std::string nul("n\0a\0m\0e\0", 8);
  EXPECT_CONTAINS(message_of([&] { parse_config_text(nul, "n.prototxt"); }), "not text (it holds NUL bytes; UTF-16?)");
  EXPECT_CONTAINS(parse_error("name:\xC2\xA0\"x\""), "found the character U+00A0 (a non-breaking space: type a plain space)");
  EXPECT_CONTAINS(parse_error("name: \xE2\x80\x9Cx\xE2\x80\x9D"),
                  "the character U+201C (a typographic double quote: type \")");
  EXPECT_CONTAINS(parse_error("\xC3\xA9t\xC3\xA9: 1"), "the character U+00E9 (outside quotes, write keys and values in ASCII)");
  EXPECT_CONTAINS(parse_error("\xFF: 1"), "byte 0xFF (not UTF-8 text)");
  // Inside quotes any UTF-8 is a value.
  EXPECT_EQ(parse_config_text("name: \"caf\xC3\xA9\xC2\xA0x\"", "q").get_string("name", ""), "caf\xC3\xA9\xC2\xA0x");
}

TEST(ParseErrors, ADeviceOrPipeIsNotReadAsAConfigFile) {
  EXPECT_CONTAINS(message_of([] { parse_config_file("/dev/zero"); }),
                  "config file '/dev/zero' is not a regular file (a device, pipe or socket)");
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
  // Every unknown key of the block in one error.
  m = message_of([&] { root.check_keys({}, "the net"); });
  EXPECT_EQ(m,
            "the net has 2 problems:\n"
            "  1. unknown key 'layer' in the net at t.prototxt:1:1 (this block takes no keys)\n"
            "  2. unknown key 'foo' in the net at t.prototxt:5:1 (this block takes no keys)");
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
// ------------------------------------------------------------------- files

TEST(Files, ReadsFileAndRecordsPath) {
  const test::TempDir dir("strata_config_test");
  const std::string path = dir.file("net.prototxt");
  test::write_text(path, "name: \"lenet\"\nlayer {\n  bad = 1\n}\n");
  std::string m = message_of([&] { parse_config_file(path); });
  EXPECT_CONTAINS(m, path + ":3:7: expected ':' or '{' after key 'bad', found '='");

  test::write_text(path, "name: \"lenet\"\n");
  ConfigNode root = parse_config_file(path);
  EXPECT_EQ(root.get_string("name"), "lenet");
  EXPECT_EQ(root.find("name")->loc().str(), path + ":1:1");
}

TEST(Files, MissingFileIsIoError) {
  std::string m = message_of<IoError>([] { parse_config_file("/nonexistent/dir/x.prototxt"); });
  EXPECT_EQ(m, "cannot read config file '/nonexistent/dir/x.prototxt': No such file or directory");
  m = message_of<IoError>([] { parse_config_file("/tmp"); });
  EXPECT_EQ(m, "cannot read config file '/tmp': Is a directory");
}

// ------------------------------------------------------------ Caffe LeNet

TEST(LeNet, TrainValPrototxt) {
  ConfigNode net = parse_config_text(test::kCaffeLeNetTrainTest, "examples/mnist/lenet_train_test.prototxt");
  EXPECT_EQ(net.get_string("name"), "LeNet");
  EXPECT_NO_THROW(net.check_keys({"name", "layer"}, "net"));
  std::vector<const ConfigNode*> layers = net.all("layer");
  ASSERT_EQ(layers.size(), 11u);

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
  EXPECT_EQ(layers[6]->get_string("name"), "ip1");
  EXPECT_EQ(layers[6]->block("inner_product_param").get_int("num_output"), 500);
  EXPECT_EQ(layers[6]->count("param"), 2);
  EXPECT_EQ(layers[9]->get_string("name"), "accuracy");
  EXPECT_EQ(layers[9]->get_strings("bottom"), (std::vector<std::string>{"ip2", "label"}));
  EXPECT_TRUE(layers[10]->block("include").children().empty());  // absent: applies to every phase

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
