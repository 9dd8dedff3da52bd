#include "server/serving/sessions/kv_tier.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "mha/text.h"

namespace mha::serve {

StatusOr<std::shared_ptr<KvTier>> KvTier::Create(const KvTierOptions& options) {
  if (options.url.empty()) return std::shared_ptr<KvTier>();
  auto address = ParseRedisUrl(options.url, "--kv-store");
  if (!address.ok()) return address.status();
  auto password = LoadRedisPassword(options.password);
  if (!password.ok()) return password.status();
  RedisOptions redis;
  redis.address = *address;
  redis.password = *password;
  redis.connect_timeout = redis.command_timeout = std::chrono::milliseconds(options.timeout_ms);
  auto client = std::make_shared<RedisClient>(redis);
  const Status ping = client->Ping();
  if (!ping.ok() && options.required) {
    return Status(ping.code(), "--kv-store " + address->Describe() +
                                   " (--kv-store-required): " + ping.message());
  }
  std::shared_ptr<KvTier> tier(new KvTier(options, client));
  tier->reachable_ = ping.ok();
  if (ping.ok()) {
    spdlog::info("KV store {}: sessions are written there (write-behind {}), owner {}",
                 address->Describe(), options.write_behind ? "on" : "off",
                 tier->leases_->options().owner);
  } else {
    spdlog::warn(
        "KV store {} unreachable at start: sessions serve from memory, not durable, "
        "until it answers ({})",
        address->Describe(), ping.message());
  }
  return tier;
}

KvTier::KvTier(const KvTierOptions& options, std::shared_ptr<RedisClient> client)
    : options_(options),
      client_(std::move(client)),
      queue_(static_cast<size_t>(std::max<int64_t>(1, options.write_queue))) {
  store_ = std::make_unique<RedisKvStore>(
      client_,
      RedisKvStoreOptions{options.prefix, std::chrono::milliseconds(options.ttl_s * 1000)});
  RedisLeaseOptions leases;
  leases.prefix = options.prefix;
  leases.owner = NewOwnerId();
  leases.lease = std::chrono::milliseconds(options.lease_ms);
  leases.handover = std::chrono::milliseconds(options.handover_timeout_ms);
  leases_ = std::make_unique<RedisLeases>(client_, leases);
  listener_ = std::make_unique<ReleaseListener>(
      client_, leases_->Channel(leases.owner),
      [this](const std::string& id) { OnReleaseRequest(id); },
      [](const Status& s) {
        if (!s.ok()) spdlog::warn("KV store: release requests not heard: {}", s.message());
      });
  renewer_ = std::thread([this] { RenewLoop(); });
}

KvTier::~KvTier() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (renewer_.joinable()) renewer_.join();
  listener_->Stop();
  queue_.Stop();
}

void KvTier::Register(DurableSessions* sessions) {
  std::lock_guard<std::mutex> lock(registry_mu_);
  registered_.insert(sessions);
}

void KvTier::Unregister(DurableSessions* sessions) {
  std::lock_guard<std::mutex> lock(registry_mu_);
  registered_.erase(sessions);
}

StatusOr<std::optional<SessionLease>> KvTier::Claim(const std::string& id) {
  auto lease = leases_->Acquire(id);
  if (!lease.ok()) {
    const StatusCode code = lease.status().code();
    if (code == StatusCode::kUnavailable &&
        lease.status().message().find("is held by replica") != std::string::npos) {
      return AlreadyExists("session_id: '" + Abbreviate(id) +
                           "' is open on another replica: " + lease.status().message());
    }
    if (code == StatusCode::kUnavailable || code == StatusCode::kDeadlineExceeded) {
      ++not_durable_opens_;
      spdlog::debug("KV store: session {} opens without a lease (not durable): {}", id,
                    lease.status().message());
      return std::optional<SessionLease>();
    }
    return lease.status();
  }
  // A record left under the id (a session that ended elsewhere without a close) goes.
  auto text = store_->ReadRecord(id);
  if (text.ok()) {
    auto old = DecodeSessionRecord(id, *text);
    const Status removed =
        store_->RemoveSession(*lease, old.ok() ? SessionRecordBlocks(*old) : RedisArgs{});
    if (!removed.ok()) return removed;
    auto again = leases_->TryAcquire(id);  // RemoveSession deleted the lease with the record
    if (!again.ok()) return again.status();
    if (!again->acquired) return AlreadyExists("session_id: '" + Abbreviate(id) + "' was taken");
    return std::optional<SessionLease>(again->lease);
  }
  return std::optional<SessionLease>(*lease);
}

int64_t KvTier::ReleaseAll(std::chrono::steady_clock::time_point deadline) {
  int64_t released = 0;
  {
    std::lock_guard<std::mutex> lock(registry_mu_);
    for (DurableSessions* s : registered_) released += s->ReleaseAll(deadline);
  }
  queue_.Flush(deadline);
  return released;
}

void KvTier::OnReleaseRequest(const std::string& id) {
  std::lock_guard<std::mutex> lock(registry_mu_);
  for (DurableSessions* s : registered_) {
    if (s->ReleaseForHandover(id)) return;
  }
  spdlog::debug("KV store: release of session {} asked, not held here", id);
}

void KvTier::RenewLoop() {
  const auto period = std::chrono::milliseconds(std::max<int64_t>(10, options_.lease_ms / 3));
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(stop_mu_);
      if (stop_cv_.wait_for(lock, period, [&] { return stop_; })) return;
    }
    RenewOnce();
  }
}

void KvTier::RenewOnce() {
  const bool was = reachable_;
  const Status ping = client_->Ping();
  reachable_ = ping.ok();
  if (was && !ping.ok()) {
    spdlog::warn("KV store unreachable: sessions keep serving from memory, not durable ({})",
                 ping.message());
  }
  if (!ping.ok()) return;
  if (!was) spdlog::info("KV store reachable again: catching up");
  std::lock_guard<std::mutex> lock(registry_mu_);
  int64_t not_durable = 0;
  for (DurableSessions* s : registered_) {
    const std::vector<SessionLease> leases = s->Leases();
    auto renewed = leases_->RenewAll(leases);
    if (!renewed.ok()) return;
    for (size_t i = 0; i < leases.size(); ++i) {
      if ((*renewed)[i].code() == StatusCode::kAborted) s->LeaseLost(leases[i].session);
    }
    not_durable += s->CatchUp();
  }
  not_durable_ = not_durable;
}

void KvTier::RecordRestore(int64_t tokens, int64_t lost, int64_t bytes, double seconds) {
  ++restored_;
  restored_tokens_ += tokens;
  lost_tokens_ += lost;
  restore_bytes_ += bytes;
  restore_micros_ += static_cast<int64_t>(seconds * 1e6);
}

KvTierCounters KvTier::counters() const {
  KvTierCounters c;
  c.released = released_;
  c.restored = restored_;
  c.restored_tokens = restored_tokens_;
  c.lost_tokens = lost_tokens_;
  c.restore_seconds = static_cast<double>(restore_micros_.load()) / 1e6;
  c.restore_bytes = restore_bytes_;
  c.not_durable_opens = not_durable_opens_;
  return c;
}

}  // namespace mha::serve
