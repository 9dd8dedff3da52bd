// ServerCore's decoding sessions (docs/sessions.md): OpenSession / CloseSession / ForkSession /
// TruncateSession on the session's version's Sessions, and the routing of a step (a request with a
// session_id) to the version's session steps, which check and queue it. A version whose kind lacks
// either is refused here (NotOffered).
#include <utility>

#include "mha/text.h"
#include "server/serving/server_core.h"
#include "server/serving/server_core_internal.h"
#include "server/serving/sessions/kv_tier.h"
#include "server/serving/sessions/redis/session_record.h"

namespace mha::serve {

StatusOr<std::shared_ptr<ModelHandle>> ServerCore::SessionHandle(const std::string& id,
                                                                 CallerThread* caller) {
  MHA_RETURN_IF_ERROR(CheckSessionId(id));
  auto where = session_directory_->Find(id);
  if (!where.ok()) {
    MHA_RETURN_IF_ERROR(AdoptSession(id, where.status(), caller));
    where = session_directory_->Find(id);
    if (!where.ok()) return where.status();
  }
  auto state = Current();
  auto it = state->handles.find({where->model, where->version});
  if (it == state->handles.end()) {
    // Routing left the version (unloaded or replaced): its sessions end with its handle.
    return NotFound("session '" + Abbreviate(id) + "' ended: its model '" + where->model +
                    "' version " + where->version + " is no longer served (unloaded or replaced)");
  }
  return it->second;
}

Status ServerCore::AdoptSession(const std::string& id, const Status& gone, CallerThread* caller) {
  KvTier* tier = options_.sessions.kv_tier.get();
  if (tier == nullptr || !session_directory_->Restorable(id)) return gone;
  if (stopping_ || handing_over_) {
    return Unavailable("session '" + Abbreviate(id) + "' is not held by this replica, which is " +
                       "stopping: retry (another replica restores it from the shared KV store)");
  }
  auto text = tier->store().ReadRecord(id);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) return gone;
    return Status(gone.code(), gone.message() + "; the shared KV store could not be asked (" +
                                   text.status().message() + ")");
  }
  auto record = DecodeSessionRecord(id, *text);
  if (!record.ok()) return record.status();
  auto state = Current();
  auto it = state->handles.find({record->model, record->version});
  if (it == state->handles.end() || !it->second->served) {
    return DataLoss("session '" + Abbreviate(id) + "': its stored record is of model '" +
                    Abbreviate(record->model) + "' version " + Abbreviate(record->version) +
                    ", which this replica does not serve");
  }
  auto sessions = SessionsOf(*it->second, "session_id: ");
  if (!sessions.ok()) return sessions.status();
  CallerThread none;
  return (*sessions)->Adopt(id, caller != nullptr ? *caller : none);
}

int64_t ServerCore::HandOverSessions(std::chrono::steady_clock::time_point deadline) {
  handing_over_ = true;
  KvTier* tier = options_.sessions.kv_tier.get();
  return tier != nullptr ? tier->ReleaseAll(deadline) : 0;
}

namespace {

OpenSessionResponse Opened(const SessionInfo& info, const ModelEntry& e) {
  OpenSessionResponse out;
  out.session_id = info.id;
  out.model = e.name;
  out.model_version = e.version;
  out.batch_size = info.batch_size;
  out.max_tokens = info.max_tokens;
  out.cross_attention = info.cross;
  out.kv_block_tokens = info.block_tokens;
  out.kv_blocks = info.blocks;
  return out;
}

}  // namespace

StatusOr<Sessions*> ServerCore::SessionsOf(const ModelHandle& handle, const std::string& field) {
  Sessions* sessions = handle.served->sessions();
  if (sessions == nullptr) {
    return internal::NotOffered(StatusCode::kInvalidArgument, field, handle, "decoding sessions");
  }
  return sessions;
}

StatusOr<OpenSessionResponse> ServerCore::OpenSession(const OpenSessionRequest& r) {
  if (!r.session_id.empty()) {
    MHA_RETURN_IF_ERROR(CheckSessionId(r.session_id));
    if (session_directory_->Find(r.session_id).ok()) {  // before any work; Add decides races
      return AlreadyExists("session_id: '" + r.session_id +
                           "' is open on this server already (close it, or choose another id)");
    }
  }
  if (stopping_) return Unavailable("server is shutting down");
  auto state = Current();
  auto entry = state->repository->Resolve(r.model, r.model_version);
  if (!entry.ok()) return entry.status();
  auto it = state->handles.find({(*entry)->name, (*entry)->version});
  if (it == state->handles.end() || !it->second->served) {
    return Unavailable("model '" + (*entry)->name + "' version " + (*entry)->version +
                       " is not being served");
  }
  auto sessions = SessionsOf(*it->second, "model: ");
  if (!sessions.ok()) return sessions.status();
  OpenSessionRequest request = r;
  // With the shared KV store the id is known before the session exists: its lease comes first.
  if (options_.sessions.kv_tier && request.session_id.empty()) request.session_id = NewSessionId();
  if (options_.sessions.kv_tier) MHA_RETURN_IF_ERROR((*sessions)->Claim(request.session_id));
  CallerThread caller = r.caller;
  auto info = (*sessions)->Open(request, caller);
  if (!info.ok()) {
    if (options_.sessions.kv_tier) (*sessions)->Unclaim(request.session_id);
    return info.status();
  }
  return Opened(*info, *it->second->entry);
}

