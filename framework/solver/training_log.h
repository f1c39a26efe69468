// Progress reporting of a training run. The Solver calls a TrainingObserver
// at fixed points; this file also holds the two standard observers: a console
// printer and a JSON-lines log writer.
//
// Console:
//   iter 500/2000  loss 0.1234  lr 0.01  1234 samples/s  ETA 0:12
//   test @ 500: accuracy = 0.973, loss = 0.09
// JSON lines (one object per line, flushed per line):
//   {"event":"iteration","iter":500,"max_iter":2000,"loss":0.1234,"lr":0.01,"samples_per_s":1234,"eta_s":12,"time_s":3.2}
//   {"event":"test","iter":500,"time_s":3.4,"outputs":{"accuracy":0.973,"loss":0.09}}
//   {"event":"start",...} {"event":"snapshot",...} {"event":"finish",...}
#pragma once

#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace strata {

// Scalar results by blob name, in the net's output order.
using NamedValues = std::vector<std::pair<std::string, double>>;

struct StartInfo {
  int64_t iter = 0;      // first iteration to run (> 0 after a resume)
  int64_t max_iter = 0;
  std::string net_name;
  std::string summary;   // the solver settings in one line
};

struct IterationInfo {
  int64_t iter = 0;                 // iterations completed
  int64_t max_iter = 0;
  double loss = 0.0;                // smoothed over average_loss iterations
  double lr = 0.0;                  // rate used by the last update
  double samples_per_second = 0.0;  // over the iterations since the previous report
  double eta_seconds = 0.0;
  double elapsed_seconds = 0.0;     // since solve() started
  NamedValues outputs;              // the TRAIN net's scalar outputs at the last iteration
};

struct TestInfo {
  int64_t iter = 0;
  double elapsed_seconds = 0.0;
  NamedValues outputs;  // each TEST output averaged over test_iter batches
};

struct SnapshotInfo {
  int64_t iter = 0;
  std::string weights_path;
  std::string state_path;
  double elapsed_seconds = 0.0;
};

enum class FinishReason { kCompleted, kInterrupted };

struct FinishInfo {
  int64_t iter = 0;
  FinishReason reason = FinishReason::kCompleted;
  double elapsed_seconds = 0.0;
};

class TrainingObserver {
 public:
  virtual ~TrainingObserver() = default;
  virtual void on_start(const StartInfo&) {}
  virtual void on_iteration(const IterationInfo&) {}
  virtual void on_test(const TestInfo&) {}
  virtual void on_snapshot(const SnapshotInfo&) {}
  virtual void on_finish(const FinishInfo&) {}
};

// "0:12", "12:05", "1:02:03".
std::string format_duration(double seconds);
// Numbers as a person reads them: 4 significant digits ("0.1234", "1.2e-05").
std::string format_number(double v);

class ConsolePrinter final : public TrainingObserver {
 public:
  explicit ConsolePrinter(std::ostream& out) : out_(out) {}
  void on_start(const StartInfo& info) override;
  void on_iteration(const IterationInfo& info) override;
  void on_test(const TestInfo& info) override;
  void on_snapshot(const SnapshotInfo& info) override;
  void on_finish(const FinishInfo& info) override;

 private:
  std::ostream& out_;
};

enum class LogMode { kTruncate, kAppend };

// Writes one JSON object per event and flushes it, so the file can be
// followed while training runs and survives a crash up to the last line.
class JsonLinesLog final : public TrainingObserver {
 public:
  // IoError when the file cannot be opened. kAppend continues a log on resume.
  JsonLinesLog(const std::string& path, LogMode mode);
  ~JsonLinesLog() override;
  JsonLinesLog(const JsonLinesLog&) = delete;
  JsonLinesLog& operator=(const JsonLinesLog&) = delete;

  const std::string& path() const { return path_; }
  void on_start(const StartInfo& info) override;
  void on_iteration(const IterationInfo& info) override;
  void on_test(const TestInfo& info) override;
  void on_snapshot(const SnapshotInfo& info) override;
  void on_finish(const FinishInfo& info) override;
  // A line of another part of the run (a parameter server's statistics):
  // {"event":"<event>",<fields>}, where `fields` is a JSON object's members
  // without the braces ("\"iter\":100,\"lost\":[2]").
  void write_event(const std::string& event, const std::string& fields);

 private:
  void write_line(const std::string& json);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace strata
