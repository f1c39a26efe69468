// The strata subcommands. Each parses its own flags and returns the exit code.
#pragma once

namespace strata::cli {

int train_main(int argc, char** argv);
int test_main(int argc, char** argv);
int time_main(int argc, char** argv);
int launch_main(int argc, char** argv);

// Applies --threads (default: all cores) and checks --device.
void apply_common_flags(const class Args& args);

}  // namespace strata::cli
