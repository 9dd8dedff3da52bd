// ServerCore::StepLayer: one message of the per-layer step exchange (docs/afd.md) routed to the
// version its sessions live on and handed to its kind's layer steps (LayerStepper::StepLayer:
// validated once, its sessions held, queued on the version's layer-step scheduler), or refused when
// the kind has none. Every message's outcome is counted here.
#include <utility>

#include "mha/text.h"
#include "server/serving/server_core.h"
#include "server/serving/server_core_internal.h"

namespace mha::serve {
namespace {

std::string EntryField(size_t i) { return "entries[" + std::to_string(i) + "].session_id"; }

Status Prefixed(const std::string& field, const Status& s) {
  return Status(s.code(), field + ": " + s.message());
}

// Counts the message on `metrics` (mha_requests_total, and the version's statistics when it
// reached one), then answers.
void Answer(StatsAggregator* metrics, bool reached, Clock::time_point start, Protocol protocol,
            int64_t entries, LayerStepResponse response, const LayerStepDone& done) {
  const Clock::time_point end = Clock::now();
  const double seconds = MicrosBetween(start, end) * 1e-6;
  internal::CountRequest(metrics, response.status.code(), start, end, protocol);
  if (reached) {
    const bool computed = response.status.ok() || response.compute_us > 0;
    metrics->AddInflight(-1);
    metrics->RecordQueue(response.queue_us * 1e-6);
    if (computed) metrics->RecordCompute(response.compute_us * 1e-6);
    metrics->RecordInference(response.status.ok(), response.status.ok() ? entries : 0,
                             response.queue_us, response.compute_us);
    if (response.status.ok()) metrics->RecordStep(seconds);
  }
  done(std::move(response));
}

}  // namespace

StatusOr<std::shared_ptr<ModelHandle>> ServerCore::LayerStepHandle(const LayerStepRequest& r) {
  if (r.entries.empty()) return InvalidArgument("entries: a message steps at least one session");
  std::shared_ptr<ModelHandle> handle;
  for (size_t i = 0; i < r.entries.size(); ++i) {
    const std::string field = EntryField(i);
    const std::string& id = r.entries[i].session_id;
    MHA_RETURN_IF_ERROR(CheckSessionId(id, field.c_str()));
    if (i == 0) {
      auto found = SessionHandle(id);
      if (!found.ok()) return Prefixed(field, found.status());
      handle = std::move(found.value());
      continue;
    }
    auto other = SessionHandle(id);  // restored from the shared KV store when not here
    if (!other.ok()) return Prefixed(field, other.status());
    auto where = session_directory_->Find(id);
    if (!where.ok()) return Prefixed(field, where.status());
    const ModelEntry& e = *handle->entry;
    if (where->model != e.name || where->version != e.version) {
      return InvalidArgument(field + ": session '" + Abbreviate(id) + "' is on model '" +
                             where->model + "' version " + where->version +
                             ", entries[0]'s on model '" + e.name + "' version " + e.version +
                             ": a message steps the sessions of one model version");
    }
  }
  return handle;
}

void ServerCore::StepLayer(LayerStepRequest request, LayerStepDone done) {
  const Clock::time_point start = request.start;
  const Protocol protocol = request.protocol;
  const int64_t entries = static_cast<int64_t>(request.entries.size());
  // Shared: the kind's scheduler answers through it once queued, the refusals here before.
  auto answers = std::make_shared<LayerStepDone>(std::move(done));
  auto refuse = [&](StatsAggregator* metrics, Status status, const std::string& model) {
    request.entries.clear();  // they may borrow the wire message
    LayerStepResponse response;
    response.status = std::move(status);
    response.model = model;
    Answer(metrics, false, start, protocol, entries, std::move(response), *answers);
  };
  if (stopping_) {
    return refuse(MetricsFor(Current().get(), request.model),
                  Unavailable("server is shutting down"), "");
  }
  auto found = LayerStepHandle(request);
  if (!found.ok()) return refuse(MetricsFor(Current().get(), request.model), found.status(), "");
  std::shared_ptr<ModelHandle> handle = std::move(found.value());
  const ModelEntry& e = *handle->entry;
  handle->metrics->AddInflight(1);
  StatsAggregator* metrics = handle->metrics;
  LayerStepDone answer = [handle, start, protocol, entries, answers](LayerStepResponse r) {
    r.model = handle->entry->name;
    r.model_version = handle->entry->version;
    Answer(handle->metrics, true, start, protocol, entries, std::move(r), *answers);
  };
  LayerStepper* stepper = handle->served->layer_steps();
  const Status queued =
      stepper != nullptr
          ? stepper->StepLayer(request, std::move(answer))
          : internal::NotOffered(StatusCode::kInvalidArgument,
                                 "entries[0].session_id: session '" +
                                     Abbreviate(request.entries[0].session_id) + "': ",
                                 *handle, "layer steps (LayerSteps)");
  if (!queued.ok()) {
    metrics->AddInflight(-1);
    metrics->RecordInference(false, 0, 0, 0);
    refuse(metrics, queued, e.name);
  }
}

}  // namespace mha::serve
