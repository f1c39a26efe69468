#include "parallel/data_parallel/data_parallel_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "framework/error.h"
#include "parallel/transport/transport_select.h"

namespace strata::parallel {

namespace {

const std::vector<std::string>& backends() {
  static const std::vector<std::string> v = {"auto", "tcp", "nccl", "mpi"};
  return v;
}

const std::vector<std::string>& algorithms() {
  static const std::vector<std::string> v = {"auto", "ring", "tree"};
  return v;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

void check_bucket_mb(double mb, const std::string& where) {
  // Past 64 GiB a bucket is surely a typo (and the byte count could overflow).
  if (!(mb > 0.0) || !std::isfinite(mb) || mb > 65536.0) {
    fail<ConfigError>(where, ": bucket_mb must be > 0 (MiB of gradients per allreduce), got ", mb);
  }
}

}  // namespace

const std::vector<std::string>& parallel_keys() {
  static const std::vector<std::string> keys = {"data", "pipeline", "tensor", "ps"};  // pipeline, tensor: model_parallel_config.h; ps: ps_config.h
  return keys;
}

const std::vector<std::string>& data_parallel_keys() {
  static const std::vector<std::string> keys = {"backend",  "algorithm",   "transport", "bucket_mb",
                                                 "overlap", "compression", "shard"};
  return keys;
}

size_t DataParallelConfig::bucket_bytes() const {
  const double bytes = bucket_mb * 1024.0 * 1024.0;
  return std::max<size_t>(sizeof(float), static_cast<size_t>(bytes));
}

std::string DataParallelConfig::summary() const {
  char mb[32];
  std::snprintf(mb, sizeof mb, "%g", bucket_mb);
  return std::string(backend_choice_name(backend)) + "/" + allreduce_algorithm_name(algorithm) + ", transport " +
         transport_choice_name(transport) + ", " + mb + " MB buckets, overlap " + (overlap == Overlap::kOn ? "on" : "off") +
         ", compression " + grad_compression_name(compression) +
         (shard == ShardStage::kNone ? std::string() : std::string(", shard ") + shard_stage_name(shard));
}

const std::vector<std::string>& shard_stage_names() {
  static const std::vector<std::string> v = {"NONE", "OPTIMIZER", "GRADIENTS", "PARAMETERS"};
  return v;
}

const char* shard_stage_name(ShardStage s) { return shard_stage_names().at(static_cast<size_t>(s)).c_str(); }

ShardStage parse_shard_stage(const std::string& name, const std::string& where) {
  const std::vector<std::string>& names = shard_stage_names();
  const auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) {
    fail<ConfigError>(where, ": shard must be one of ", join(names), " (what each data-parallel rank keeps only a "
                      "slice of), got '", name, "'");
  }
  return static_cast<ShardStage>(it - names.begin());
}

DataParallelConfig parse_data_parallel_config(const ConfigNode& parallel_block) {
  parallel_block.check_keys(parallel_keys(), "the solver's parallel block");
  const ConfigNode& data = parallel_block.block("data");
  data.check_keys(data_parallel_keys(), "the solver's parallel { data { } } block");
  DataParallelConfig c;
  c.backend = parse_backend_choice(data.get_enum("backend", backends(), "auto"), "backend");
  c.algorithm = parse_allreduce_algorithm(data.get_enum("algorithm", algorithms(), "auto"));
  c.transport = parse_transport_choice(data.get_enum("transport", transport_choice_names(), "auto"), "transport");
  c.bucket_mb = data.get_double("bucket_mb", c.bucket_mb);
  if (const ConfigNode* n = data.find("bucket_mb")) check_bucket_mb(c.bucket_mb, n->loc().str());
  c.overlap = data.get_bool("overlap", true) ? Overlap::kOn : Overlap::kOff;
  const std::string comp = data.get_enum("compression", {"NONE", "FP16", "BF16"}, "NONE");
  c.compression = parse_grad_compression(comp, "compression");
  if (const ConfigNode* n = data.find("shard")) {
    c.shard = parse_shard_stage(n->as_string(), "shard at " + n->loc().str());
  }
  return c;
}

BackendChoice parse_dp_backend(const std::string& text, const std::string& where) {
  if (std::find(backends().begin(), backends().end(), text) == backends().end()) {
    fail<ConfigError>(where, ": backend must be one of ", join(backends()), ", got '", text, "'");
  }
  return parse_backend_choice(text, where);
}

AllreduceAlgorithm parse_dp_algorithm(const std::string& text, const std::string& where) {
  if (std::find(algorithms().begin(), algorithms().end(), text) == algorithms().end()) {
    fail<ConfigError>(where, ": algorithm must be one of ", join(algorithms()), ", got '", text, "'");
  }
  return parse_allreduce_algorithm(text);
}

TransportChoice parse_dp_transport(const std::string& text, const std::string& where) {
  return parse_transport_choice(text, where);
}

double parse_bucket_mb(const std::string& text, const std::string& where) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0') fail<ConfigError>(where, ": expected a number of MiB, got '", text, "'");
  check_bucket_mb(v, where);
  return v;
}

}  // namespace strata::parallel
