#include "server/serving/sessions/session_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "mha/text.h"
#include "server/serving/budget.h"
#include "server/serving/observability/metrics.h"
#include "server/serving/sessions/session_calls.h"

namespace mha::serve {

StatusOr<KvFullPolicy> ParseKvFullPolicy(const std::string& name) {
  if (name == "refuse") return KvFullPolicy::kRefuse;
  if (name == "evict-lru") return KvFullPolicy::kEvictLru;
  if (name == "spill") return KvFullPolicy::kSpill;
  return InvalidArgument("--kv-cache-full-policy: '" + Abbreviate(name) +
                         "' is not a policy (refuse, evict-lru, spill)");
}

const char* KvFullPolicyName(KvFullPolicy policy) {
  switch (policy) {
    case KvFullPolicy::kEvictLru:
      return "evict-lru";
    case KvFullPolicy::kSpill:
      return "spill";
    case KvFullPolicy::kRefuse:
      break;
  }
  return "refuse";
}

SessionStore::SessionStore(SessionOptions options, std::shared_ptr<const MhaModel> model,
                           SessionLocation location, std::shared_ptr<SessionDirectory> directory,
                           ModelRunner* runner, StatsAggregator* metrics)
    : options_(options),
      model_(std::move(model)),
      info_(DescribeModel(*model_)),
      location_(std::move(location)),
      directory_(std::move(directory)),
      runner_(runner),
      metrics_(metrics),
      table_(options_, location_, directory_, metrics) {}

SessionStore::~SessionStore() {
  std::lock_guard<std::mutex> lock(mu_);
  table_.EndAllLocked();
}

Status SessionStore::EnsurePoolLocked() {
  return table_.EnsurePoolLocked([this] { return KvBlockPool::Create(options_.pool, *model_); },
                                 [this](const KvBlockPool& pool) {
                                   spdlog::info(
                                       "model {} v{}: KV cache pool of {} blocks x {} tokens ({} "
                                       "bytes each) on {}",
                                       location_.model, location_.version, pool.total_blocks(),
                                       pool.block_tokens(), pool.block_bytes(), info_.device);
                                 },
                                 info_.device);
}

std::string SessionStore::PerBlockLocked() const {
  return std::to_string(table_.pool()->block_tokens()) + " tokens per block";
}

void SessionStore::SweepExpired() {
  std::lock_guard<std::mutex> lock(mu_);
  table_.SweepLocked(options_.clock->Now());
}

// Frees `blocks` blocks (SessionTable::MakeRoomLocked), never by ending `keep`.
Status SessionStore::MakeRoomLocked(int64_t blocks, const Session* keep, const std::string& what) {
  return table_.MakeRoomLocked(blocks, keep, what, PerBlockLocked());
}

// RESOURCE_EXHAUSTED when the step's estimated working memory or response (its weights over
// every cached key) is over the limits.
static Status CheckStepCost(const SessionOptions& limits, const ModelInfo& model,
                            const HostInputs& in, int64_t keys) {
  const MhaOptions& o = model.options;
  const int64_t extra = (o.add_bias_kv ? 1 : 0) + (o.add_zero_attn ? 1 : 0);
  const int64_t b = in.query.size(0), t = in.query.size(1);
  PassShape pass = ModelPassShape(model, b, t, keys);
  pass.head_options = in.need_weights;
  pass.need_weights = in.need_weights;
  // On a device: StepMask's whole additive mask (causal over several new tokens, or a mask given).
  const bool masked = t > 1 || in.attn_mask.defined() || in.key_padding_mask.defined();
  const bool per_head = in.attn_mask.defined() && in.attn_mask.dim() == 3;
  pass.mask_heads = per_head ? o.num_heads : (masked ? 1 : 0);
  const int64_t work = PassWorkBytes(pass);
  const int64_t heads = in.need_weights ? (in.average_attn_weights ? 1 : o.num_heads) : 0;
  const double response =
      4.0 * (static_cast<double>(b) * t * o.embed_dim +
             static_cast<double>(b) * heads * t * static_cast<double>(keys + extra));
  const std::string shape = "[" + std::to_string(b) + ", " + std::to_string(t) + " new tokens, " +
                            std::to_string(keys) + " keys]";
  if (work > limits.max_work_bytes) {
    return ResourceExhausted("step " + shape + ": estimated working memory " +
                             std::to_string(work) + " bytes exceeds --max-work-bytes " +
                             std::to_string(limits.max_work_bytes) +
                             " (send fewer new tokens per step, or no weights)");
  }
  if (response > static_cast<double>(limits.max_response_bytes)) {
    return ResourceExhausted(
        "step " + shape + ": response of about " + std::to_string(static_cast<int64_t>(response)) +
        " bytes exceeds --max-response-bytes " + std::to_string(limits.max_response_bytes) +
        " (averaged weights, no weights, or fewer new tokens per step)");
  }
  return Status::Ok();
}

StatusOr<SessionInfo> SessionStore::Open(const OpenSessionParams& params) {
  auto session = std::make_shared<Session>();
  session->info.cross = params.key.defined() || params.value.defined();
  session->info.batch_size = params.batch_size;
  session->info.max_tokens = params.max_tokens;
  {
    std::lock_guard<std::mutex> lock(mu_);
    table_.SweepLocked(options_.clock->Now());
    MHA_RETURN_IF_ERROR(EnsurePoolLocked());
    session->info.block_tokens = table_.pool()->block_tokens();
    session->cache = std::make_unique<KvCache>(table_.pool(), params.batch_size);
    // A self-attention session takes a block per row for its first tokens now (so that an
    // admitted session can step); a cross-attention one the blocks of its encoder keys.
    const int64_t keys = session->info.cross ? params.key.size(1) : 1;
    MHA_RETURN_IF_ERROR(
        MakeRoomLocked(session->cache->BlocksNeeded(keys), nullptr, "a new session"));
    if (!session->info.cross) MHA_RETURN_IF_ERROR(session->cache->Reserve(1));
  }
  if (session->info.cross) {  // projection outside the lock: other sessions keep stepping
    MHA_RETURN_IF_ERROR(PrefillSession(*model_, session->cache.get(), params.key, params.value));
  }
  std::lock_guard<std::mutex> lock(mu_);
  return table_.OpenLocked(session, params.id, options_.clock->Now());
}

StatusOr<SessionInfo> SessionStore::Close(const std::string& id) {
  ClosedSteps steps;
  StatusOr<SessionInfo> info = NotFound("");
  {
    std::lock_guard<std::mutex> lock(mu_);
    table_.SweepLocked(options_.clock->Now());
    info = CloseSessionLocked(table_, id, &steps);
  }
  steps.Finish();
  return info;
}

Status SessionStore::AdmitLocked(const SessionPtr& session, InferenceTask* task) {
  Session& s = *session;
  auto step = std::make_shared<SessionStep>();
  const HostInputs& in = task->inputs;
  MHA_RETURN_IF_ERROR(CheckSessionStep(*model_, *s.cache, s.info.cross, in));
  const int64_t t = in.query.size(1);
  MHA_RETURN_IF_ERROR(
      CheckStepCost(options_, info_, in, s.info.cross ? s.cache->length() : s.cache->length() + t));
  if (s.info.tokens + t > s.info.max_tokens) {
    return OutOfRange("session '" + s.info.id + "': " + std::to_string(s.info.tokens) +
                      " tokens decoded + " + std::to_string(t) + " new exceed its max_tokens " +
                      std::to_string(s.info.max_tokens) + " (open a session with more)");
  }
  // A spilled session's blocks come back first (room made as for a step, never by spilling it).
  MHA_RETURN_IF_ERROR(table_.RestoreLocked(session, PerBlockLocked()));
  if (!s.info.cross) {
    MHA_RETURN_IF_ERROR(
        MakeRoomLocked(s.cache->BlocksNeeded(t), &s,
                       "session '" + s.info.id + "' (" + std::to_string(t) + " more tokens)"));
    MHA_RETURN_IF_ERROR(s.cache->Reserve(t));
  }
  step->owner = session;
  step->cache = s.cache.get();
  step->cross = s.info.cross;
  task->step = std::move(step);
  return Status::Ok();
}

void SessionStore::Step(const std::string& id, InferenceTask task, DoneCallback done) {
  auto step = std::make_shared<PendingStep>(PendingStep{std::move(task), std::move(done), nullptr});
  auto turn = std::make_shared<StepTurn>();
  Status entered;
  bool now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    table_.SweepLocked(options_.clock->Now());
    auto it = table_.sessions().find(id);
    if (it == table_.sessions().end()) {
      entered = directory_->NotFoundFor(id);
    } else {
      step->session = it->second;
      turn->lines = {&step->session->steps};
      // The turn owns the step until it leaves the gate; the step does not own the turn.
      std::weak_ptr<StepTurn> weak = turn;
      turn->start = [this, step, weak] { Begin(step, weak.lock()); };
      turn->refuse = [step](size_t, Status why) { Answer(step, std::move(why)); };
      entered = table_.gate().EnterLocked(turn, {"session '" + step->session->info.id + "'"}, &now);
    }
    table_.PublishLocked();
  }
  if (!entered.ok()) return Answer(step, std::move(entered));
  if (now) Begin(step, turn);
}

