// The record of one decoding session in the shared KV store: what a replica needs to take the
// session over (its model version, kind, dtype, shape, token counts) and where its keys and values
// are (the keys of its blocks, per layer). Text, one "name value" line per field, so that an
// operator can read it with redis-cli; parsed strictly: a field missing, repeated, unknown or out
// of range, another model version or dtype, or a block of the wrong size is DATA_LOSS naming the
// session (that session is refused; the server stays up).
//
// A stored block holds the tokens [j * block_tokens, j * block_tokens + n) of every row of one
// layer: keys then values, [2, rows, heads, n, head_dim] contiguous in the record's dtype (what
// KvCache::ExportTokens writes); n is block_tokens except in a layer's last block, which may be
// partial (a drain writes the tokens of a block that is not full yet).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mha/status.h"

namespace mha::serve {

struct SessionRecordLayer {
  int64_t tokens = 0;               // durable tokens of this layer (in its blocks)
  std::vector<std::string> blocks;  // ceil(tokens / block_tokens) block keys, in order
};

struct SessionRecord {
  std::string session_id;
  std::string model, version, fingerprint;  // the model version that computed the keys
  std::string kind;                         // the kind that wrote it (its registered name)
  std::string dtype;  // the cache dtype: "float32", "float16", "bfloat16", "int8", "fp8_e4m3"
  int64_t rows = 0, heads = 0, head_dim = 0, dtype_bytes = 0;
  int64_t block_tokens = 0;  // tokens per stored block
  int64_t max_tokens = 0;    // the session's bound
  bool cross = false;        // a cross-attention session (its cache holds the encoder's keys)
  int64_t tokens = 0;        // tokens the session held when the record was written
  bool released = false;     // written by a clean release: every token is durable
  std::vector<SessionRecordLayer> layers;

  // int8 and fp8_e4m3 keep a (scale, zero) float pair per token and K/V head beside the values.
  bool scaled() const { return dtype == "int8" || dtype == "fp8_e4m3"; }
  int64_t bytes_per_token() const {  // per row: keys and values, then their scales
    return 2 * heads * head_dim * dtype_bytes + (scaled() ? 2 * heads * 2 * 4 : 0);
  }
  // The bytes of block `j` of layer `l`: rows * its tokens * bytes_per_token().
  int64_t BlockBytes(size_t l, size_t j) const;
  // Tokens every layer holds durably (the least over layers).
  int64_t durable_tokens() const;
};

// What a replica that would restore the session serves: a record of anything else is DATA_LOSS.
struct SessionRecordExpect {
  std::string model, fingerprint, kind, dtype;
  int64_t heads = 0, head_dim = 0, layers = 0;
};

std::string EncodeSessionRecord(const SessionRecord& record);
// The record of session `id` from `text`, checked against itself (fields, counts, dtype size).
StatusOr<SessionRecord> DecodeSessionRecord(const std::string& id, const std::string& text);
// DecodeSessionRecord, then checked against what this replica serves (`expect`).
StatusOr<SessionRecord> DecodeSessionRecord(const std::string& id, const std::string& text,
                                            const SessionRecordExpect& expect);
// Every block key the record names, each once.
std::vector<std::string> SessionRecordBlocks(const SessionRecord& record);

}  // namespace mha::serve
