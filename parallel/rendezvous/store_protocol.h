// The store's wire format (described in store.h) and the limits both sides
// enforce: shared by the in-process store, the TCP server and the client.
// Internal to parallel/; not part of the public store interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::parallel::store_protocol {

inline constexpr char kMagic[4] = {'S', 'T', 'R', 'S'};
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxTokenBytes = 4096;
inline constexpr uint64_t kMaxValueBytes = 256ull << 20;

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kDelete = 5, kHeartbeat = 6, kFail = 7 };
// kJobFailed: the job failed (the value says which rank and why); the server
// answers every request so from then on, and answers requests it held.
enum Status : uint8_t { kOk = 0, kNotFound = 1, kError = 2, kJobFailed = 3 };

// The value of a HEARTBEAT request: u8 phase, u64 limit in milliseconds (how
// long the server may hear nothing more from this rank before it fails the
// job). The key is the rank's host name, for the message.
// kBeatDroppable: the same from a rank the job can lose (store.h).
enum BeatPhase : uint8_t { kBeat = 1, kGoodbye = 2, kBeatDroppable = 3 };

const char* op_name(uint8_t op);

// Integers on the wire are little-endian: framework/io/wire_format.h.

bool parse_int64(const std::string& s, int64_t* out);

// ADD on a stored value: the new value, or an error message.
bool add_to(const std::string* current, const std::string& key, int64_t delta, std::string* result);

// Throws ConfigError when the key or the value is over the protocol's limits.
void check_sizes(const std::string& key, size_t value_bytes);

// "'a', 'b' and 3 more": the first few keys of a long list.
std::string list_keys(const std::vector<std::string>& keys);

}  // namespace strata::parallel::store_protocol
