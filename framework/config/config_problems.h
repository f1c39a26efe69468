// Collects the problems of one config file so that a run reports all of them
// (up to a limit) instead of one per run: a user fixing a Caffe file learns
// every unknown key and layer type at once.
//
//   ConfigProblems problems;
//   for (const ConfigNode* layer : root.all("layer")) problems.check([&] { parse_layer_spec(*layer); });
//   problems.throw_if_any("net 'lenet'");
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "framework/error.h"

namespace strata {

// A ConfigError that holds several problems; what() lists them all.
class ConfigProblemsError : public ConfigError {
 public:
  ConfigProblemsError(const std::string& what, std::vector<std::string> problems, size_t total)
      : ConfigError(what), problems_(std::move(problems)), total_(total) {}
  const std::vector<std::string>& problems() const { return problems_; }  // at most the limit
  size_t total() const { return total_; }

 private:
  std::vector<std::string> problems_;
  size_t total_;
};

class ConfigProblems {
 public:
  // Problems shown; the count of the others is still reported.
  static constexpr size_t kLimit = 20;

  // Runs `check`; a ConfigError it throws is recorded instead of propagating
  // (each problem of a ConfigProblemsError separately). Other errors propagate.
  template <typename Check>
  void check(const Check& check) {
    try {
      check();
    } catch (const ConfigProblemsError& e) {
      for (const std::string& p : e.problems()) add(p);
      total_ += e.total() - e.problems().size();
    } catch (const ConfigError& e) {
      add(e.what());
    }
  }
  void add(const std::string& message);
  bool empty() const { return total_ == 0; }
  size_t total() const { return total_; }

  // Nothing when there are no problems; the problem itself (unchanged) when
  // there is one; otherwise a ConfigProblemsError:
  //   "<subject> has 3 problems:\n  1. ...\n  2. ...\n  3. ..."
  void throw_if_any(const std::string& subject) const;

 private:
  std::vector<std::string> messages_;
  size_t total_ = 0;
};

}  // namespace strata
