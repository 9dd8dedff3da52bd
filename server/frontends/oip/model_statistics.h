// Triton's ModelStatistics for one model version, from its statistics aggregator
// (server/serving/observability/stats_aggregator.h; the numbers are that version's alone):
//   inference_stats.success / fail  requests answered OK / with an error: count and whole-call
//                                   time (handler start -> answer), as mha_requests_total counts
//   inference_stats.queue           queue time of requests that reached a scheduler
//   inference_stats.compute_input   computed requests: decode (front end -> scheduler) + merging
//                                   a batch's inputs
//   inference_stats.compute_infer   computed requests: the forward pass (a merged pass's time
//                                   counts once per request in it)
//   inference_stats.compute_output  computed requests: splitting the outputs, the hop to the
//                                   completion thread, the front end's encode/serialize/Finish
//   inference_count                 batch rows (sum of B) of the requests answered OK, as Triton
//                                   counts batch items of successful requests
//   execution_count                 forward passes (a merged batch is one)
//   last_inference                  when the version last answered a request, ms since the epoch
// cache_hit and cache_miss stay 0 (no cache);
// batch_stats, memory_usage and response_stats are left empty.
#pragma once

#include <string>

#include "inference/grpc_service.pb.h"
#include "mha/status.h"
#include "server/serving/inference_server.h"

namespace mha::serve::oip {

void FillModelStatistics(const VersionStatistics& version, inference::ModelStatistics* out);

// ModelStatistics' answer (gRPC and REST) from InferenceServer::Statistics, whose selection rule
// every protocol shares.
Status FillStatisticsResponse(InferenceServer& core, const std::string& name,
                              const std::string& version, inference::ModelStatisticsResponse* out);

}  // namespace mha::serve::oip
