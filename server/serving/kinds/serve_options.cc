#include "server/serving/kinds/serve_options.h"

#include "server/serving/repository/model_repository.h"

namespace mha::serve {

BatcherOptions BatcherOptionsFor(const ServingConfig& c, const BatcherOptions& defaults) {
  BatcherOptions o = defaults;
  if (c.max_batch_rows) o.max_batch_rows = *c.max_batch_rows;
  if (c.max_batch_tokens) o.max_batch_tokens = *c.max_batch_tokens;
  if (c.max_queue_delay_us) o.max_queue_delay_us = *c.max_queue_delay_us;
  if (c.max_queue_size) o.max_queue_size = static_cast<size_t>(*c.max_queue_size);
  if (c.instances) o.instances = static_cast<int>(*c.instances);
  return o;
}

BatcherOptions SchedulerOptionsFor(const ServingConfig& c, bool batching,
                                   const BatcherOptions& defaults) {
  BatcherOptions o = BatcherOptionsFor(c, defaults);
  o.batching = batching;  // off: one request per pass (the merging limits do not apply)
  return o;
}

SessionOptions SessionOptionsFor(const ModelEntry& entry, const SessionOptions& defaults) {
  SessionOptions o = defaults;
  o.pool.dtype = entry.kv_cache_dtype;
  return o;
}

SchedulerView ViewOf(const BatcherOptions& o) {
  return SchedulerView{o.batching,           o.instances,
                       o.max_batch_rows,     o.max_batch_tokens,
                       o.max_queue_delay_us, static_cast<int64_t>(o.max_queue_size)};
}

}  // namespace mha::serve
