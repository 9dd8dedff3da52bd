// The KV cache's tokens as bytes (mha/kv_export.h): one gather of the positions' slots out, one
// Append in.
#include "mha/kv_export.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <cstring>
#include <vector>

namespace mha {
namespace {

std::string Num(int64_t v) { return std::to_string(v); }

}  // namespace

std::string KvDtypeName(const KvBlockPool& pool) {
  switch (pool.keys().scalar_type()) {
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    default:
      return "float32";
  }
}

Status ExportKvTokens(const KvCache& cache, int64_t begin, int64_t count, void* out) {
  if (cache.spilled()) return FailedPrecondition("cannot export a spilled KV cache's tokens");
  if (begin < 0 || count < 0 || begin + count > cache.length()) {
    return OutOfRange("export of tokens " + Num(begin) + " .. " + Num(begin + count) +
                      ": the cache holds " + Num(cache.length()) + " tokens per row");
  }
  if (count == 0) return Status::Ok();
  const KvBlockPool& pool = cache.pool();
  const int64_t bt = pool.block_tokens(), rows = cache.rows();
  std::vector<int64_t> slots;
  slots.reserve(static_cast<size_t>(rows * count));
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<int64_t>& table = cache.table(r);
    for (int64_t p = begin; p < begin + count; ++p) {
      slots.push_back(table.at(static_cast<size_t>(p / bt)) * bt + p % bt);
    }
  }
  c10::InferenceMode guard;
  const at::Tensor index =
      at::from_blob(slots.data(), {static_cast<int64_t>(slots.size())}, at::kLong)
          .to(pool.keys().device());
  auto gather = [&](const at::Tensor& store) {  // [rows * count, H, D] -> [rows, H, count, D]
    return store.index_select(0, index)
        .view({rows, count, pool.heads(), pool.head_dim()})
        .permute({0, 2, 1, 3});
  };
  const at::Tensor host =
      at::stack({gather(pool.keys()), gather(pool.values())}).to(at::kCPU).contiguous();
  std::memcpy(out, host.data_ptr(), host.nbytes());
  return Status::Ok();
}

Status ImportKvTokens(KvCache* cache, const void* data, int64_t count) {
  if (count < 0) return InvalidArgument("import of " + Num(count) + " tokens");
  if (count == 0) return Status::Ok();
  MHA_RETURN_IF_ERROR(cache->Reserve(count));
  const KvBlockPool& pool = cache->pool();
  const int64_t rows = cache->rows(), h = pool.heads(), d = pool.head_dim();
  c10::InferenceMode guard;
  // from_blob does not own the bytes: clone before they may go.
  const at::Tensor host = at::from_blob(const_cast<void*>(data), {2, rows, h, count, d},
                                        at::TensorOptions().dtype(pool.keys().scalar_type()))
                              .clone();
  const at::Device device = pool.keys().device();
  auto rows_of = [&](int64_t i) {  // [rows, H, count, D] -> Append's [rows, count, H * D]
    return host[i].transpose(1, 2).reshape({rows, count, h * d}).to(device);
  };
  cache->Append(rows_of(0), rows_of(1));
  return Status::Ok();
}

}  // namespace mha
