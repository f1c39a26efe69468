// The rendezvous key-value store: rank 0 serves it over TCP, every rank
// (rank 0 included) is a client. Used to exchange addresses and ids, and for
// barriers. Every wait has a timeout whose message names what did not arrive.
//
// Wire protocol (all integers little-endian), one request/response at a time
// per connection:
//   client hello:  "STRS" u32 version, u32 rank, u32 token_len, token bytes
//   server hello:  "STRS" u32 status (0 ok, 1 refused)
//   request:       u8 op (SET=1 GET=2 ADD=3 CHECK=4 DELETE=5), u32 key_len, key,
//                  u64 value_len, value          (sizes checked before reading)
//   response:      u8 status (0 ok, 1 not found, 2 error), u64 value_len, value
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strata::parallel {

// What the collectives and launch code need from a store. A TCP client and
// an in-process store (for ranks-as-threads tests) implement it.
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits until the key exists (up to the timeout), then returns its value.
  virtual std::string get(const std::string& key) = 0;
  // Atomically adds delta to the integer stored at key (0 if absent); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  virtual bool check(const std::string& key) = 0;
  // Waits until every key exists; the timeout error lists the missing keys.
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;
};

// Every rank sets "<name>/<rank>" and waits for all; a timeout names the
// ranks that did not arrive.
void store_barrier(Store& store, const std::string& name, int rank, int world_size);

// In-process store shared by threads (tests, single-process use).
std::shared_ptr<Store> make_memory_store(std::chrono::milliseconds timeout);

// Rank 0's server: listens on `port` (0 = any free port), accepts clients
// presenting `token`, refuses and logs others. Serves from a background
// thread until destroyed.
class StoreServer {
 public:
  StoreServer(const std::string& bind_host, int port, std::string token);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A client connection; retries connecting until the timeout (rank 0 may not
// be listening yet). Errors name the server address and this rank.
std::unique_ptr<Store> connect_store(const std::string& host, int port, const std::string& token, int rank,
                                     std::chrono::milliseconds timeout);

}  // namespace strata::parallel
