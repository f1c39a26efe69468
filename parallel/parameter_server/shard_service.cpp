#include "parallel/parameter_server/shard_service.h"

#include "parallel/parameter_server/ps_protocol.h"
#include "parallel/parameter_server/ps_worker.h"
#include "parallel/rendezvous/store.h"

namespace strata::parallel {

ShardService::ShardService(const SolverConfig& config, const ParameterServerConfig& ps, const PsRoles& roles,
                           int shard, const RankEnv& env)
    : config_(config), ps_(ps), roles_(roles), shard_(shard), env_(env) {
  who_ = "server " + std::to_string(shard) + " (rank " + std::to_string(env.rank) + " on " + env.hostname + ")";
  main_ = std::thread([this] { run(); });
}

ShardService::~ShardService() {
  if (main_.joinable()) main_.join();
}

void ShardService::run() {
  try {
    // Connections of its own: the store client serves one thread at a time.
    std::unique_ptr<Store> store =
        connect_store(env_.master_host, env_.master_port, env_.token, env_.rank, env_.timeout);
    const std::vector<PsParam> params = parse_ps_params(store->get(kPsTableKey));
    {
      std::lock_guard<std::mutex> lock(mu_);
      layout_ = std::make_unique<KeyLayout>(params, roles_.shards);
      ShardServerOptions o;
      o.shard = shard_;
      o.workers = roles_.workers;
      o.mode = ps_.mode;
      o.staleness = ps_.staleness;
      o.compression = ps_.compression;
      o.token = ps_token_hash(env_.token);
      o.who = who_;
      o.timeout = env_.timeout;
      server_ = std::make_unique<ShardServer>(config_, *layout_, o);
    }
    std::vector<std::thread> threads;
    for (int w = 0; w < roles_.workers; ++w) {
      threads.emplace_back([this, w] {
        const std::string desc = "worker " + std::to_string(w) + " (rank " + std::to_string(w) + ")";
        std::unique_ptr<Transport> link;
        try {
          std::unique_ptr<Store> own =
              connect_store(env_.master_host, env_.master_port, env_.token, env_.rank, env_.timeout);
          link = connect_ps_pair(*own, shard_, w, 0, env_, ps_.transport);
        } catch (const std::exception& e) {
          server_->lose(w, desc, std::string("it did not connect: ") + e.what());
          return;
        }
        server_->serve(w, *link, desc);
      });
    }
    for (std::thread& t : threads) t.join();
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
  }
}

void ShardService::wait() {
  if (main_.joinable()) main_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

std::string ShardService::summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  return server_ ? server_->summary() : "";
}

int ShardService::lost_workers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return server_ ? server_->lost_workers() : 0;
}

}  // namespace strata::parallel
