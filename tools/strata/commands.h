// The strata subcommands. Each parses its own flags and returns the exit code.
#pragma once

#include "framework/tensor.h"

namespace strata::cli {

int train_main(int argc, char** argv);
int test_main(int argc, char** argv);
int time_main(int argc, char** argv);
int launch_main(int argc, char** argv);
int embed_main(int argc, char** argv);
int estimate_main(int argc, char** argv);
int convert_main(int argc, char** argv);
int check_layers_main(int argc, char** argv);
int layers_main(int argc, char** argv);

// Takes every `--plugin PATH` (or --plugin=PATH) out of argv and loads the
// layer libraries of STRATA_PLUGINS, then those (framework/plugin.h), for
// any command but launch (whose flags after `--` are its ranks'; they load
// their own). Returns the new argc.
int load_plugin_flags(int argc, char** argv);

// Applies --threads (default: all cores) and checks --device.
void apply_common_flags(const class Args& args);
// --device: cpu (default), cuda or cuda:N. A CUDA device is checked to
// exist and made current; in a build without CUDA it is a ConfigError. Plain
// "cuda" gives local rank r of a multi-process run GPU r (round robin).
Device device_flag(const class Args& args);

enum class FlagsParsed { kRun, kHelpShown };
// Parses a subcommand's flags (argv[2..]); prints the help and returns
// kHelpShown for --help, else applies the common flags and returns kRun.
FlagsParsed parse_command_flags(class Args& args, int argc, char** argv);

// --iterations (default 50); a ConfigError unless positive.
int iterations_flag(const class Args& args);

}  // namespace strata::cli
