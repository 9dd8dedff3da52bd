// KvCache's branches (docs/sessions.md, "Fork, truncate and spill"): forks sharing blocks by
// reference count, copy-on-write targets, the rewind that gives blocks back, and spill / restore
// through a KvSpillStore.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <cstring>
#include <string>
#include <utility>

#include "mha/kv_cache.h"
#include "mha/kv_spill.h"

namespace mha {

namespace {

// What a spill copies, in order: the keys, the values, and the scales of a scaled pool.
std::vector<at::Tensor> Stores(const KvBlockPool& pool) {
  std::vector<at::Tensor> stores{pool.keys(), pool.values()};
  if (pool.scaled()) {
    stores.push_back(pool.key_scales());
    stores.push_back(pool.value_scales());
  }
  return stores;
}

}  // namespace

std::vector<int64_t> KvCache::AllBlocks() const {
  std::vector<int64_t> all;
  for (const auto& table : tables_) all.insert(all.end(), table.begin(), table.end());
  return all;
}

int64_t KvCache::shared_blocks_held() const { return pool_->SharedAmong(AllBlocks()); }

std::vector<std::vector<size_t>> KvCache::SharedTargets(int64_t extra) const {
  std::vector<std::vector<size_t>> out(tables_.size());
  if (extra < 1 || spilled()) return out;
  const int64_t bt = pool_->block_tokens();
  const size_t first = static_cast<size_t>(length_ / bt);
  const size_t end = static_cast<size_t>((length_ + extra + bt - 1) / bt);
  for (size_t r = 0; r < tables_.size(); ++r) {
    const std::vector<int64_t>& table = tables_[r];
    for (size_t j = first; j < std::min(end, table.size()); ++j) {
      if (pool_->ref_count(table[j]) > 1) out[r].push_back(j);
    }
  }
  return out;
}

void KvCache::CheckWritable(int64_t count) const {
  TORCH_CHECK(!spilled(), "KvCache: a write into a spilled cache (Restore first)");
  if (count < 1) return;
  const int64_t bt = pool_->block_tokens();
  std::vector<int64_t> touched;
  for (const auto& table : tables_) {
    for (int64_t j = length_ / bt; j < (length_ + count + bt - 1) / bt; ++j) {
      touched.push_back(table.at(static_cast<size_t>(j)));  // out_of_range without Reserve
    }
  }
  TORCH_CHECK(pool_->SharedAmong(touched) == 0, "KvCache: positions ", length_, "..",
              length_ + count - 1, " lie in a block another cache holds too (Reserve(", count,
              ") copies it first)");
}

StatusOr<std::unique_ptr<KvCache>> KvCache::Fork(int64_t tokens) const {
  if (spilled()) {
    return FailedPrecondition("cannot fork a spilled KV cache (key '" + spill_->key +
                              "'): restore it first");
  }
  if (tokens < 0 || tokens > length_) {
    return OutOfRange("fork of " + std::to_string(tokens) + " tokens: the cache holds " +
                      std::to_string(length_) + " tokens per row (0 .. " + std::to_string(length_) +
                      ")");
  }
  const int64_t bt = pool_->block_tokens();
  const size_t keep = static_cast<size_t>((tokens + bt - 1) / bt);
  auto fork = std::make_unique<KvCache>(pool_, rows_);
  for (size_t r = 0; r < tables_.size(); ++r) {
    fork->tables_[r].assign(tables_[r].begin(), tables_[r].begin() + keep);
  }
  pool_->Share(fork->AllBlocks());
  fork->length_ = tokens;
  return fork;
}

Status KvCache::TruncateTo(int64_t tokens) {
  if (spilled()) {
    return FailedPrecondition("cannot truncate a spilled KV cache (key '" + spill_->key +
                              "'): restore it first");
  }
  if (tokens < 0 || tokens > length_) {
    return OutOfRange("truncate to " + std::to_string(tokens) + " tokens: the cache holds " +
                      std::to_string(length_) + " tokens per row (0 .. " + std::to_string(length_) +
                      ")");
  }
  const int64_t bt = pool_->block_tokens();
  const size_t keep = static_cast<size_t>((tokens + bt - 1) / bt);
  std::vector<int64_t> dropped;
  for (auto& table : tables_) {
    if (table.size() <= keep) continue;
    dropped.insert(dropped.end(), table.begin() + keep, table.end());
    table.resize(keep);
  }
  pool_->Release(dropped);
  length_ = tokens;
  return Status::Ok();
}

Status KvCache::Spill(std::shared_ptr<KvSpillStore> store, const std::string& key) {
  if (store == nullptr) return InvalidArgument("KvCache::Spill: no spill store");
  if (spilled()) {
    return FailedPrecondition("the KV cache is spilled already (key '" + spill_->key + "')");
  }
  const int64_t bytes = rows_ * length_ * pool_->bytes_per_token();
  std::vector<char> host(static_cast<size_t>(bytes));
  if (length_ > 0) {
    c10::InferenceMode guard;
    const int64_t bt = pool_->block_tokens(), blocks = (length_ + bt - 1) / bt;
    size_t offset = 0;
    for (const at::Tensor& store : Stores(*pool_)) {
      const at::Tensor part =  // [rows, length, H, x] as stored
          GatherBlocks(store, blocks).flatten(1, 2).narrow(1, 0, length_).to(at::kCPU).contiguous();
      TORCH_CHECK(offset + part.nbytes() <= host.size(), "KvCache::Spill: more than the ", bytes,
                  " bytes expected");
      std::memcpy(host.data() + offset, part.data_ptr(), part.nbytes());
      offset += part.nbytes();
    }
    TORCH_CHECK(offset == host.size(), "KvCache::Spill: ", offset, " bytes gathered, ", bytes,
                " expected");
  }
  MHA_RETURN_IF_ERROR(store->Put(key, host.data(), bytes));
  const std::vector<int64_t> all = AllBlocks();
  for (auto& table : tables_) table.clear();
  pool_->Release(all);
  spill_ = std::make_unique<Spilled>(Spilled{std::move(store), key, bytes});
  return Status::Ok();
}

Status KvCache::Restore() {
  if (!spilled()) return FailedPrecondition("KvCache::Restore: the cache is not spilled");
  auto blocks = pool_->Allocate(BlocksNeeded(0));
  if (!blocks.ok()) {
    return Status(blocks.status().code(), "restoring the spilled KV cache '" + spill_->key +
                                              "': " + blocks.status().message());
  }
  return RestoreWith(std::move(blocks.value()));
}

Status KvCache::RestoreWith(std::vector<int64_t> blocks) {
  const int64_t length = length_;
  std::vector<char> host(static_cast<size_t>(spill_->bytes));
  Status s = spill_->store->Get(spill_->key, host.data(), spill_->bytes);
  if (!s.ok()) {
    pool_->Release(blocks);
    return s;
  }
  const size_t per_row = blocks.size() / static_cast<size_t>(rows_);
  for (size_t r = 0; r < tables_.size(); ++r) {
    tables_[r].assign(blocks.begin() + r * per_row, blocks.begin() + (r + 1) * per_row);
  }
  const std::unique_ptr<Spilled> was = std::move(spill_);
  if (length > 0) {
    c10::InferenceMode guard;  // the pool's tensors are inference tensors (written in place)
    const at::Tensor slots = Slots(0, length);
    char* cursor = host.data();
    for (const at::Tensor& store : Stores(*pool_)) {  // the bytes back as they were, not re-encoded
      const at::Tensor part = at::from_blob(cursor, {rows_ * length, store.size(1), store.size(2)},
                                            store.options().device(at::kCPU));
      store.index_copy_(0, slots, part.to(store.device()));
      cursor += part.nbytes();
    }
  }
  was->store->Remove(was->key);
  return Status::Ok();
}

Status KvCache::ExportStored(int64_t begin, int64_t count, void* out) const {
  if (spilled()) return FailedPrecondition("cannot export a spilled KV cache's tokens");
  if (begin < 0 || count < 0 || begin + count > length_) {
    return OutOfRange("export of tokens " + std::to_string(begin) + " .. " +
                      std::to_string(begin + count) + ": the cache holds " +
                      std::to_string(length_) + " tokens per row");
  }
  if (count == 0) return Status::Ok();
  c10::InferenceMode guard;
  const at::Tensor slots = Slots(begin, count);
  char* cursor = static_cast<char*>(out);
  for (const at::Tensor& store : Stores(*pool_)) {  // [rows * count, H, x], row by row
    const at::Tensor part = store.index_select(0, slots).to(at::kCPU).contiguous();
    std::memcpy(cursor, part.data_ptr(), part.nbytes());
    cursor += part.nbytes();
  }
  return Status::Ok();
}

Status KvCache::ImportStored(const void* data, int64_t count) {
  if (count < 0) return InvalidArgument("import of " + std::to_string(count) + " tokens");
  if (count == 0) return Status::Ok();
  MHA_RETURN_IF_ERROR(Reserve(count));
  CheckWritable(count);
  c10::InferenceMode guard;  // the pool's tensors are inference tensors (written in place)
  const at::Tensor slots = Slots(length_, count);
  const char* cursor = static_cast<const char*>(data);
  for (const at::Tensor& store : Stores(*pool_)) {
    // from_blob does not own the bytes: the copy into the store reads them before they may go.
    const at::Tensor part =
        at::from_blob(const_cast<char*>(cursor), {rows_ * count, store.size(1), store.size(2)},
                      store.options().device(at::kCPU));
    store.index_copy_(0, slots, part.to(store.device()));
    cursor += part.nbytes();
  }
  length_ += count;
  return Status::Ok();
}

}  // namespace mha
