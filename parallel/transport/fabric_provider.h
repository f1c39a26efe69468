// libfabric plumbing of the fabric transport: the endpoint kind it asks
// for, provider lookup with messages that name what was found instead, and
// the one check macro for libfabric calls (only compiled with libfabric).
#pragma once

#include <rdma/fabric.h>

#include <memory>
#include <string>

namespace strata::parallel {

// The libfabric API version the transport is written against.
constexpr uint32_t kFabricApiVersion = FI_VERSION(1, 9);

struct FiInfoDeleter {
  void operator()(fi_info* info) const;
};

// fi_strerror of the loaded library.
std::string fabric_strerror(int err);
using FiInfoPtr = std::unique_ptr<fi_info, FiInfoDeleter>;

// Reliable datagram endpoints with tagged messages; the transport supplies
// per-operation contexts and registers local buffers when asked to.
// `provider` "" = any.
FiInfoPtr fabric_hints(const std::string& provider);
// fi_getinfo for those hints; `node` (an address of this machine, "" for
// none) picks the interface a software provider listens on. Null when none.
FiInfoPtr find_fabric(const std::string& provider, const std::string& node);

// Throws NetworkError "<self>: libfabric call failed: <expr> at <file>:<line>: <fi_strerror>".
[[noreturn]] void throw_fabric_error(const std::string& self, const char* expr, const char* file, int line,
                                     long rc);

}  // namespace strata::parallel

// For libfabric calls that return 0 or a negative error code.
#define STRATA_FABRIC_CHECK(self, expr)                                                         \
  do {                                                                                          \
    const long strata_rc_ = static_cast<long>(expr);                                            \
    if (strata_rc_ != 0) ::strata::parallel::throw_fabric_error(self, #expr, __FILE__, __LINE__, \
                                                                strata_rc_);                    \
  } while (0)
