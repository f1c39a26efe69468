#include "parallel/model_parallel/model_parallel_config.h"

#include <cctype>
#include <cstdlib>

#include "framework/error.h"

namespace strata::parallel {

std::string PipelineConfig::summary() const {
  return std::to_string(stages) + " stage" + (stages == 1 ? "" : "s") + ", " + std::to_string(micro_batches) +
         " micro-batch" + (micro_batches == 1 ? "" : "es") + ", " + pipeline_schedule_name(schedule);
}

const std::vector<std::string>& pipeline_keys() {
  static const std::vector<std::string> keys = {"stages", "micro_batches", "schedule"};
  return keys;
}

const std::vector<std::string>& tensor_keys() {
  static const std::vector<std::string> keys = {"size"};
  return keys;
}

PipelineSchedule parse_pipeline_schedule(const std::string& text, const std::string& where) {
  std::string up = text;
  for (char& ch : up) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (up == "GPIPE") return PipelineSchedule::kGPipe;
  if (up == "ONE_F_ONE_B" || up == "1F1B") return PipelineSchedule::kOneFOneB;
  fail<ConfigError>(where, ": unknown pipeline schedule '", text, "'; known: GPIPE (gpipe), ONE_F_ONE_B (1f1b)");
}

const char* pipeline_schedule_name(PipelineSchedule s) {
  return s == PipelineSchedule::kGPipe ? "GPIPE" : "ONE_F_ONE_B";
}

int parse_positive_count(const std::string& text, const std::string& where) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 1 || v > 1000000) {
    fail<ConfigError>(where, ": expected a positive whole number, got '", text, "'");
  }
  return static_cast<int>(v);
}

ModelParallelConfig parse_model_parallel_config(const ConfigNode& parallel_block) {
  ModelParallelConfig c;
  const ConfigNode& pipe = parallel_block.block("pipeline");
  pipe.check_keys(pipeline_keys(), "the solver's parallel { pipeline { } } block");
  auto positive = [](const ConfigNode& block, const std::string& key, int def) {
    const int64_t v = block.get_int(key, def);
    if (v < 1 || v > 1000000) {
      fail<ConfigError>(key, " at ", block.find(key)->loc().str(), " must be a positive count, got ", v);
    }
    return static_cast<int>(v);
  };
  c.pipeline.stages = positive(pipe, "stages", 1);
  c.pipeline.micro_batches = positive(pipe, "micro_batches", 1);
  if (const ConfigNode* s = pipe.find("schedule")) {
    c.pipeline.schedule = parse_pipeline_schedule(s->as_string(), "schedule at " + s->loc().str());
  }
  const ConfigNode& tensor = parallel_block.block("tensor");
  tensor.check_keys(tensor_keys(), "the solver's parallel { tensor { } } block");
  c.tensor_size = positive(tensor, "size", 1);
  return c;
}

}  // namespace strata::parallel
