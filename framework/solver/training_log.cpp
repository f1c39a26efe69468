#include "framework/solver/training_log.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <sstream>

#include "framework/error.h"
#include "framework/io/json.h"

namespace strata {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  char buf[48];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  }
  return buf;
}

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

namespace {

std::string format_rate(double samples_per_second) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", samples_per_second);
  return buf;
}

std::string join_values(const NamedValues& values) {
  std::string s;
  for (const auto& kv : values) s += (s.empty() ? "" : ", ") + kv.first + " = " + format_number(kv.second);
  return s;
}

// The shortest text that reads back as the same float: logs stay short and
// lose nothing the f32 training loop computed.
void append_number(std::string* out, double v) {
  if (!std::isfinite(v)) {
    *out += "null";
    return;
  }
  char buf[32];
  const float f = static_cast<float>(v);
  const bool small_int = v == std::floor(v) && std::fabs(v) < 9.0e15;
  const auto res = small_int ? std::to_chars(buf, buf + sizeof buf, static_cast<long long>(v))
                             : std::to_chars(buf, buf + sizeof buf, f);
  out->append(buf, res.ptr);
}

// Builds one JSON object member by member, in the order written.
class Line {
 public:
  explicit Line(const char* event) {
    s_ = "{\"event\":";
    json_quote_to(event, &s_);
  }
  Line& num(const char* key, double v) {
    key_(key);
    append_number(&s_, v);
    return *this;
  }
  Line& str(const char* key, const std::string& v) {
    key_(key);
    json_quote_to(v, &s_);
    return *this;
  }
  Line& values(const char* key, const NamedValues& values) {
    key_(key);
    s_ += '{';
    for (size_t i = 0; i < values.size(); ++i) {
      if (i) s_ += ',';
      json_quote_to(values[i].first, &s_);
      s_ += ':';
      append_number(&s_, values[i].second);
    }
    s_ += '}';
    return *this;
  }
  std::string done() { return s_ + "}"; }

 private:
  void key_(const char* key) {
    s_ += ',';
    json_quote_to(key, &s_);
    s_ += ':';
  }
  std::string s_;
};

}  // namespace

// ---- console ----

void ConsolePrinter::on_start(const StartInfo& info) {
  out_ << "training " << info.net_name << ": " << info.summary;
  if (info.iter > 0) out_ << "; resuming at iteration " << info.iter;
  out_ << std::endl;
}

void ConsolePrinter::on_iteration(const IterationInfo& info) {
  out_ << "iter " << info.iter << "/" << info.max_iter << "  loss " << format_number(info.loss) << "  lr "
       << format_number(info.lr);
  if (info.samples_per_second > 0) out_ << "  " << format_rate(info.samples_per_second) << " samples/s";
  out_ << "  ETA " << format_duration(info.eta_seconds);
  for (const auto& kv : info.outputs) {
    // The loss is already shown (smoothed); other outputs (e.g. train accuracy) follow.
    if (kv.first == "loss") continue;
    out_ << "  " << kv.first << " " << format_number(kv.second);
  }
  out_ << std::endl;
}

void ConsolePrinter::on_test(const TestInfo& info) {
  out_ << "test @ " << info.iter << ": " << join_values(info.outputs) << std::endl;
}

void ConsolePrinter::on_snapshot(const SnapshotInfo& info) {
  out_ << "snapshot @ " << info.iter << ": " << info.weights_path << std::endl;
}

void ConsolePrinter::on_finish(const FinishInfo& info) {
  if (info.reason == FinishReason::kInterrupted) {
    out_ << "interrupted at iteration " << info.iter << " after " << format_duration(info.elapsed_seconds)
         << "; resume with the snapshot above" << std::endl;
  } else {
    out_ << "done: " << info.iter << " iterations in " << format_duration(info.elapsed_seconds) << std::endl;
  }
}

// ---- JSON lines ----

JsonLinesLog::JsonLinesLog(const std::string& path, LogMode mode) : path_(path) {
  file_ = std::fopen(path.c_str(), mode == LogMode::kAppend ? "ab" : "wb");
  if (!file_) fail<IoError>(path, ": cannot open the training log: ", std::strerror(errno));
}

JsonLinesLog::~JsonLinesLog() {
  if (file_) std::fclose(file_);
}

void JsonLinesLog::write_line(const std::string& json) {
  const std::string line = json + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    fail<IoError>(path_, ": cannot write the training log: ", std::strerror(errno));
  }
}

void JsonLinesLog::write_event(const std::string& event, const std::string& fields) {
  std::string line = Line(event.c_str()).done();
  if (!fields.empty()) line.insert(line.size() - 1, "," + fields);
  write_line(line);
}

void JsonLinesLog::on_start(const StartInfo& info) {
  write_line(Line("start")
                 .num("iter", static_cast<double>(info.iter))
                 .num("max_iter", static_cast<double>(info.max_iter))
                 .str("net", info.net_name)
                 .str("solver", info.summary)
                 .done());
}

void JsonLinesLog::on_iteration(const IterationInfo& info) {
  write_line(Line("iteration")
                 .num("iter", static_cast<double>(info.iter))
                 .num("max_iter", static_cast<double>(info.max_iter))
                 .num("loss", info.loss)
                 .num("lr", info.lr)
                 .num("samples_per_s", info.samples_per_second)
                 .num("eta_s", info.eta_seconds)
                 .num("time_s", info.elapsed_seconds)
                 .values("outputs", info.outputs)
                 .done());
}

void JsonLinesLog::on_test(const TestInfo& info) {
  write_line(Line("test")
                 .num("iter", static_cast<double>(info.iter))
                 .num("time_s", info.elapsed_seconds)
                 .values("outputs", info.outputs)
                 .done());
}

void JsonLinesLog::on_snapshot(const SnapshotInfo& info) {
  write_line(Line("snapshot")
                 .num("iter", static_cast<double>(info.iter))
                 .num("time_s", info.elapsed_seconds)
                 .str("weights", info.weights_path)
                 .str("state", info.state_path)
                 .done());
}

void JsonLinesLog::on_finish(const FinishInfo& info) {
  write_line(Line("finish")
                 .num("iter", static_cast<double>(info.iter))
                 .num("time_s", info.elapsed_seconds)
                 .str("status", info.reason == FinishReason::kInterrupted ? "interrupted" : "completed")
                 .done());
}

}  // namespace strata
