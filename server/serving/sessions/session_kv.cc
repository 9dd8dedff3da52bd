#include "server/serving/sessions/session_kv.h"

#include <spdlog/spdlog.h>

namespace mha::serve {

int64_t SessionWrite::bytes() const {
  int64_t n = 0;
  for (const auto& [key, data] : blocks) n += static_cast<int64_t>(data.size());
  return n;
}

Status RunSessionWrite(RedisKvStore& store, const SessionWrite& write) {
  if (!write.blocks.empty()) MHA_RETURN_IF_ERROR(store.PutBlocks(write.blocks));
  return store.WriteRecord(write.lease, write.record, write.dropped);
}

void QueueSessionWrite(KvTier& tier, SessionWrite write,
                       std::shared_ptr<std::atomic<bool>> failed) {
  KvWriteJob job;
  job.session = write.record.session_id;
  job.bytes = write.bytes();
  auto shared = std::make_shared<SessionWrite>(std::move(write));
  job.run = [&tier, shared] { return RunSessionWrite(tier.store(), *shared); };
  job.done = [failed, id = job.session](const Status& status) {
    if (status.ok()) return;
    failed->store(true);
    spdlog::debug("KV store: a write of session {} failed: {}", id, status.message());
  };
  if (!tier.queue().Push(std::move(job))) failed->store(true);
}

StatusOr<std::vector<std::vector<std::string>>> FetchSessionBlocks(RedisKvStore& store,
                                                                   const SessionRecord& record) {
  std::vector<std::string> keys;
  std::vector<int64_t> bytes;
  for (size_t l = 0; l < record.layers.size(); ++l) {
    for (size_t j = 0; j < record.layers[l].blocks.size(); ++j) {
      keys.push_back(record.layers[l].blocks[j]);
      bytes.push_back(record.BlockBytes(l, j));
    }
  }
  auto flat = store.GetBlocks(record.session_id, keys, bytes);
  if (!flat.ok()) return flat.status();
  std::vector<std::vector<std::string>> out(record.layers.size());
  size_t at = 0;
  for (size_t l = 0; l < record.layers.size(); ++l) {
    for (size_t j = 0; j < record.layers[l].blocks.size(); ++j) {
      out[l].push_back(std::move((*flat)[at++]));
    }
  }
  return out;
}

}  // namespace mha::serve
