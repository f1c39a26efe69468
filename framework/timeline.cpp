#include "framework/timeline.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "framework/error.h"
#include "framework/io/json.h"

namespace strata {

std::atomic<bool> Timeline::on_{false};

namespace {

// Past this many events a run records no more (a note in the trace says so):
// about 100 MB of JSON.
constexpr size_t kMaxEvents = 1000000;

struct State {
  std::mutex mu;
  int pid = 0;
  std::string process_name;
  std::string events;
  size_t count = 0;
  size_t dropped = 0;
  std::map<std::thread::id, int> tids;
  std::map<std::string, int> lanes;
  std::map<int, std::string> names;  // tid -> row name
};

State& state() {
  static State s;
  return s;
}

int tid_of_this_thread(State& s) {  // caller holds s.mu
  auto [it, fresh] = s.tids.emplace(std::this_thread::get_id(), static_cast<int>(s.tids.size()));
  if (fresh && !s.names.count(it->second)) s.names[it->second] = it->second == 0 ? "main" : "thread " + std::to_string(it->second);
  return it->second;
}

void append_meta(std::string& out, int pid, int tid, const char* what, const std::string& name) {
  if (!out.empty()) out += ',';
  out += "{\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) + ",\"name\":\"" + what +
         "\",\"args\":{\"name\":";
  json_quote_to(name, &out);
  out += "}}";
}

}  // namespace

void Timeline::start(int pid, const std::string& process_name) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.pid = pid;
  s.process_name = process_name;
  s.events.clear();
  s.count = s.dropped = 0;
  s.tids.clear();
  s.lanes.clear();
  s.names.clear();
  tid_of_this_thread(s);  // the starting thread is "main", row 0
  on_.store(true);
}

int64_t Timeline::now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void Timeline::record(const char* category, const std::string& name, int64_t begin_us, int64_t end_us,
                      const char* lane) {
  if (!on()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.count >= kMaxEvents) {
    ++s.dropped;
    return;
  }
  int tid;
  if (lane) {
    auto [it, fresh] = s.lanes.emplace(lane, 1000 + static_cast<int>(s.lanes.size()));
    if (fresh) s.names[it->second] = lane;
    tid = it->second;
  } else {
    tid = tid_of_this_thread(s);
  }
  if (!s.events.empty()) s.events += ',';
  s.events += "{\"ph\":\"X\",\"cat\":\"";
  s.events += category;
  s.events += "\",\"name\":";
  json_quote_to(name, &s.events);
  s.events += ",\"pid\":" + std::to_string(s.pid) + ",\"tid\":" + std::to_string(tid) +
              ",\"ts\":" + std::to_string(begin_us) + ",\"dur\":" + std::to_string(std::max<int64_t>(0, end_us - begin_us)) +
              "}";
  ++s.count;
}

void Timeline::name_this_thread(const std::string& name) {
  if (!on()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.names[tid_of_this_thread(s)] = name;
}

std::string Timeline::take_events() {
  on_.store(false);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::string out;
  append_meta(out, s.pid, 0, "process_name", s.process_name);
  for (const auto& [tid, name] : s.names) append_meta(out, s.pid, tid, "thread_name", name);
  if (s.dropped) {
    append_meta(out, s.pid, 0, "process_labels",
                std::to_string(s.dropped) + " events not recorded (more than " + std::to_string(kMaxEvents) + ")");
  }
  if (!s.events.empty()) out += "," + s.events;
  s.events.clear();
  return out;
}

void Timeline::write_trace(const std::string& path, const std::vector<std::string>& bodies) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) fail<IoError>(path, ": cannot write the timeline: ", std::strerror(errno));
  std::string head = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size();
  bool first = true;
  for (const std::string& b : bodies) {
    if (b.empty()) continue;
    if (!first) ok = ok && std::fputc(',', f) != EOF;
    ok = ok && std::fwrite(b.data(), 1, b.size(), f) == b.size();
    first = false;
  }
  ok = ok && std::fputs("]}\n", f) != EOF;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) fail<IoError>(path, ": cannot write the timeline: ", std::strerror(errno));
}

}  // namespace strata
