// Provider lookup for the fabric transport, and the build's answer to "is
// there a fabric transport at all" (stubs when built without libfabric).
#include "parallel/transport/fabric_transport.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "framework/error.h"

#ifdef STRATA_HAVE_LIBFABRIC
#include <rdma/fi_domain.h>

#include "parallel/transport/fabric_library.h"
#include "parallel/transport/fabric_provider.h"
#include "parallel/socket/socket.h"
#endif

namespace strata::parallel {

std::string fabric_provider_choice(const std::string& provider) {
  if (!provider.empty()) return provider;
  const char* env = std::getenv("STRATA_FABRIC_PROVIDER");
  if (env && *env) return env;
  return "verbs";
}

#ifdef STRATA_HAVE_LIBFABRIC

void FiInfoDeleter::operator()(fi_info* info) const {
  const FabricApi* api = fabric_api();
  if (info && api) api->freeinfo(info);  // info exists only if the library loaded
}

FiInfoPtr fabric_hints(const std::string& provider) {
  FiInfoPtr hints(fabric_api_or_throw().dupinfo(nullptr));
  if (!hints) fail<Error>("fi_allocinfo: out of memory");
  hints->caps = FI_TAGGED;
  hints->ep_attr->type = FI_EP_RDM;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;  // every operation carries its own fi_context2
  // FI_MR_LOCAL: verbs needs local buffers registered (FabricMrCache does it).
  // FI_MR_VIRT_ADDR, FI_MR_ALLOCATED, FI_MR_PROV_KEY: accepted, they only
  // concern remote access, which the transport does not grant.
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;  // one thread uses a transport at a time
  if (!provider.empty()) hints->fabric_attr->prov_name = ::strdup(provider.c_str());  // freed by fi_freeinfo
  return hints;
}

FiInfoPtr find_fabric(const std::string& provider, const std::string& node) {
  const FabricApi& api = fabric_api_or_throw();
  FiInfoPtr hints = fabric_hints(provider);
  fi_info* info = nullptr;
  int rc;
  {
    // The first lookup initialises the providers; libfabric's shm provider
    // then installs signal handlers of its own (fabric_library.h).
    const KeepSignalHandlers keep;
    rc = api.getinfo(kFabricApiVersion, node.empty() ? nullptr : node.c_str(), nullptr, node.empty() ? 0 : FI_SOURCE,
                    hints.get(), &info);
  }
  if (rc != 0) return nullptr;
  return FiInfoPtr(info);
}

void throw_fabric_error(const std::string& self, const char* expr, const char* file, int line, long rc) {
  fail<NetworkError>(self, ": libfabric call failed: ", expr, " at ", file, ":", line, ": ",
                     fabric_strerror(static_cast<int>(rc < 0 ? -rc : rc)));
}

bool fabric_transport_built() { return true; }

std::string fabric_library_version() {
  // The library's major.minor (it may be newer than the headers), and the
  // headers' revision when they are the same release.
  const FabricApi* api = fabric_api();
  if (!api) return "(not loaded)";
  const uint32_t v = api->version();
  std::string s = std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
  if (FI_MAJOR(v) == FI_MAJOR_VERSION && FI_MINOR(v) == FI_MINOR_VERSION) s += "." + std::to_string(FI_REVISION_VERSION);
  return s;
}

std::string fabric_strerror(int err) {
  const FabricApi* api = fabric_api();
  return api ? api->strerror(err) : "error " + std::to_string(err);
}

bool fabric_rdma_device_present() { return fabric_api() && find_fabric("verbs", "") != nullptr; }

std::string fabric_providers_found() {
  std::string why;
  if (!fabric_api(&why)) return "none (" + why + ")";
  FiInfoPtr all = find_fabric("", "");
  // provider -> its domains (devices, interfaces), in the order found
  std::vector<std::pair<std::string, std::vector<std::string>>> found;
  for (fi_info* i = all.get(); i; i = i->next) {
    const std::string prov = i->fabric_attr && i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "?";
    const std::string dom = i->domain_attr && i->domain_attr->name ? i->domain_attr->name : "?";
    auto it = found.begin();
    while (it != found.end() && it->first != prov) ++it;
    if (it == found.end()) it = found.insert(found.end(), {prov, {}});
    bool seen = false;
    for (const auto& d : it->second) seen = seen || d == dom;
    if (!seen) it->second.push_back(dom);
  }
  if (found.empty()) return "none";
  std::string s;
  for (const auto& [prov, doms] : found) {
    s += (s.empty() ? "" : ", ") + prov + " (";
    for (size_t k = 0; k < doms.size(); ++k) s += (k ? ", " : "") + doms[k];
    s += ")";
  }
  return s;
}

#else  // built without libfabric

bool fabric_transport_built() { return false; }
std::string fabric_library_version() { return ""; }
bool fabric_rdma_device_present() { return false; }
std::string fabric_providers_found() { return "none (built without libfabric)"; }

#endif

}  // namespace strata::parallel
