#include "parallel/transport/transport_select.h"

#include <unistd.h>

#include <algorithm>

#include "framework/error.h"
#include "parallel/rendezvous/store.h"
#include "parallel/transport/fabric_transport.h"
#include "parallel/transport/shm_transport.h"
#include "parallel/transport/tcp_transport.h"

namespace strata::parallel {

namespace {

std::string this_hostname() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "?";
  return host;
}

// auto: rdma only when every rank has an RDMA device and the world spans
// more than one host; each rank publishes what it found, so all decide alike.
// The hosts are compared first: a world on one host never loads libfabric.
bool auto_wants_rdma(Store& store, int rank, int world_size, const std::string& hostname,
                     const std::string& prefix) {
  const std::string key = prefix + "/transport/auto/";
  store.set(key + "host/" + std::to_string(rank), hostname);
  bool several_hosts = false;
  for (int p = 0; p < world_size; ++p) {
    several_hosts = several_hosts || (p != rank && store.get(key + "host/" + std::to_string(p)) != hostname);
  }
  if (!several_hosts) return false;
  const bool device = fabric_transport_built() && fabric_rdma_device_present();
  store.set(key + "device/" + std::to_string(rank), device ? "1" : "0");
  bool all_devices = device;
  for (int p = 0; p < world_size; ++p) {
    all_devices = all_devices && (p == rank || store.get(key + "device/" + std::to_string(p)) == "1");
  }
  return all_devices;
}

}  // namespace

const std::vector<std::string>& transport_choice_names() {
  static const std::vector<std::string> v = {"auto", "tcp", "shm", "rdma"};
  return v;
}

TransportChoice parse_transport_choice(const std::string& text, const std::string& where) {
  if (text == "auto") return TransportChoice::kAuto;
  if (text == "tcp") return TransportChoice::kTcp;
  if (text == "shm") return TransportChoice::kShm;
  if (text == "rdma") return TransportChoice::kRdma;
  fail<ConfigError>(where, ": transport must be one of auto, tcp, shm, rdma, got '", text, "'");
}

const char* transport_choice_name(TransportChoice choice) {
  switch (choice) {
    case TransportChoice::kTcp: return "tcp";
    case TransportChoice::kShm: return "shm";
    case TransportChoice::kRdma: return "rdma";
    case TransportChoice::kAuto: break;
  }
  return "auto";
}

std::unique_ptr<Transport> connect_transport(Store& store, int rank, int world_size, std::chrono::milliseconds timeout,
                                             const TransportSetup& setup) {
  const std::string hostname = setup.hostname.empty() ? this_hostname() : setup.hostname;
  // Asking for rdma in a build without libfabric fails before any connection.
  if (setup.choice == TransportChoice::kRdma && !fabric_transport_built()) {
    connect_fabric_transport(store, nullptr, "", timeout, {});
  }
  TcpTransportOptions tcp_opts;
  tcp_opts.hostname = hostname;
  tcp_opts.advertise_host = setup.advertise_host;
  std::unique_ptr<Transport> t = connect_tcp_transport(store, rank, world_size, setup.prefix + "/tcp", timeout, tcp_opts);
  if (world_size == 1) return t;
  bool rdma = setup.choice == TransportChoice::kRdma;
  bool shm = setup.choice == TransportChoice::kShm;
  if (setup.choice == TransportChoice::kAuto) {
    rdma = auto_wants_rdma(store, rank, world_size, hostname, setup.prefix);
    shm = shm_enabled_by_env();
  }
  if (rdma) {
    FabricTransportOptions fabric_opts;
    fabric_opts.provider = setup.fabric_provider;
    fabric_opts.hostname = hostname;
    fabric_opts.advertise_host = setup.advertise_host;
    t = connect_fabric_transport(store, std::move(t), setup.prefix + "/fabric", timeout, fabric_opts);
  }
  if (shm) {
    ShmTransportOptions shm_opts;
    shm_opts.hostname = hostname;
    t = connect_shm_transport(store, std::move(t), setup.prefix + "/shm", timeout, shm_opts);
  }
  return t;
}

std::string describe_transport(const Transport& t) {
  const Transport* inner = shm_inner_transport(t);
  const std::string provider = fabric_provider_name(inner ? *inner : t);
  std::string s = provider.empty() ? "tcp" : "rdma (libfabric " + provider + ")";
  if (const int n = shm_peer_count(t); n > 0) s += " + shm (" + std::to_string(n) + (n == 1 ? " peer)" : " peers)");
  return s;
}

}  // namespace strata::parallel
