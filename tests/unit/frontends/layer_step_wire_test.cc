// The LayerSteps wire codec (server/frontends/grpc_v1/layer_step_wire.h): a message decodes into
// the protocol-neutral request (tensors borrowed or copied), and every malformed field is
// INVALID_ARGUMENT naming it; answers carry the id, layer, outputs and timings, or the error; a
// Llama version's ModelInfo.
#include "server/frontends/grpc_v1/layer_step_wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "mha/v1/attention.pb.h"
#include "server/frontends/grpc_v1/forward_request.h"
#include "server/serving/repository/model_repository.h"
#include "test_util.h"

namespace mha::serve {
namespace layer_step_wire_test {

using testing::Contains;

v1::LayerStepRequest Message(int entries, int64_t t = 1, int64_t e = 4) {
  v1::LayerStepRequest r;
  r.set_id("m7");
  r.set_layer(3);
  for (int i = 0; i < entries; ++i) {
    v1::LayerStepEntry* entry = r.add_entries();
    entry->set_session_id("s" + std::to_string(i));
    v1::Tensor* h = entry->mutable_hidden();
    h->set_dtype(v1::FLOAT32);
    h->add_shape(t);
    h->add_shape(e);
    std::vector<float> values(static_cast<size_t>(t * e), 0.5f + static_cast<float>(i));
    h->set_data(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  }
  return r;
}

TEST(LayerStepWire, DecodesEveryEntry) {
  v1::LayerStepRequest m = Message(2, 3);
  m.set_model("llama");
  m.set_output_dtype(v1::BFLOAT16);
  auto r = DecodeLayerStepRequest(m, 1 << 20, /*borrow=*/true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->layer, 3);
  EXPECT_EQ(r->model, "llama");
  ASSERT_EQ(r->entries.size(), 2u);
  EXPECT_EQ(r->entries[1].session_id, "s1");
  EXPECT_EQ(r->entries[1].hidden.shape(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(r->entries[1].hidden.data(), m.entries(1).hidden().data().data());  // borrowed
  ASSERT_TRUE(r->output_dtype.has_value());
  EXPECT_EQ(*r->output_dtype, DType::kBFloat16);
  auto copied = DecodeLayerStepRequest(m, 1 << 20, /*borrow=*/false);
  ASSERT_TRUE(copied.ok());
  EXPECT_NE(copied->entries[0].hidden.data(), m.entries(0).hidden().data().data());
}

TEST(LayerStepWire, MalformedFieldsAreNamed) {
  auto refused = [](const v1::LayerStepRequest& m, int64_t max = 1 << 20) {
    return DecodeLayerStepRequest(m, max, true).status();
  };
  v1::LayerStepRequest m = Message(2);
  m.mutable_entries(1)->set_session_id("bad id!");
  EXPECT_TRUE(Contains(refused(m).message(), "entries[1].session_id")) << refused(m).message();
  m = Message(2);
  m.mutable_entries(1)->clear_hidden();
  EXPECT_TRUE(Contains(refused(m).message(), "entries[1].hidden: required"));
  m = Message(1);
  m.mutable_entries(0)->mutable_hidden()->set_dtype(v1::BOOL);
  EXPECT_TRUE(Contains(refused(m).message(), "entries[0].hidden: dtype bool is not allowed"));
  m = Message(1);
  m.mutable_entries(0)->mutable_hidden()->mutable_data()->resize(10);
  EXPECT_TRUE(Contains(refused(m).message(), "entries[0].hidden: data has 10 bytes"))
      << refused(m).message();
  m = Message(1);
  m.set_output_dtype(v1::INT32);
  EXPECT_TRUE(Contains(refused(m).message(), "output_dtype:"));
  m = Message(1);
  m.set_model_version(std::string(100, '1'));
  EXPECT_TRUE(Contains(refused(m).message(), "model_version"));
  const Status big = refused(Message(64, 16, 64), 4096);
  EXPECT_EQ(big.code(), StatusCode::kResourceExhausted);
}

TEST(LayerStepWire, AnswersEchoTheIdAndLayer) {
  const v1::LayerStepRequest m = Message(2);
  LayerStepResponse r;
  r.outputs = {HostTensor::FromFloats({1, 4}, {1, 2, 3, 4}),
               HostTensor::FromFloats({1, 4}, {5, 6, 7, 8})};
  r.layer_tokens = {9, 12};
  r.model = "llama";
  r.model_version = "1";
  r.queue_us = 5;
  r.compute_us = 40;
  r.pass_messages = 2;
  r.pass_entries = 5;
  v1::LayerStepResponse out;
  ASSERT_TRUE(EncodeLayerStepResponse(m, r, &out).ok());
  EXPECT_EQ(out.id(), "m7");
  EXPECT_EQ(out.layer(), 3);
  ASSERT_EQ(out.outputs_size(), 2);
  float second[4];
  std::memcpy(second, out.outputs(1).data().data(), sizeof(second));
  EXPECT_EQ(second[3], 8.0f);
  EXPECT_EQ(out.layer_tokens(1), 12);
  EXPECT_EQ(out.pass_messages(), 2);
  EXPECT_FALSE(out.has_error());

  r.status = FailedPrecondition("entries[0]: layer 3 would hold 2 tokens, more than layer 2's 1");
  EXPECT_EQ(EncodeLayerStepResponse(m, r, &out).code(), StatusCode::kFailedPrecondition);
  EncodeLayerStepError(m, r.status, &out);
  EXPECT_EQ(out.id(), "m7");
  EXPECT_EQ(out.layer(), 3);
  EXPECT_EQ(out.outputs_size(), 0);
  EXPECT_EQ(out.error().code(), 9);
  EXPECT_TRUE(Contains(out.error().message(), "layer 2's 1"));
}

TEST(LayerStepWire, ALlamaVersionDescribesItsStack) {
  // L=2 E=64 H=8 KV=2 D=8, scanned as a repository folder would be.
  std::vector<ModelEntry> scanned = ScanModel(testing::FixturePath("llama"), "gqa_ratio4");
  ASSERT_EQ(scanned.size(), 1u);
  ModelEntry& e = scanned.front();
  ASSERT_EQ(e.state, ModelState::kLoading) << e.error;
  v1::ModelInfo loading;  // not loaded yet: only what it is
  FillModelInfo(e, false, &loading);
  EXPECT_EQ(loading.architecture(), "llama");
  EXPECT_EQ(loading.num_layers(), 0);
  LoadOverrides overrides;
  overrides.device = "cpu";
  LoadModelEntry(overrides, &e);
  ASSERT_EQ(e.state, ModelState::kReady) << e.error;
  v1::ModelInfo info;
  FillModelInfo(e, false, &info);
  EXPECT_EQ(info.architecture(), "llama");
  EXPECT_EQ(info.num_layers(), 2);
  EXPECT_EQ(info.embed_dim(), 64);
  EXPECT_EQ(info.num_heads(), 8);
  EXPECT_EQ(info.num_key_value_heads(), 2);
  EXPECT_EQ(info.head_dim(), 8);
  EXPECT_EQ(info.max_positions(), 128);
  EXPECT_EQ(info.rope_theta(), 500000.0);
  EXPECT_EQ(info.kv_bytes_per_token_per_layer(), 2 * 2 * 8 * 4);
  EXPECT_EQ(info.dtype(), v1::FLOAT32);
  EXPECT_EQ(info.device(), "cpu");
}

}  // namespace layer_step_wire_test
}  // namespace mha::serve
