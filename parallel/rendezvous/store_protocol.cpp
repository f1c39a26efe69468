// Helpers for the store's wire format and limits (store_protocol.h).
#include "parallel/rendezvous/store_protocol.h"

#include <cerrno>
#include <cstdlib>

#include "framework/error.h"

namespace strata::parallel::store_protocol {

const char* op_name(uint8_t op) {
  switch (op) {
    case kSet: return "SET";
    case kGet: return "GET";
    case kAdd: return "ADD";
    case kCheck: return "CHECK";
    case kDelete: return "DELETE";
    case kHeartbeat: return "HEARTBEAT";
    case kFail: return "FAIL";
    default: return "unknown operation";
  }
}

bool parse_int64(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool add_to(const std::string* current, const std::string& key, int64_t delta, std::string* result) {
  int64_t base = 0;
  if (current && !parse_int64(*current, &base)) {
    *result = "ADD '" + key + "': the stored value is not an integer";
    return false;
  }
  *result = std::to_string(base + delta);
  return true;
}

void check_sizes(const std::string& key, size_t value_bytes) {
  if (key.size() > kMaxKeyBytes) {
    fail<ConfigError>("store key '", key.substr(0, 64), "...' is ", key.size(), " bytes; keys are limited to ",
                      kMaxKeyBytes);
  }
  if (value_bytes > kMaxValueBytes) {
    fail<ConfigError>("store value for key '", key, "' is ", value_bytes, " bytes; values are limited to ",
                      kMaxValueBytes, " (256 MiB)");
  }
}

std::string list_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 10;
  std::string s;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i) s += ", ";
    s += "'" + keys[i] + "'";
  }
  if (keys.size() > kShown) s += " and " + std::to_string(keys.size() - kShown) + " more";
  return s;
}

}  // namespace strata::parallel::store_protocol