void SessionStore::Begin(const StepPtr& step, const StepTurnPtr& turn) {
  Status admitted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (step->session->ended) {
      admitted = table_.EndedWhileWaitingLocked(step->session->info.id);
    } else {
      admitted = AdmitLocked(step->session, &step->task);
    }
    table_.PublishLocked();
  }
  if (!admitted.ok()) {
    Answer(step, std::move(admitted));
    return Leave(step, turn);
  }
  const int64_t t = step->task.inputs.query.size(1);
  runner_->Submit(std::move(step->task), [this, step, turn, t](InferenceResult result) {
    OnStepDone(step, turn, t, std::move(result));
  });
}

void SessionStore::Answer(const StepPtr& step, Status status) {
  step->task = InferenceTask();  // its inputs may borrow the request: dropped before the answer
  InferenceResult result;
  result.status = std::move(status);
  step->done(std::move(result));
}

void SessionStore::Leave(const StepPtr& step, const StepTurnPtr& turn) {
  std::vector<StepTurnPtr> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready = table_.LeaveLocked(turn, {step->session});
  }
  StepGate::Start(ready);
}

void SessionStore::OnStepDone(const StepPtr& step, const StepTurnPtr& turn, int64_t tokens,
                              InferenceResult result) {
  std::vector<StepTurnPtr> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Session& s = *step->session;
    if (result.status.ok()) s.info.tokens += tokens;
    s.last_used = options_.clock->Now();
    result.session_tokens = s.info.tokens;
    ready = table_.LeaveLocked(turn, {step->session});
  }
  step->done(std::move(result));
  StepGate::Start(ready);
}

