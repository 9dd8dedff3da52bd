// Triton's sequence extension on decoding sessions (docs/sessions.md), for every OIP front end
// (gRPC ModelInfer, ModelStreamInfer, REST): a request with parameters.sequence_id is a step of
// the session "seq-<sequence_id>"; sequence_start opens that session first (on the request's
// model and version, batch size = the query's B; the request may carry a prefill), and
// sequence_end closes it once the step is answered. A step for a sequence that was never started,
// or has ended, gets the session's NOT_FOUND saying why: it is never answered statelessly.
#pragma once

#include <string>

#include "mha/status.h"
#include "server/frontends/oip/infer_request.h"
#include "server/serving/inference_server.h"

namespace mha::serve::oip {

inline constexpr char kSequenceSessionPrefix[] = "seq-";

// "seq-" + the sequence id; INVALID_ARGUMENT (naming parameters.sequence_id) when the result is
// not a valid session id (CheckSessionId: 1 to 128 characters of [A-Za-z0-9._:-]).
StatusOr<std::string> SequenceSessionId(const std::string& sequence_id);

// Before Infer: sets call->request.session_id for a sequence request and, with sequence_start,
// opens the session (OpenSession's errors: ALREADY_EXISTS while it is open, ...).
Status BeginSequence(InferenceServer* core, InferCall* call);

// After the answer: closes the session when the request had sequence_end, or when it opened the
// session and the step failed (so that the client may start it again). Does nothing otherwise.
void EndSequence(InferenceServer* core, const SequenceControl& sequence,
                 const std::string& session_id, const Status& step);

}  // namespace mha::serve::oip