StatusOr<CloseSessionResponse> ServerCore::CloseSession(const std::string& session_id) {
  CallerThread caller;
  auto handle = SessionHandle(session_id, &caller);
  if (!handle.ok()) return handle.status();
  auto sessions = SessionsOf(**handle, "session_id: ");
  if (!sessions.ok()) return sessions.status();
  auto info = (*sessions)->Close(session_id);
  if (!info.ok()) return info.status();
  return CloseSessionResponse{info->tokens, info->blocks};
}

StatusOr<ForkSessionResponse> ServerCore::ForkSession(const ForkSessionRequest& r) {
  if (!r.new_session_id.empty()) {
    MHA_RETURN_IF_ERROR(CheckSessionId(r.new_session_id, "new_session_id"));
    if (session_directory_->Find(r.new_session_id).ok()) {  // before any work; Add decides races
      return AlreadyExists("new_session_id: '" + r.new_session_id +
                           "' is open on this server already (close it, or choose another id)");
    }
  }
  if (stopping_) return Unavailable("server is shutting down");
  CallerThread caller = r.caller;
  auto handle = SessionHandle(r.session_id, &caller);
  if (!handle.ok()) return handle.status();
  auto sessions = SessionsOf(**handle, "session_id: ");
  if (!sessions.ok()) return sessions.status();
  std::string new_id = r.new_session_id;
  if (options_.sessions.kv_tier && new_id.empty()) new_id = NewSessionId();
  if (options_.sessions.kv_tier) MHA_RETURN_IF_ERROR((*sessions)->Claim(new_id));
  auto info = (*sessions)->Fork(r.session_id, r.tokens, new_id, caller);
  if (!info.ok()) {
    if (options_.sessions.kv_tier) (*sessions)->Unclaim(new_id);
    return info.status();
  }
  return ForkSessionResponse{Opened(*info, *(*handle)->entry), info->tokens, info->shared_blocks};
}

StatusOr<TruncateSessionResponse> ServerCore::TruncateSession(const std::string& session_id,
                                                              int64_t tokens, CallerThread caller) {
  auto handle = SessionHandle(session_id, &caller);
  if (!handle.ok()) return handle.status();
  auto sessions = SessionsOf(**handle, "session_id: ");
  if (!sessions.ok()) return sessions.status();
  auto info = (*sessions)->Truncate(session_id, tokens, caller);
  if (!info.ok()) return info.status();
  return TruncateSessionResponse{info->tokens, info->blocks, info->shared_blocks};
}

void ServerCore::InferStep(InferenceRequest request, InferDone done) {
  auto refuse = [&](StatsAggregator* metrics, Status status, const std::string& model) {
    internal::Refuse(&request, done, metrics, std::move(status), model);
  };
  // A stopping server still answers the steps of the sessions it holds, and NOT_FOUND once they
  // are gone: a client resumes the session elsewhere (docs/scale-out.md) instead of waiting.
  auto found = SessionHandle(request.session_id, &request.caller);
  if (!found.ok()) return refuse(MetricsFor(Current().get(), request.model), found.status(), "");
  std::shared_ptr<ModelHandle> handle = std::move(found.value());
  SessionSteps* steps = handle->served->session_steps();
  Status valid =
      steps != nullptr
          ? steps->CheckStep(request)
          : internal::NotOffered(StatusCode::kInvalidArgument,
                                 "session_id: session '" + Abbreviate(request.session_id) + "': ",
                                 *handle, "session steps in Forward calls");
  if (!valid.ok()) {
    handle->metrics->RecordInference(false, 0, 0, 0);
    return refuse(handle->metrics, std::move(valid), handle->entry->name);
  }
  const std::string id = request.session_id;
  internal::Dispatch d = internal::MakeDispatch(std::move(handle), &request, std::move(done));
  steps->Step(id, std::move(d.task), std::move(d.finish));
}

}  // namespace mha::serve
