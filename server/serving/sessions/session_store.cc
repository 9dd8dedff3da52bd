#include "server/serving/sessions/session_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "mha/text.h"
#include "server/serving/budget.h"
#include "server/serving/observability/metrics.h"

namespace mha::serve {

StatusOr<KvFullPolicy> ParseKvFullPolicy(const std::string& name) {
  if (name == "refuse") return KvFullPolicy::kRefuse;
  if (name == "evict-lru") return KvFullPolicy::kEvictLru;
  return InvalidArgument("--kv-cache-full-policy: '" + Abbreviate(name) +
                         "' is not a policy (refuse, evict-lru)");
}

const char* KvFullPolicyName(KvFullPolicy policy) {
  return policy == KvFullPolicy::kEvictLru ? "evict-lru" : "refuse";
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
                                 });
}

void SessionStore::SweepExpired() {
  std::lock_guard<std::mutex> lock(mu_);
  table_.SweepLocked(options_.clock->Now());
}

// Frees `blocks` blocks (SessionTable::MakeRoomLocked), never by ending `keep`.
Status SessionStore::MakeRoomLocked(int64_t blocks, const Session* keep, const std::string& what) {
  return table_.MakeRoomLocked(blocks, keep, what,
                               std::to_string(table_.pool()->block_tokens()) + " tokens per block");
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
  session->info.id = params.id.empty() ? NewSessionId() : params.id;
  session->info.blocks = session->cache->blocks_held();
  session->last_used = options_.clock->Now();
  // The directory spans every version: a client id open anywhere on this server is refused here,
  // atomically (the session's blocks go back to the pool with `session`).
  MHA_RETURN_IF_ERROR(table_.AddLocked(session));
  return session->info;
}

StatusOr<SessionInfo> SessionStore::Close(const std::string& id) {
  std::deque<Pending> orphans;
  SessionInfo info;
  {
    std::lock_guard<std::mutex> lock(mu_);
    table_.SweepLocked(options_.clock->Now());
    auto it = table_.sessions().find(id);
    if (it == table_.sessions().end()) return directory_->NotFoundFor(id);
    SessionPtr session = it->second;
    info = session->info;
    info.blocks = session->cache->blocks_held();
    orphans.swap(session->pending);
    table_.EndLocked(session, "was closed (CloseSession)");
    table_.PublishLocked();
  }
  for (Pending& p : orphans) {
    p.task = InferenceTask();
    InferenceResult result;
    result.status = NotFound("session '" + Abbreviate(id) + "' was closed while this step waited");
    p.done(std::move(result));
  }
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

void SessionStore::IdleLocked(Session* session) {
  session->busy = false;
  if (session->ended) session->cache->Release();
}

bool SessionStore::NextLocked(const SessionPtr& session, Action* action) {
  if (session->pending.empty() || session->ended) {
    IdleLocked(session.get());
    return false;
  }
  session->busy = true;  // stays busy from step to step: a new arrival waits behind these
  action->pending = std::move(session->pending.front());
  session->pending.pop_front();
  action->session = session;
  action->status = AdmitLocked(session, &action->pending.task);
  return true;
}

void SessionStore::Step(const std::string& id, InferenceTask task, DoneCallback done) {
  Action action;
  action.pending = Pending{std::move(task), std::move(done)};
  {
    std::lock_guard<std::mutex> lock(mu_);
    table_.SweepLocked(options_.clock->Now());
    auto it = table_.sessions().find(id);
    if (it == table_.sessions().end()) {
      action.status = directory_->NotFoundFor(id);
    } else if (it->second->busy) {
      Session& s = *it->second;
      if (s.pending.size() < options_.max_pending_steps) {
        s.pending.push_back(std::move(action.pending));
        return;  // runs when the steps before it are answered
      }
      action.status = ResourceExhausted(
          "session '" + s.info.id + "' has " + std::to_string(s.pending.size()) +
          " steps waiting behind the one in flight (at most " +
          std::to_string(options_.max_pending_steps) + "); send the next after an answer");
    } else {
      action.session = it->second;
      action.session->busy = true;
      action.status = AdmitLocked(action.session, &action.pending.task);
    }
    table_.PublishLocked();
  }
  Run(std::move(action));
}

// Outside mu_: hands an admitted step to the scheduler, or answers a refused one (and moves on
// to the session's next waiting step).
void SessionStore::Run(Action action) {
  for (;;) {
    if (action.status.ok()) {
      SessionPtr session = action.session;
      const int64_t t = action.pending.task.inputs.query.size(1);
      DoneCallback done = std::move(action.pending.done);
      runner_->Submit(std::move(action.pending.task),
                      [this, session, t, done = std::move(done)](InferenceResult result) {
                        OnStepDone(session, t, std::move(result), done);
                      });
      return;
    }
    action.pending.task = InferenceTask();
    InferenceResult result;
    result.status = action.status;
    action.pending.done(std::move(result));
    if (!action.session) return;
    std::lock_guard<std::mutex> lock(mu_);
    Action next;
    if (!NextLocked(action.session, &next)) return;
    action = std::move(next);
  }
}

void SessionStore::OnStepDone(const SessionPtr& session, int64_t tokens, InferenceResult result,
                              const DoneCallback& done) {
  Action next;
  bool has_next = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Session& s = *session;
    if (result.status.ok()) s.info.tokens += tokens;
    s.last_used = options_.clock->Now();
    result.session_tokens = s.info.tokens;
    has_next = NextLocked(session, &next);
    table_.PublishLocked();
  }
  done(std::move(result));
  if (has_next) Run(std::move(next));
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

}  // namespace mha::serve
