#include "server/frontends/grpc_v1/layer_step_wire.h"

#include <string>
#include <utility>

#include "proto/wire/tensor_codec.h"
#include "server/frontends/common/request_limits.h"
#include "server/frontends/grpc_v1/tensor_shm.h"
#include "server/serving/sessions/session_directory.h"

namespace mha::serve {

StatusOr<LayerStepRequest> DecodeLayerStepRequest(const v1::LayerStepRequest& r,
                                                  int64_t max_message_bytes, bool borrow,
                                                  const SharedMemoryRegistry* shm, ShmPlan* plan) {
  MHA_RETURN_IF_ERROR(CheckMessageBytes(r.ByteSizeLong(), max_message_bytes));
  MHA_RETURN_IF_ERROR(CheckModelVersion(r.model_version()));
  LayerStepRequest out;
  out.model = r.model();
  out.model_version = r.model_version();
  out.layer = r.layer();
  if (r.output_dtype() != v1::DATA_TYPE_UNSPECIFIED) {
    auto dtype = codec::FromProtoDType(r.output_dtype());
    if (!dtype.ok()) return InvalidArgument("output_dtype: " + dtype.status().message());
    out.output_dtype = *dtype;
  }
  out.entries.reserve(static_cast<size_t>(r.entries_size()));
  for (int i = 0; i < r.entries_size(); ++i) {
    const v1::LayerStepEntry& e = r.entries(i);
    const std::string field = "entries[" + std::to_string(i) + "]";
    MHA_RETURN_IF_ERROR(CheckSessionId(e.session_id(), (field + ".session_id").c_str()));
    if (!e.has_hidden()) return InvalidArgument(field + ".hidden: required");
    const v1::DataType dtype = e.hidden().dtype();
    if (dtype == v1::BOOL || dtype == v1::INT32 || dtype == v1::INT64) {
      return InvalidArgument(field + ".hidden: dtype " + codec::DataTypeName(dtype) +
                             " is not allowed (use FLOAT32, FLOAT16 or BFLOAT16)");
    }
    auto hidden = DecodeV1Tensor(e.hidden(), field + ".hidden", borrow, shm, plan);
    if (!hidden.ok()) return hidden.status();
    out.entries.push_back(LayerStepEntry{e.session_id(), std::move(hidden.value())});
    if (!e.has_output_shared_memory()) continue;
    auto place = PlaceV1Output(e.output_shared_memory(), field + ".output", shm);
    if (!place.ok()) return place.status();
    if (!place->has_value()) continue;
    if (plan == nullptr) return NoShmRegistry(field + ".output");
    plan->outputs.resize(static_cast<size_t>(r.entries_size()));
    out.entries.back().output_capacity = static_cast<int64_t>((*place)->bytes);
    plan->outputs[static_cast<size_t>(i)] = std::move(place.value());
  }
  return out;
}

void EncodeLayerStepError(const v1::LayerStepRequest& request, const Status& status,
                          v1::LayerStepResponse* out) {
  out->Clear();
  out->set_id(request.id());
  out->set_layer(request.layer());
  out->mutable_error()->set_code(static_cast<int32_t>(status.code()));
  out->mutable_error()->set_message(status.message());
}

Status EncodeLayerStepResponse(const v1::LayerStepRequest& request, const LayerStepResponse& r,
                               v1::LayerStepResponse* out, const ShmPlan* shm) {
  if (!r.status.ok()) return r.status;
  if (shm != nullptr) MHA_RETURN_IF_ERROR(CheckShmInputs(*shm));  // read intact by the core
  out->set_id(request.id());
  out->set_layer(request.layer());
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    const bool placed = shm != nullptr && i < shm->outputs.size() && shm->outputs[i];
    if (placed) {
      const std::string field = "entries[" + std::to_string(i) + "].output";
      MHA_RETURN_IF_ERROR(
          EncodeV1ShmTensor(r.outputs[i], *shm->outputs[i], field, out->add_outputs()));
    } else {
      MHA_RETURN_IF_ERROR(codec::EncodeTensor(r.outputs[i], out->add_outputs()));
    }
  }
  for (int64_t tokens : r.layer_tokens) out->add_layer_tokens(tokens);
  out->set_model(r.model);
  out->set_model_version(r.model_version);
  out->set_queue_us(r.queue_us);
  out->set_compute_us(r.compute_us);
  out->set_pass_messages(r.pass_messages);
  out->set_pass_entries(r.pass_entries);
  return Status::Ok();
}

}  // namespace mha::serve
