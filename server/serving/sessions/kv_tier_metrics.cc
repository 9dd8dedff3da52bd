// KvTier's series on /metrics (docs/scale-out.md lists them): built at scrape time from its
// counters, its write queue and its store's.
//   mha_kv_store_up                              gauge, 1 while Redis answers
//   mha_kv_store_write_queue_depth               gauge, write-behind jobs waiting
//   mha_kv_store_write_queue_bytes               gauge, their bytes
//   mha_kv_store_write_lag_seconds               gauge, age of the oldest waiting job
//   mha_kv_store_sessions_not_durable            gauge, sessions with writes to catch up
//   mha_kv_store_blocks_written_total, mha_kv_store_bytes_written_total     counters
//   mha_kv_store_records_written_total, mha_kv_store_bytes_read_total       counters
//   mha_kv_store_writes_refused_total{reason}    counter, maxmemory / queue_full
//   mha_kv_store_write_failures_total            counter, other failed writes
//   mha_kv_store_handovers_total{direction}      counter, released / restored sessions
//   mha_kv_store_restored_tokens_total           counter, tokens per row restored
//   mha_kv_store_lost_tokens_total               counter, tokens per row a lost replica cost
//   mha_kv_store_restore_seconds_total           counter, time spent restoring
#include <string>
#include <utility>

#include "server/serving/sessions/kv_tier.h"

namespace mha::serve {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily One(const char* name, const char* help, MetricType type, double value,
                 std::vector<ClientMetric::Label> labels = {}) {
  MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  ClientMetric m;
  m.label = std::move(labels);
  if (type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
  return f;
}

void AddLabelled(MetricFamily& f, std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  m.counter.value = value;
  f.metric.push_back(std::move(m));
}

}  // namespace

std::vector<MetricFamily> KvTier::Collect() const {
  const RedisKvStoreCounters s = store_->counters();
  const KvTierCounters t = counters();
  const auto G = MetricType::Gauge, C = MetricType::Counter;
  std::vector<MetricFamily> out;
  out.push_back(
      One("mha_kv_store_up", "1 while the shared KV store answers", G, reachable_ ? 1 : 0));
  out.push_back(One("mha_kv_store_write_queue_depth", "Write-behind jobs waiting", G,
                    static_cast<double>(queue_.depth())));
  out.push_back(One("mha_kv_store_write_queue_bytes", "Bytes of the write-behind jobs waiting", G,
                    static_cast<double>(queue_.bytes_queued())));
  out.push_back(One("mha_kv_store_write_lag_seconds", "Age of the oldest write-behind job", G,
                    queue_.lag_seconds()));
  out.push_back(One("mha_kv_store_sessions_not_durable",
                    "Sessions whose writes failed or were refused, to catch up", G,
                    static_cast<double>(not_durable_.load() + 0)));
  out.push_back(One("mha_kv_store_blocks_written_total", "KV blocks written to the store", C,
                    static_cast<double>(s.blocks_written)));
  out.push_back(One("mha_kv_store_bytes_written_total", "KV bytes written to the store", C,
                    static_cast<double>(s.bytes_written)));
  out.push_back(One("mha_kv_store_records_written_total", "Session records written", C,
                    static_cast<double>(s.records_written)));
  out.push_back(One("mha_kv_store_bytes_read_total", "KV bytes read from the store", C,
                    static_cast<double>(s.bytes_read)));
  MetricFamily refused = One("mha_kv_store_writes_refused_total",
                             "Writes refused: the store at maxmemory, or the queue full", C,
                             static_cast<double>(s.refused_full), {{"reason", "maxmemory"}});
  AddLabelled(refused, {{"reason", "queue_full"}}, static_cast<double>(queue_.refused()));
  out.push_back(std::move(refused));
  out.push_back(One("mha_kv_store_write_failures_total", "Writes that failed otherwise", C,
                    static_cast<double>(s.failed)));
  MetricFamily handovers = One("mha_kv_store_handovers_total", "Sessions handed over", C,
                               static_cast<double>(t.released), {{"direction", "released"}});
  AddLabelled(handovers, {{"direction", "restored"}}, static_cast<double>(t.restored));
  out.push_back(std::move(handovers));
  out.push_back(One("mha_kv_store_restored_tokens_total", "Tokens per row restored", C,
                    static_cast<double>(t.restored_tokens)));
  out.push_back(One("mha_kv_store_lost_tokens_total",
                    "Tokens per row not in the store when a lost replica's session was restored", C,
                    static_cast<double>(t.lost_tokens)));
  out.push_back(One("mha_kv_store_restore_seconds_total", "Time spent restoring sessions", C,
                    t.restore_seconds));
  return out;
}

}  // namespace mha::serve
