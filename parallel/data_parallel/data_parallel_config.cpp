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
                                                 "overlap", "compression"};
  return keys;
}

size_t DataParallelConfig::bucket_bytes() const {
  const double bytes = bucket_mb * 1024.0 * 1024.0;
  return std::max<size_t>(sizeof(float), static_cast<size_t>(bytes));
}

std::string DataParallelConfig::summary() const {
  char mb[32];
  std::snprintf(mb, sizeof mb, "%g", bucket_mb);
  return backend + "/" + algorithm + ", transport " + transport + ", " + mb + " MB buckets, overlap " + (overlap == Overlap::kOn ? "on" : "off") +
         ", compression " + grad_compression_name(compression);
}

DataParallelConfig parse_data_parallel_config(const ConfigNode& parallel_block) {
  parallel_block.check_keys(parallel_keys(), "the solver's parallel block");
  const ConfigNode& data = parallel_block.block("data");
  data.check_keys(data_parallel_keys(), "the solver's parallel { data { } } block");
  DataParallelConfig c;
  c.backend = data.get_enum("backend", backends(), c.backend);
  c.algorithm = data.get_enum("algorithm", algorithms(), c.algorithm);
  c.transport = data.get_enum("transport", transport_choice_names(), c.transport);
  c.bucket_mb = data.get_double("bucket_mb", c.bucket_mb);
  if (const ConfigNode* n = data.find("bucket_mb")) check_bucket_mb(c.bucket_mb, n->loc().str());
  c.overlap = data.get_bool("overlap", true) ? Overlap::kOn : Overlap::kOff;
  const std::string comp = data.get_enum("compression", {"NONE", "FP16", "BF16"}, "NONE");
  c.compression = parse_grad_compression(comp, "compression");
  return c;
}

void check_backend(const std::string& backend, const std::string& where) {
  if (std::find(backends().begin(), backends().end(), backend) == backends().end()) {
    fail<ConfigError>(where, ": backend must be one of ", join(backends()), ", got '", backend, "'");
  }
}

void check_algorithm(const std::string& algorithm, const std::string& where) {
  if (std::find(algorithms().begin(), algorithms().end(), algorithm) == algorithms().end()) {
    fail<ConfigError>(where, ": algorithm must be one of ", join(algorithms()), ", got '", algorithm, "'");
  }
}

void check_transport(const std::string& transport, const std::string& where) {
  parse_transport_choice(transport, where);
}

double parse_bucket_mb(const std::string& text, const std::string& where) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0') fail<ConfigError>(where, ": expected a number of MiB, got '", text, "'");
  check_bucket_mb(v, where);
  return v;
}

}  // namespace strata::parallel
