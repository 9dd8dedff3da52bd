// mha.v1 OpenSession / CloseSession / ForkSession / TruncateSession (docs/sessions.md): translate
// to ServerCore and back. A step is an ordinary Forward with ForwardRequest.session_id
// (attention_service.cc).
#include "mha/text.h"
#include "server/frontends/common/grpc_call.h"
#include "server/frontends/cq/cq_queue.h"
#include "server/frontends/grpc_v1/attention_service.h"

namespace mha::serve {

void AttentionServiceImpl::HandleOpenSession(const UnaryCall& call,
                                             const v1::OpenSessionRequest* request,
                                             v1::OpenSessionResponse* response) {
  return Unary(call, "OpenSession", [&]() -> UnaryAnswer {
    if (Status header = CheckSessionHeader(call.context(), request->session_id()); !header.ok()) {
      return {header, ""};
    }
    auto decoded = DecodeOpenSessionRequest(*request, options_.max_message_bytes);
    if (!decoded.ok()) return {decoded.status(), ""};
    decoded->caller = CqQueue::Caller();  // a projection or a spill blocks this thread
    auto opened = core_->OpenSession(*decoded);
    if (!opened.ok()) return {opened.status(), ""};
    response->set_session_id(opened->session_id);
    response->set_model(opened->model);
    response->set_model_version(opened->model_version);
    response->set_batch_size(opened->batch_size);
    response->set_max_tokens(opened->max_tokens);
    response->set_cross_attention(opened->cross_attention);
    response->set_kv_block_tokens(opened->kv_block_tokens);
    response->set_kv_blocks(opened->kv_blocks);
    return {Status::Ok(), "session=" + opened->session_id + " model=" + opened->model};
  });
}

void AttentionServiceImpl::HandleCloseSession(const UnaryCall& call,
                                              const v1::CloseSessionRequest* request,
                                              v1::CloseSessionResponse* response) {
  return Unary(call, "CloseSession", [&]() -> UnaryAnswer {
    if (Status header = CheckSessionHeader(call.context(), request->session_id()); !header.ok()) {
      return {header, ""};
    }
    auto closed = core_->CloseSession(request->session_id());
    if (closed.ok()) {
      response->set_tokens(closed->tokens);
      response->set_kv_blocks(closed->kv_blocks);
    }
    return {closed.status(), "session=" + Abbreviate(request->session_id())};
  });
}

void AttentionServiceImpl::HandleForkSession(const UnaryCall& call,
                                             const v1::ForkSessionRequest* request,
                                             v1::ForkSessionResponse* response) {
  return Unary(call, "ForkSession", [&]() -> UnaryAnswer {
    if (Status header = CheckSessionHeader(call.context(), request->session_id()); !header.ok()) {
      return {header, ""};
    }
    auto forked = core_->ForkSession(
        {request->session_id(), request->tokens(), request->new_session_id(), CqQueue::Caller()});
    const std::string log = "session=" + Abbreviate(request->session_id());
    if (!forked.ok()) return {forked.status(), log};
    const OpenSessionResponse& s = forked->session;
    response->set_session_id(s.session_id);
    response->set_model(s.model);
    response->set_model_version(s.model_version);
    response->set_tokens(forked->tokens);
    response->set_kv_blocks(s.kv_blocks);
    response->set_kv_shared_blocks(forked->kv_shared_blocks);
    response->set_batch_size(s.batch_size);
    response->set_max_tokens(s.max_tokens);
    response->set_cross_attention(s.cross_attention);
    response->set_kv_block_tokens(s.kv_block_tokens);
    return {Status::Ok(), log + " fork=" + s.session_id};
  });
}

void AttentionServiceImpl::HandleTruncateSession(const UnaryCall& call,
                                                 const v1::TruncateSessionRequest* request,
                                                 v1::TruncateSessionResponse* response) {
  return Unary(call, "TruncateSession", [&]() -> UnaryAnswer {
    if (Status header = CheckSessionHeader(call.context(), request->session_id()); !header.ok()) {
      return {header, ""};
    }
    auto truncated =
        core_->TruncateSession(request->session_id(), request->tokens(), CqQueue::Caller());
    if (truncated.ok()) {
      response->set_tokens(truncated->tokens);
      response->set_kv_blocks(truncated->kv_blocks);
      response->set_kv_shared_blocks(truncated->kv_shared_blocks);
    }
    return {truncated.status(), "session=" + Abbreviate(request->session_id())};
  });
}

}  // namespace mha::serve
