// Child processes for the multi-process tests (parallel_process_test.cpp,
// parallel_nccl_test.cpp): start one with extra environment and its output
// in a log file, and wait for it with a deadline.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace strata::test {

// Starts argv (argv[0] a path) with this process's environment plus `env`
// (NAME=value entries, overriding), stdout and stderr to `log_path`.
// Everything is prepared before fork, so the child only calls
// async-signal-safe functions. Returns the child's pid.
pid_t spawn_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                    const std::string& log_path);

// Waits for `pid` until `deadline`; returns its exit status (128 + signal
// when a signal ended it), -1 after killing it at the deadline, -2 when it
// is not a child of this process.
int wait_for_process(pid_t pid, std::chrono::steady_clock::time_point deadline);

}  // namespace strata::test
