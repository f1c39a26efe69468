#include "parallel/rendezvous/env.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "framework/error.h"

namespace strata::parallel {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name, int fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > 1 << 20) {
    fail<ConfigError>("environment variable ", name, "='", v, "' is not a non-negative integer");
  }
  return static_cast<int>(n);
}

// Seconds with decimals ("0.5"), as milliseconds.
std::chrono::milliseconds env_seconds(const char* name, std::chrono::milliseconds fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (*end != '\0' || !(s >= 0) || s > 86400.0 * 365) {
    fail<ConfigError>("environment variable ", name, "='", v, "' is not a number of seconds (e.g. 5 or 0.5)");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000 + 0.5));
}

std::string format_seconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

}  // namespace

std::string RankEnv::describe() const {
  return "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + " on " + hostname;
}

RankEnv detect_rank_env() {
  RankEnv e;
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) e.hostname = host;
  if (env("STRATA_RANK") || env("STRATA_WORLD_SIZE")) {
    e.launcher = "strata";
    e.rank = env_int("STRATA_RANK", 0);
    e.world_size = env_int("STRATA_WORLD_SIZE", 1);
    e.local_rank = env_int("STRATA_LOCAL_RANK", e.rank);
    e.local_world_size = env_int("STRATA_LOCAL_WORLD_SIZE", e.world_size);
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    e.launcher = "mpirun";
    e.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    e.world_size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    e.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    e.local_world_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  } else if (env("SLURM_PROCID") && env("SLURM_NTASKS")) {
    e.launcher = "srun";
    e.rank = env_int("SLURM_PROCID", 0);
    e.world_size = env_int("SLURM_NTASKS", 1);
    e.local_rank = env_int("SLURM_LOCALID", 0);
    // SLURM_NTASKS_PER_NODE exists only with --ntasks-per-node; otherwise
    // SLURM_TASKS_PER_NODE ("4(x2),3") starts with this layout's first count.
    e.local_world_size = env_int("SLURM_NTASKS_PER_NODE", 0);
    if (e.local_world_size == 0) {
      const char* tpn = env("SLURM_TASKS_PER_NODE");
      e.local_world_size = tpn ? std::max(1, std::atoi(tpn)) : 1;
    }
  } else {
    e.launcher = "none";
  }
  if (e.world_size < 1) fail<ConfigError>("world size must be at least 1 (", e.launcher, " environment)");
  if (e.rank >= e.world_size) {
    fail<ConfigError>("rank ", e.rank, " is not below the world size ", e.world_size, " (", e.launcher,
                      " environment)");
  }
  e.timeout = std::chrono::seconds(env_int("STRATA_TIMEOUT_S", 300));
  e.heartbeat_interval = env_seconds("STRATA_HEARTBEAT_S", e.heartbeat_interval);
  e.heartbeat_timeout = env_seconds("STRATA_HEARTBEAT_TIMEOUT_S", e.heartbeat_timeout);
  if (e.heartbeat_interval.count() < 10) {
    fail<ConfigError>("STRATA_HEARTBEAT_S must be at least 0.01 (seconds between a rank's heartbeats)");
  }
  if (e.heartbeat_timeout.count() > 0 && e.heartbeat_timeout < 2 * e.heartbeat_interval) {
    fail<ConfigError>("STRATA_HEARTBEAT_TIMEOUT_S (", format_seconds(e.heartbeat_timeout),
                      ") must be at least twice STRATA_HEARTBEAT_S (", format_seconds(e.heartbeat_interval),
                      "), so that one late heartbeat does not fail the job; 0 turns heartbeats off");
  }
  if (!e.distributed()) return e;

  // The tcp backend needs rank 0's store address and the shared token; the
  // mpi backend does not, so their absence is reported by the backend that
  // needs them (create_communicator), not here.
  if (const char* master = env("STRATA_MASTER")) {
    const std::string m = master;
    const size_t colon = m.rfind(':');
    if (colon == std::string::npos || colon == 0) fail<ConfigError>("STRATA_MASTER='", m, "' is not host:port");
    const std::string port = m.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port) > 65535) {
      fail<ConfigError>("STRATA_MASTER='", m, "' has no valid port");
    }
    e.master_host = m.substr(0, colon);
    e.master_port = std::stoi(port);
  }
  if (const char* token = env("STRATA_TOKEN")) e.token = token;
  if (const char* host = env("STRATA_STORE_HOST")) {
    const std::string h = host;
    if (h == "launcher") {
      e.store_host = StoreHost::kLauncher;
    } else if (h != "rank0") {
      fail<ConfigError>("STRATA_STORE_HOST='", h, "' is not a store host; known: rank0, launcher");
    }
  }
  return e;
}

}  // namespace strata::parallel
