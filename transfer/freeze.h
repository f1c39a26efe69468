// Freezing layers for fine-tuning: `--freeze PATTERN` on the command line.
// A frozen layer's parameters get lr_mult 0 (the Net then runs no backward
// through a frozen prefix at all) and a frozen BatchNorm normalises with its
// running statistics in TRAIN as well, leaving them unchanged.
#pragma once

#include <string>
#include <vector>

#include "framework/net.h"

namespace strata::transfer {

// Shell-style match of a whole layer name: '*' any run of characters, '?' one.
bool glob_match(const std::string& pattern, const std::string& name);

struct FreezeReport {
  std::vector<std::string> layers;       // matched layer names, in net order
  std::vector<std::string> params;       // parameters whose lr_mult became 0
  std::vector<std::string> batch_norms;  // BatchNorm layers switched to running statistics
  std::string str() const;               // one line for the console
};

// Freezes every layer whose name matches one of `patterns`. ConfigError
// listing the layer names when a pattern matches none; `flag` ("--freeze")
// names the option in that message.
FreezeReport freeze_layers(Net& net, const std::vector<std::string>& patterns, const std::string& flag = "--freeze");

}  // namespace strata::transfer
