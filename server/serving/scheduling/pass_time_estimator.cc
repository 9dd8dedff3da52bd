#include "server/serving/scheduling/pass_time_estimator.h"

#include <algorithm>

namespace mha::serve {

int PassTimeEstimator::Bucket(int64_t tokens) {
  int b = 0;
  for (uint64_t t = static_cast<uint64_t>(std::max<int64_t>(tokens, 1)); t > 1; t >>= 1) ++b;
  return std::min(b, kBuckets - 1);
}

void PassTimeEstimator::Record(bool session, int64_t padded_tokens, double micros) {
  if (padded_tokens <= 0 || !(micros > 0)) return;
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slots_[session ? 1 : 0][Bucket(padded_tokens)];
  const double tokens = static_cast<double>(padded_tokens);
  if (s.us == 0) {
    s.us = micros;
    s.tokens = tokens;
  } else {
    s.us += kAlpha * (micros - s.us);
    s.tokens += kAlpha * (tokens - s.tokens);
  }
}

double PassTimeEstimator::EstimateUs(bool session, int64_t padded_tokens) const {
  const int b = Bucket(padded_tokens);
  const double tokens = static_cast<double>(std::max<int64_t>(padded_tokens, 1));
  std::lock_guard<std::mutex> lock(mu_);
  const Slot* row = slots_[session ? 1 : 0];
  if (row[b].us > 0) return row[b].us;
  for (int up = b + 1; up < kBuckets; ++up) {
    if (row[up].us > 0) return row[up].us * std::min(1.0, tokens / row[up].tokens);
  }
  for (int down = b - 1; down >= 0; --down) {
    if (row[down].us > 0) return row[down].us;
  }
  return 0;
}

}  // namespace mha::serve
