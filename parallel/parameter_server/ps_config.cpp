#include "parallel/parameter_server/ps_config.h"

#include <cctype>
#include <cstdlib>

#include "framework/error.h"

namespace strata::parallel {

namespace {

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

void check_staleness(int t, const std::string& where) {
  if (t < 0 || t > 1000) {
    fail<ConfigError>(where, ": staleness must be between 0 and 1000 steps (SSP's bound; 0 is SYNC), got ", t);
  }
}

}  // namespace

const std::vector<std::string>& ps_keys() {
  static const std::vector<std::string> keys = {"mode", "staleness", "placement", "servers", "compression"};
  return keys;
}

const char* ps_mode_name(PsMode m) {
  switch (m) {
    case PsMode::kSync: return "SYNC";
    case PsMode::kSsp: return "SSP";
    case PsMode::kAsync: break;
  }
  return "ASYNC";
}

const char* ps_placement_name(PsPlacement p) {
  switch (p) {
    case PsPlacement::kSharded: return "SHARDED";
    case PsPlacement::kColocated: return "COLOCATED";
    case PsPlacement::kCentral: break;
  }
  return "CENTRAL";
}

PsMode parse_ps_mode(const std::string& text, const std::string& where) {
  const std::string u = upper(text);
  if (u == "SYNC") return PsMode::kSync;
  if (u == "ASYNC") return PsMode::kAsync;
  if (u == "SSP") return PsMode::kSsp;
  fail<ConfigError>(where, ": the parameter-server mode must be SYNC, ASYNC or SSP, got '", text, "'");
}

PsPlacement parse_ps_placement(const std::string& text, const std::string& where) {
  const std::string u = upper(text);
  if (u == "CENTRAL") return PsPlacement::kCentral;
  if (u == "SHARDED") return PsPlacement::kSharded;
  if (u == "COLOCATED") return PsPlacement::kColocated;
  fail<ConfigError>(where, ": the parameter-server placement must be CENTRAL, SHARDED or COLOCATED, got '", text,
                    "'");
}

std::string ParameterServerConfig::summary(int workers, int shards) const {
  std::string s = std::string(ps_mode_name(mode));
  if (mode == PsMode::kSsp) s += " (staleness " + std::to_string(staleness) + ")";
  s += ", ";
  if (placement == PsPlacement::kCentral) {
    s += "a central server";
  } else if (placement == PsPlacement::kSharded) {
    s += std::to_string(shards) + " sharded server" + (shards == 1 ? "" : "s");
  } else {
    s += std::to_string(shards) + " shards colocated with the workers";
  }
  s += ", " + std::to_string(workers) + " worker" + (workers == 1 ? "" : "s");
  if (compression != GradCompression::kNone) s += ", gradients in " + std::string(grad_compression_name(compression));
  return s;
}

ParameterServerConfig parse_ps_config(const ConfigNode& parallel_block) {
  ParameterServerConfig c;
  const ConfigNode* ps = parallel_block.find("ps");
  if (!ps) return c;
  ps->check_keys(ps_keys(), "the solver's parallel { ps { } } block");
  c.enabled = true;
  c.mode = parse_ps_mode(ps->get_enum("mode", {"SYNC", "ASYNC", "SSP"}, "ASYNC"), "parallel { ps { mode } }");
  c.staleness = static_cast<int>(ps->get_int("staleness", c.staleness));
  if (const ConfigNode* n = ps->find("staleness")) check_staleness(c.staleness, n->loc().str());
  if (const ConfigNode* n = ps->find("placement")) {
    c.placement = parse_ps_placement(ps->get_enum("placement", {"CENTRAL", "SHARDED", "COLOCATED"}, "CENTRAL"),
                                     n->loc().str());
    c.placement_given = true;
  }
  if (const ConfigNode* n = ps->find("servers")) {
    c.servers = static_cast<int>(ps->get_int("servers", 0));
    if (c.servers < 0) fail<ConfigError>(n->loc().str(), ": servers must be 0 or more, got ", c.servers);
  }
  c.compression = parse_grad_compression(ps->get_enum("compression", {"NONE", "FP16", "BF16"}, "NONE"),
                                         "parallel { ps { compression } }");
  return c;
}

int PsRoles::shard_of(int rank) const {
  if (placement == PsPlacement::kColocated) return rank < workers ? rank : -1;
  return rank >= workers && rank < workers + servers ? rank - workers : -1;
}

int PsRoles::rank_of_shard(int shard) const {
  return placement == PsPlacement::kColocated ? shard : workers + shard;
}

std::string PsRoles::name_servers(const std::string& message) const {
  std::string out;
  size_t i = 0;
  while (i < message.size()) {
    const size_t at = message.find("rank ", i);
    if (at == std::string::npos || (at > 0 && std::isalnum(static_cast<unsigned char>(message[at - 1])))) {
      const size_t end = at == std::string::npos ? message.size() : at + 5;
      out += message.substr(i, end - i);
      i = end;
      continue;
    }
    size_t digits = at + 5;
    while (digits < message.size() && std::isdigit(static_cast<unsigned char>(message[digits]))) ++digits;
    const bool is_rank = digits > at + 5 && message.compare(digits, 4, " on ") == 0;
    const int shard = is_rank ? shard_of(std::stoi(message.substr(at + 5, digits - at - 5))) : -1;
    out += message.substr(i, at - i);
    if (shard >= 0) out += "server " + std::to_string(shard) + " (" + message.substr(at, digits - at) + ")";
    else out += message.substr(at, digits - at);
    i = digits;
  }
  return out;
}

PsRoles resolve_ps_roles(ParameterServerConfig& c, int world_size) {
  if (c.servers < 0) {
    const char* env = std::getenv("STRATA_PS_SERVERS");
    c.servers = 0;
    if (env && *env) {
      char* end = nullptr;
      const long v = std::strtol(env, &end, 10);
      if (*end != '\0' || v < 0 || v > 100000) {
        fail<ConfigError>("STRATA_PS_SERVERS must be a count of server processes, got '", env, "'");
      }
      c.servers = static_cast<int>(v);
    }
  }
  check_staleness(c.staleness, "--staleness");
  if (!c.placement_given) {
    c.placement = c.servers == 0 ? PsPlacement::kColocated : c.servers == 1 ? PsPlacement::kCentral
                                                                             : PsPlacement::kSharded;
  }
  PsRoles r;
  r.placement = c.placement;
  if (c.placement == PsPlacement::kColocated) {
    if (c.servers != 0) {
      fail<ConfigError>("parameter server: placement COLOCATED runs no server processes, but ", c.servers,
                        " were asked for (--servers / --ps-servers / servers:); drop them, or choose SHARDED");
    }
  } else if (c.servers == 0) {
    fail<ConfigError>("parameter server: placement ", ps_placement_name(c.placement),
                      " needs server processes: start them with `strata launch --nproc N --servers K` "
                      "(under mpirun or srun: --ps-servers K), or choose --ps-placement COLOCATED");
  } else if (c.placement == PsPlacement::kCentral && c.servers != 1) {
    fail<ConfigError>("parameter server: placement CENTRAL is one server process, but ", c.servers,
                      " were started; use --ps-placement SHARDED to split the parameters over them");
  }
  r.servers = c.servers;
  r.workers = world_size - c.servers;
  if (r.workers < 1) {
    fail<ConfigError>("parameter server: ", world_size, " rank", world_size == 1 ? "" : "s", " and ", c.servers,
                      " server", c.servers == 1 ? "" : "s", " leave no worker; start more ranks "
                      "(strata launch --nproc N counts the workers; --servers K adds the servers)");
  }
  r.shards = c.placement == PsPlacement::kColocated ? r.workers : r.servers;
  return r;
}

}  // namespace strata::parallel
