#include "framework/config/config_problems.h"

namespace strata {

void ConfigProblems::add(const std::string& message) {
  ++total_;
  if (messages_.size() < kLimit) messages_.push_back(message);
}

void ConfigProblems::throw_if_any(const std::string& subject) const {
  if (total_ == 0) return;
  if (total_ == 1) throw ConfigError(messages_.front());
  std::string what = subject + " has " + std::to_string(total_) + " problems:";
  for (size_t i = 0; i < messages_.size(); ++i) {
    // Continuation lines of one problem stay under it.
    std::string m = messages_[i];
    for (size_t at = m.find('\n'); at != std::string::npos; at = m.find('\n', at + 6)) m.replace(at, 1, "\n     ");
    what += "\n  " + std::to_string(i + 1) + ". " + m;
  }
  if (total_ > messages_.size()) {
    what += "\n  ... and " + std::to_string(total_ - messages_.size()) + " more (the first " +
            std::to_string(kLimit) + " are shown; fix these and run again)";
  }
  throw ConfigProblemsError(what, messages_, total_);
}

}  // namespace strata
