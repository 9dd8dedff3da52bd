#include "server/frontends/oip/sequence.h"

#include "server/serving/sessions/session_directory.h"

namespace mha::serve::oip {

StatusOr<std::string> SequenceSessionId(const std::string& sequence_id) {
  const std::string id = kSequenceSessionPrefix + sequence_id;
  const Status valid = CheckSessionId(id, "parameters.sequence_id (as session id \"seq-<id>\")");
  if (!valid.ok()) return valid;
  return id;
}

Status BeginSequence(InferenceServer* core, InferCall* call) {
  if (call->sequence.id.empty()) return Status::Ok();
  auto id = SequenceSessionId(call->sequence.id);
  if (!id.ok()) return id.status();
  InferenceRequest& r = call->request;
  if (call->sequence.start) {
    OpenSessionRequest open;
    open.model = r.model;
    open.model_version = r.model_version;
    open.batch_size =
        r.inputs.query.defined() && r.inputs.query.dim() == 3 ? r.inputs.query.size(0) : 1;
    open.session_id = *id;
    auto opened = core->OpenSession(open);
    if (!opened.ok()) return opened.status();
  }
  r.session_id = *id;
  return Status::Ok();
}

void EndSequence(InferenceServer* core, const SequenceControl& sequence,
                 const std::string& session_id, const Status& step) {
  if (session_id.empty()) return;
  if (sequence.end || (sequence.start && !step.ok())) {
    (void)core->CloseSession(session_id);  // NOT_FOUND when it ended already: nothing to do
  }
}

}  // namespace mha::serve::oip
