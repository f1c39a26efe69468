#ifdef STRATA_HAVE_LIBFABRIC
#include "parallel/transport/fabric_library.h"

#include <dlfcn.h>
#include <signal.h>

#include <mutex>

#include "framework/error.h"

namespace strata::parallel {

struct KeepSignalHandlers::Saved {
  struct sigaction action {};
  bool ok = false;
};

KeepSignalHandlers::KeepSignalHandlers() : saved_(new Saved[kSignals]) {
  for (int sig = 1; sig < kSignals; ++sig) saved_[sig].ok = ::sigaction(sig, nullptr, &saved_[sig].action) == 0;
}

KeepSignalHandlers::~KeepSignalHandlers() {
  for (int sig = 1; sig < kSignals; ++sig) {
    if (saved_[sig].ok && sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &saved_[sig].action, nullptr);
  }
  delete[] saved_;
}

namespace {

struct Loaded {
  FabricApi api;
  std::string why;  // empty when loaded
};

template <typename F>
bool bind(void* lib, const char* name, F& fn, std::string& why) {
  fn = reinterpret_cast<F>(::dlsym(lib, name));
  if (!fn && why.empty()) why = std::string("libfabric.so.1 lacks ") + name;
  return fn != nullptr;
}

const Loaded& load() {
  static const Loaded loaded = [] {
    Loaded l;
    void* lib = nullptr;
    {
      const KeepSignalHandlers keep;
      lib = ::dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    }
    if (!lib) {
      const char* err = ::dlerror();
      l.why = std::string("cannot load libfabric.so.1: ") + (err ? err : "not found");
      return l;
    }
    // Never dlclose'd: providers keep threads and handlers of their own.
    bool ok = bind(lib, "fi_getinfo", l.api.getinfo, l.why);
    ok = bind(lib, "fi_freeinfo", l.api.freeinfo, l.why) && ok;
    ok = bind(lib, "fi_dupinfo", l.api.dupinfo, l.why) && ok;
    ok = bind(lib, "fi_fabric", l.api.fabric, l.why) && ok;
    ok = bind(lib, "fi_strerror", l.api.strerror, l.why) && ok;
    ok = bind(lib, "fi_version", l.api.version, l.why) && ok;
    if (!ok) l.api = FabricApi{};
    return l;
  }();
  return loaded;
}

}  // namespace

const FabricApi* fabric_api(std::string* why) {
  const Loaded& l = load();
  if (!l.why.empty()) {
    if (why) *why = l.why;
    return nullptr;
  }
  return &l.api;
}

const FabricApi& fabric_api_or_throw() {
  std::string why;
  const FabricApi* api = fabric_api(&why);
  if (!api) {
    fail<ConfigError>("the rdma transport needs libfabric at run time, but ", why,
                      "; install it (Debian/Ubuntu: apt-get install libfabric1, or tools/install_deps.sh), or use "
                      "--dp-transport tcp, shm or auto");
  }
  return *api;
}

}  // namespace strata::parallel
#endif  // STRATA_HAVE_LIBFABRIC
