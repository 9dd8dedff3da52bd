#include "server/serving/kinds/multihead/multihead_sessions.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "mha/text.h"
#include "server/serving/kinds/multihead/pass_cost.h"
#include "server/serving/kinds/multihead/session_step.h"

namespace mha::serve {
namespace {

Status CheckOpenRequest(const OpenSessionRequest& r, const MhaOptions& o,
                        const RequestLimits& limits) {
  if (r.batch_size < 0) {
    return InvalidArgument("batch_size: must be >= 1 (0 = 1), got " + std::to_string(r.batch_size));
  }
  if (r.batch_size > limits.max_batch_size) {
    return ResourceExhausted("batch_size: " + std::to_string(r.batch_size) +
                             " exceeds --max-batch-size " + std::to_string(limits.max_batch_size));
  }
  if (r.max_tokens < 0) {
    return InvalidArgument("max_tokens: must be >= 1 (0 = --max-sequence-length), got " +
                           std::to_string(r.max_tokens));
  }
  if (r.max_tokens > limits.max_sequence_length) {
    return ResourceExhausted("max_tokens: " + std::to_string(r.max_tokens) +
                             " exceeds --max-sequence-length " +
                             std::to_string(limits.max_sequence_length));
  }
  const bool cross = r.key.defined() || r.value.defined();
  if (!cross && !o.same_embed_dim()) {
    return InvalidArgument("key/value: the model has kdim=" + std::to_string(o.key_dim()) +
                           " vdim=" + std::to_string(o.value_dim()) +
                           " != embed_dim=" + std::to_string(o.embed_dim) +
                           ": only cross-attention sessions (OpenSession with key and value)");
  }
  if (cross && r.key.defined() && r.key.dim() == 3 && r.key.size(1) > limits.max_sequence_length) {
    return ResourceExhausted("key: sequence length " + std::to_string(r.key.size(1)) +
                             " exceeds --max-sequence-length " +
                             std::to_string(limits.max_sequence_length));
  }
  return Status::Ok();
}

// RESOURCE_EXHAUSTED when the step's estimated working memory or response (its weights over
// every cached key) is over the limits.
Status CheckStepCost(const RequestLimits& limits, const ModelInfo& model, const HostInputs& in,
                     int64_t keys, int64_t cache_bytes_per_key) {
  const MhaOptions& o = model.options;
  const int64_t extra = (o.add_bias_kv ? 1 : 0) + (o.add_zero_attn ? 1 : 0);
  const int64_t b = in.query.size(0), t = in.query.size(1);
  PassShape pass = ModelPassShape(model, b, t, keys);
  pass.head_options = in.need_weights;
  pass.need_weights = in.need_weights;
  pass.cache_bytes_per_key = cache_bytes_per_key;
  // On a device: StepMask's whole additive mask (causal over several new tokens, or a mask given).
  const bool masked = t > 1 || in.attn_mask.defined() || in.key_padding_mask.defined();
  const bool per_head = in.attn_mask.defined() && in.attn_mask.dim() == 3;
  pass.mask_heads = per_head ? o.num_heads : (masked ? 1 : 0);
  const int64_t heads = in.need_weights ? (in.average_attn_weights ? 1 : o.num_heads) : 0;
  const double response =
      4.0 * (static_cast<double>(b) * t * o.embed_dim +
             static_cast<double>(b) * heads * t * static_cast<double>(keys + extra));
  const PassBytes bytes{PassWorkBytes(pass),
                        response > 9e18 ? INT64_MAX : static_cast<int64_t>(response)};
  const std::string shape = "step [" + std::to_string(b) + ", " + std::to_string(t) +
                            " new tokens, " + std::to_string(keys) + " keys]";
  return CheckPassBytes(bytes, limits, shape,
                        "send fewer new tokens per step, averaged weights, or no weights");
}

// What a gather copies per cached key of a row before decoding it: the stored bytes of a cache in
// another dtype than the model's compute one (budget.h PassShape::cache_bytes_per_key), else 0.
int64_t CacheBytesPerKey(KvCacheDtype dtype, const ModelInfo& model) {
  const KvCacheDtype stored = ResolveKvCacheDtype(dtype, model.compute_dtype);
  if (stored == ResolveKvCacheDtype(KvCacheDtype::kModel, model.compute_dtype)) return 0;
  return KvCacheBytesPerToken(stored, model.options.num_heads, model.options.head_dim());
}

}  // namespace

MultiheadSessions::MultiheadSessions(SessionOptions options, RequestLimits limits,
                                     std::shared_ptr<const MhaModel> model,
                                     SessionLocation location,
                                     std::shared_ptr<SessionDirectory> directory,
                                     ModelRunner* runner, StatsAggregator* metrics)
    : SessionStore<KvCache>(
          options, location, std::move(directory), metrics,
          SessionPool{[model, options] { return KvBlockPool::Create(options.pool, *model); },
                      [location, device = DescribeModel(*model).device](const KvBlockPool& pool) {
                        spdlog::info(
                            "model {} v{}: KV cache pool of {} blocks x {} tokens ({} bytes "
                            "each) on {}",
                            location.model, location.version, pool.total_blocks(),
                            pool.block_tokens(), pool.block_bytes(), device);
                      },
                      [](const KvBlockPool& pool) {
                        return std::to_string(pool.block_tokens()) + " tokens per block";
                      },
                      DescribeModel(*model).device, "multihead"}),
      limits_(limits),
      model_(std::move(model)),
      info_(DescribeModel(*model_)),
      cache_bytes_per_key_(CacheBytesPerKey(options.pool.dtype, info_)),
      runner_(runner) {}

StatusOr<SessionInfo> MultiheadSessions::Open(const OpenSessionRequest& r, CallerThread& caller) {
  MHA_RETURN_IF_ERROR(CheckOpenRequest(r, info_.options, limits_));
  auto session = std::make_shared<Session>();
  session->info.cross = r.key.defined() || r.value.defined();
  session->info.batch_size = r.batch_size == 0 ? 1 : r.batch_size;
  session->info.max_tokens = r.max_tokens == 0 ? limits_.max_sequence_length : r.max_tokens;
  {
    std::lock_guard<std::mutex> lock(mu_);
    MHA_RETURN_IF_ERROR(MakeSessionLocked(*session, [&](Session& s) {
      s.cache = std::make_unique<KvCache>(table_.pool(), s.info.batch_size);
      // A self-attention session takes a block per row for its first tokens now; a
      // cross-attention one the blocks of its encoder keys.
      const int64_t keys = s.info.cross ? r.key.size(1) : 1;
      MHA_RETURN_IF_ERROR(MakeRoomLocked(s.cache->BlocksNeeded(keys), "a new session", caller));
      return s.info.cross ? Status::Ok() : s.cache->Reserve(1);
    }));
    if (!session->info.cross) return RegisterLocked(session, r.session_id);
  }
  // The projection outside the lock: other sessions keep stepping.
  caller.BeforeBlocking();
  MHA_RETURN_IF_ERROR(PrefillSession(*model_, session->cache.get(), r.key, r.value));
  std::lock_guard<std::mutex> lock(mu_);
  return RegisterLocked(session, r.session_id);
}

StatusOr<int64_t> MultiheadSessions::ForkTokens(const Session& s, int64_t keep) const {
  const int64_t length = s.info.tokens;
  if (!s.info.cross) return keep;
  if (keep != length) {
    return FailedPrecondition("tokens: session '" + Abbreviate(s.info.id) +
                              "' is a cross-attention session: its cache holds the encoder's "
                              "keys, so it forks whole only (tokens 0 or " +
                              std::to_string(length) + "), got " + std::to_string(keep));
  }
  return s.cache->length();  // every encoder key
}

StatusOr<std::unique_ptr<KvCache>> MultiheadSessions::EmptyCacheLocked(const SessionRecord& r) {
  return std::make_unique<KvCache>(table_.pool(), r.rows);
}

Status MultiheadSessions::CheckTruncate(const Session& s) const {
  if (!s.info.cross) return Status::Ok();
  return FailedPrecondition("session '" + Abbreviate(s.info.id) +
                            "' is a cross-attention session: its cache holds the encoder's "
                            "keys, not decoded tokens, and cannot be truncated");
}

Status MultiheadSessions::CheckStep(const Session& s, const HostInputs& in) const {
  MHA_RETURN_IF_ERROR(CheckSessionStep(*model_, *s.cache, s.info.cross, in));
  const int64_t t = in.query.size(1);
  MHA_RETURN_IF_ERROR(CheckStepCost(limits_, info_, in,
                                    s.info.cross ? s.cache->length() : s.cache->length() + t,
                                    cache_bytes_per_key_));
  if (s.info.tokens + t > s.info.max_tokens) {
    return OutOfRange("session '" + s.info.id + "': " + std::to_string(s.info.tokens) +
                      " tokens decoded + " + std::to_string(t) + " new exceed its max_tokens " +
                      std::to_string(s.info.max_tokens) + " (open a session with more)");
  }
  return Status::Ok();
}

void MultiheadSessions::Step(const std::string& id, InferenceTask task, DoneCallback done) {
  auto step = std::make_shared<PendingStep>(PendingStep{std::move(task), std::move(done)});
  CallerThread caller = std::exchange(step->task.caller, CallerThread());
  const Status entered = Acquire(
      {id}, [](size_t) { return std::string(); },
      [this, step](Hold hold, CallerThread& on) { Begin(step, std::move(hold), on); },
      [step](Status why) { Answer(step, std::move(why)); }, caller);
  if (!entered.ok()) Answer(step, entered);
}

void MultiheadSessions::Begin(const StepPtr& step, Hold hold, CallerThread& caller) {
  const Ptr session = hold.sessions.front();
  const HostInputs& in = step->task.inputs;
  const int64_t t = in.query.size(1);
  StepPlan plan;
  plan.check = [this, &in](const Session& s) { return CheckStep(s, in); };
  plan.blocks = [t](const Session& s) { return s.info.cross ? 0 : s.cache->BlocksNeeded(t); };
  plan.what = "session '" + session->info.id + "' (" + std::to_string(t) + " more tokens)";
  plan.reserve = [t](Session& s) { return s.info.cross ? Status::Ok() : s.cache->Reserve(t); };
  const Status prepared = Prepare(session, plan, caller);
  if (!prepared.ok()) {
    return Finish(hold, nullptr, [&] { Answer(step, prepared); });
  }
  auto work = std::make_shared<SessionStep>();
  work->model = model_;
  work->owner = session;
  work->cache = session->cache.get();
  work->cross = session->info.cross;
  step->task.step = std::move(work);
  runner_->Submit(std::move(step->task),
                  [this, step, hold = std::move(hold), t](InferenceResult result) {
                    Finish(
                        hold,
                        [&](Session& s) {
                          if (result.status.ok()) s.info.tokens += t;
                          result.session_tokens = s.info.tokens;
                        },
                        [&] { step->done(std::move(result)); });
                  });
}

void MultiheadSessions::Answer(const StepPtr& step, Status status) {
  step->task = InferenceTask();  // its inputs may borrow the request: dropped before the answer
  InferenceResult result;
  result.status = std::move(status);
  step->done(std::move(result));
}

}  // namespace mha::serve
