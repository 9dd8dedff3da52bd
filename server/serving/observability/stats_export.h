// The statistics aggregators as Prometheus families, built at scrape time (the metric names are
// the contract listed in metrics.h). Versions of one model are summed into its {model} series;
// the session and KV cache gauges keep their {model,version} series.
#pragma once

#include <prometheus/metric_family.h>

#include <vector>

#include "server/serving/observability/stats_aggregator.h"

namespace mha::serve {

std::vector<prometheus::MetricFamily> ExportStats(
    const std::vector<const StatsAggregator*>& aggregators);

}  // namespace mha::serve