SessionStore::Usage SessionStore::usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  return table_.UsageLocked();
}

OpenSessionResponse OpenedSession(const SessionInfo& info, const std::string& model,
                                  const std::string& version) {
  OpenSessionResponse out;
  out.session_id = info.id;
  out.model = model;
  out.model_version = version;
  out.batch_size = info.batch_size;
  out.max_tokens = info.max_tokens;
  out.cross_attention = info.cross;
  out.kv_block_tokens = info.block_tokens;
  out.kv_blocks = info.blocks;
  return out;
}

StatusOr<CloseSessionResponse> ClosedSession(const StatusOr<SessionInfo>& info) {
  if (!info.ok()) return info.status();
  return CloseSessionResponse{info->tokens, info->blocks};
}

StatusOr<ForkSessionResponse> ForkedSession(const StatusOr<SessionInfo>& info,
                                            const std::string& model, const std::string& version) {
  if (!info.ok()) return info.status();
  return ForkSessionResponse{OpenedSession(info.value(), model, version), info->tokens,
                             info->shared_blocks};
}

StatusOr<TruncateSessionResponse> TruncatedSession(const StatusOr<SessionInfo>& info) {
  if (!info.ok()) return info.status();
  return TruncateSessionResponse{info->tokens, info->blocks, info->shared_blocks};
}

}  // namespace mha::serve
