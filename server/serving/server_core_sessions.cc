// ServerCore's decoding sessions (docs/sessions.md): OpenSession / CloseSession and the routing
// of a step (a request with a session_id) to the session's model version and its SessionStore.
#include <utility>

#include "mha/text.h"
#include "server/serving/llama/llama_handle.h"
#include "server/serving/server_core.h"
#include "server/serving/server_core_internal.h"

namespace mha::serve {

StatusOr<std::shared_ptr<ModelHandle>> ServerCore::SessionHandle(const std::string& id) {
  MHA_RETURN_IF_ERROR(CheckSessionId(id));
  auto where = session_directory_->Find(id);
  if (!where.ok()) return where.status();
  auto state = Current();
  auto it = state->handles.find({where->model, where->version});
  if (it == state->handles.end()) {
    // Routing left the version (unloaded or replaced): its sessions end with its handle.
    return NotFound("session '" + Abbreviate(id) + "' ended: its model '" + where->model +
                    "' version " + where->version + " is no longer served (unloaded or replaced)");
  }
  return it->second;
}

static Status CheckOpenLimits(const OpenSessionRequest& r, const MhaOptions& o,
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
  if (it == state->handles.end()) {
    return Unavailable("model '" + (*entry)->name + "' version " + (*entry)->version +
                       " is not being served");
  }
  std::shared_ptr<ModelHandle> handle = it->second;
  if (handle->llama) return OpenLlamaSession(*handle, r, options_.limits);
  MHA_RETURN_IF_ERROR(CheckOpenLimits(r, handle->entry->info.options, options_.limits));
  OpenSessionParams params;
  params.batch_size = r.batch_size == 0 ? 1 : r.batch_size;
  params.max_tokens = r.max_tokens == 0 ? options_.limits.max_sequence_length : r.max_tokens;
  params.key = r.key;
  params.value = r.value;
  params.id = r.session_id;
  auto info = handle->sessions->Open(params);
  if (!info.ok()) return info.status();
  OpenSessionResponse out;
  out.session_id = info->id;
  out.model = handle->entry->name;
  out.model_version = handle->entry->version;
  out.batch_size = info->batch_size;
  out.max_tokens = info->max_tokens;
  out.cross_attention = info->cross;
  out.kv_block_tokens = info->block_tokens;
  out.kv_blocks = info->blocks;
  return out;
}

StatusOr<CloseSessionResponse> ServerCore::CloseSession(const std::string& session_id) {
  auto handle = SessionHandle(session_id);
  if (!handle.ok()) return handle.status();
  if ((*handle)->llama) return CloseLlamaSession(**handle, session_id);
  auto info = (*handle)->sessions->Close(session_id);
  if (!info.ok()) return info.status();
  return CloseSessionResponse{info->tokens, info->blocks};
}

// The step's own checks: the session's model, no key/value, the length limit. Shapes against the
// cache are the store's to check when the step's turn comes.
static Status CheckStepRequest(const InferenceRequest& r, const ModelEntry& e,
                               const RequestLimits& limits) {
  if (e.llama) {
    return InvalidArgument("session_id: session '" + Abbreviate(r.session_id) +
                           "' is on the Llama model '" + e.name +
                           "': its steps are LayerSteps messages, one layer at a time");
  }
  if ((!r.model.empty() && r.model != e.name) ||
      (!r.model_version.empty() && r.model_version != e.version)) {
    return InvalidArgument("model: session '" + Abbreviate(r.session_id) + "' is on model '" +
                           e.name + "' version " + e.version + ", the request names '" +
                           Abbreviate(r.model) + "' version '" + Abbreviate(r.model_version) +
                           "' (leave model and model_version empty in a step)");
  }
  if (r.inputs.key.defined() || r.inputs.value.defined()) {
    return InvalidArgument(
        "key/value: a session step carries only its new tokens (query); a cross-attention "
        "session's key/value are given once, to OpenSession");
  }
  if (r.inputs.wants_head_options()) {
    return InvalidArgument(
        "weights_heads/weights_query_*/weights_top_k/weights_dtype/head_stats/head_mask: head "
        "options are not available on a session step (need_weights and average_attn_weights "
        "are); send them in a stateless Forward");
  }
  const HostTensor& q = r.inputs.query;
  if (q.defined() && q.dim() == 3 && q.size(1) > limits.max_sequence_length) {
    return ResourceExhausted("query: sequence length " + std::to_string(q.size(1)) +
                             " exceeds --max-sequence-length " +
                             std::to_string(limits.max_sequence_length));
  }
  return Status::Ok();
}

void ServerCore::InferStep(InferenceRequest request, InferDone done) {
  auto refuse = [&](StatsAggregator* metrics, Status status, const std::string& model) {
    internal::Refuse(&request, done, metrics, std::move(status), model);
  };
  // A stopping server still answers the steps of the sessions it holds, and NOT_FOUND once they
  // are gone: a client resumes the session elsewhere (docs/scale-out.md) instead of waiting.
  auto found = SessionHandle(request.session_id);
  if (!found.ok()) return refuse(MetricsFor(Current().get(), request.model), found.status(), "");
  std::shared_ptr<ModelHandle> handle = std::move(found.value());
  if (Status valid = CheckStepRequest(request, *handle->entry, options_.limits); !valid.ok()) {
    handle->metrics->RecordInference(false, 0, 0, 0);
    return refuse(handle->metrics, std::move(valid), handle->entry->name);
  }
  SessionStore* store = handle->sessions.get();
  const std::string id = request.session_id;
  internal::Dispatch d = internal::MakeDispatch(std::move(handle), &request, std::move(done));
  store->Step(id, std::move(d.task), std::move(d.finish));
}

}  // namespace mha::serve
