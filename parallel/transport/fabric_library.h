// libfabric loaded at run time, on the first use of the fabric transport
// (only compiled with libfabric's headers).
//
// Why not link it: libfabric.so pulls in provider libraries (PSM, InfiniPath)
// whose load-time constructors install handlers for SIGINT, SIGTERM, SIGSEGV,
// SIGBUS, SIGABRT and SIGILL in every process that links it, even one that
// never communicates, replacing an ignored SIGTERM and strata train's
// Ctrl-C handling. Loaded with dlopen when a run asks for the transport, the
// process's handlers are saved before and put back after (its shm provider
// does the same on its first fi_getinfo). Everything else the transport
// calls (fi_domain, fi_tsend, fi_cq_read, ...) is an inline function of the
// headers that goes through the objects' operation tables.
#pragma once

#include <rdma/fabric.h>

#include <string>

namespace strata::parallel {

struct FabricApi {
  int (*getinfo)(uint32_t version, const char* node, const char* service, uint64_t flags, const fi_info* hints,
                 fi_info** info) = nullptr;
  void (*freeinfo)(fi_info* info) = nullptr;
  fi_info* (*dupinfo)(const fi_info* info) = nullptr;
  int (*fabric)(fi_fabric_attr* attr, fid_fabric** fabric, void* context) = nullptr;
  const char* (*strerror)(int errnum) = nullptr;
  uint32_t (*version)() = nullptr;
};

// The loaded library, or nullptr with *why saying what failed (library not
// found, a symbol missing).
const FabricApi* fabric_api(std::string* why = nullptr);
// fabric_api() or a ConfigError that says how to install libfabric.
const FabricApi& fabric_api_or_throw();

// Saves every signal handler; puts them back when destroyed.
class KeepSignalHandlers {
 public:
  KeepSignalHandlers();
  ~KeepSignalHandlers();
  KeepSignalHandlers(const KeepSignalHandlers&) = delete;
  KeepSignalHandlers& operator=(const KeepSignalHandlers&) = delete;

 private:
  static constexpr int kSignals = 65;
  struct Saved;
  Saved* saved_;
};

}  // namespace strata::parallel
