// MhaModel::Create and Forward reject inconsistent options, weights and inputs with
// INVALID_ARGUMENT messages that name the field, the expected and the actual shape.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "mha/model.h"

namespace mha {
namespace model_validation_test {

using ::testing::HasSubstr;

MhaWeights RandomWeights(const MhaOptions& o) {
  const int64_t e = o.embed_dim;
  MhaWeights w;
  w.q_weight = at::randn({e, e});
  w.k_weight = at::randn({e, o.key_dim()});
  w.v_weight = at::randn({e, o.value_dim()});
  w.out_weight = at::randn({e, e});
  if (o.bias) {
    w.q_bias = at::randn({e});
    w.k_bias = at::randn({e});
    w.v_bias = at::randn({e});
    w.out_bias = at::randn({e});
  }
  return w;
}

std::unique_ptr<MhaModel> SmallModel(MhaOptions o = {}) {
  if (o.embed_dim == 0) o.embed_dim = 16;
  if (o.num_heads == 0) o.num_heads = 4;
  o.device = "cpu";
  auto model = MhaModel::Create(o, RandomWeights(o));
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return std::move(model).value();
}

Status RunForward(const MhaModel& model, const ForwardInputs& in) {
  ForwardOutputs out;
  return model.Forward(in, &out);
}

TEST(ModelCreateTest, EmbedDimNotDivisibleByHeads) {
  MhaOptions o;
  o.embed_dim = 16;
  o.num_heads = 3;
  auto model = MhaModel::Create(o, RandomWeights(o));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(), HasSubstr("16 is not divisible by num_heads 3"));
}

TEST(ModelCreateTest, WrongWeightShapeNamesTensorAndShapes) {
  MhaOptions o;
  o.embed_dim = 16;
  o.num_heads = 4;
  MhaWeights w = RandomWeights(o);
  w.out_weight = at::randn({16, 17});
  auto model = MhaModel::Create(o, w);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              HasSubstr("out_weight has shape [16, 17], expected [16, 16]"));
}

TEST(ModelCreateTest, UnknownOrMissingDevice) {
  MhaOptions o;
  o.embed_dim = 8;
  o.num_heads = 2;
  o.device = "tpu:3";
  auto model = MhaModel::Create(o, RandomWeights(o));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
  if (!at::hasCUDA()) {
    o.device = "cuda:0";
    model = MhaModel::Create(o, RandomWeights(o));
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), StatusCode::kFailedPrecondition);
  }
}

TEST(ModelForwardTest, RejectsBadQuery) {
  auto model = SmallModel();
  ForwardInputs in;
  EXPECT_THAT(RunForward(*model, in).message(), HasSubstr("query: required"));
  in.query = at::randn({2, 5});
  EXPECT_THAT(RunForward(*model, in).message(),
              HasSubstr("query: expected rank 3 [B, T, E=16], got shape [2, 5]"));
  in.query = at::randn({2, 5, 12});
  EXPECT_THAT(RunForward(*model, in).message(),
              HasSubstr("query: expected shape [B, T, E=16] = [2, 5, 16], got [2, 5, 12]"));
  in.query = at::zeros({0, 5, 16});
  EXPECT_THAT(RunForward(*model, in).message(), HasSubstr("every dimension must be > 0"));
  in.query = at::ones({2, 5, 16}, at::kLong);
  EXPECT_THAT(RunForward(*model, in).message(), HasSubstr("query: dtype Long is not supported"));
  EXPECT_EQ(RunForward(*model, in).code(), StatusCode::kInvalidArgument);
}

TEST(ModelForwardTest, RejectsBadKeyValueAndMasks) {
  auto model = SmallModel();
  ForwardInputs in;
  in.query = at::randn({2, 5, 16});
  in.key = at::randn({2, 6, 16});
  EXPECT_THAT(RunForward(*model, in).message(), HasSubstr("got only key"));
  in.value = at::randn({2, 7, 16});
  EXPECT_THAT(RunForward(*model, in).message(),
              HasSubstr("value: expected shape [B=2, S=6, vdim=16] = [2, 6, 16], got [2, 7, 16]"));
  in.value = at::randn({2, 6, 16});
  in.key_padding_mask = at::zeros({2, 5}, at::kBool);
  EXPECT_THAT(RunForward(*model, in).message(),
              HasSubstr("key_padding_mask: expected shape [B=2, S=6] = [2, 6], got [2, 5]"));
  in.key_padding_mask = at::zeros({2, 6}, at::kInt);
  EXPECT_THAT(RunForward(*model, in).message(),
              HasSubstr("key_padding_mask: dtype Int is not supported"));
  in.key_padding_mask = at::Tensor();
  in.attn_mask = at::zeros({5, 5}, at::kBool);
  EXPECT_THAT(
      RunForward(*model, in).message(),
      HasSubstr(
          "attn_mask: expected shape [T, S] = [5, 6] or [B*H, T, S] = [8, 5, 6], got [5, 5]"));
  in.attn_mask = at::zeros({8, 5, 6}, at::kBool);
  EXPECT_TRUE(RunForward(*model, in).ok());
}

TEST(ModelForwardTest, CrossDimModelNeedsKeyAndValue) {
  MhaOptions o;
  o.kdim = 12;
  o.vdim = 20;
  auto model = SmallModel(o);
  ForwardInputs in;
  in.query = at::randn({1, 3, 16});
  EXPECT_THAT(RunForward(*model, in).message(),
              HasSubstr("kdim=12/vdim=20 differ from embed_dim=16"));
  in.key = at::randn({1, 4, 12});
  in.value = at::randn({1, 4, 16});
  EXPECT_THAT(RunForward(*model, in).message(), HasSubstr("vdim=20"));
  in.value = at::randn({1, 4, 20});
  EXPECT_TRUE(RunForward(*model, in).ok());
}

// Documented policy: a query row whose keys are all masked gives NaN, as PyTorch does.
TEST(ModelForwardTest, FullyMaskedRowIsNaNLikePyTorch) {
  auto model = SmallModel();
  ForwardInputs in;
  in.query = at::randn({1, 3, 16});
  in.attn_mask = at::zeros({3, 3}, at::kBool);
  in.attn_mask[1].fill_(true);
  in.need_weights = true;
  ForwardOutputs out;
  ASSERT_TRUE(model->Forward(in, &out).ok());
  EXPECT_TRUE(at::isnan(out.output[0][1]).all().item<bool>());
  EXPECT_FALSE(at::isnan(out.output[0][0]).any().item<bool>());
  EXPECT_FALSE(at::isnan(out.output[0][2]).any().item<bool>());
}

TEST(ModelForwardTest, InputsInOtherDtypesAreCast) {
  auto model = SmallModel();
  ForwardInputs in;
  in.query = at::randn({2, 4, 16});
  ForwardOutputs fp32, from_double;
  ASSERT_TRUE(model->Forward(in, &fp32).ok());
  in.query = in.query.to(at::kDouble);
  ASSERT_TRUE(model->Forward(in, &from_double).ok());
  EXPECT_EQ(from_double.output.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::allclose(fp32.output, from_double.output));
}

}  // namespace model_validation_test
}  // namespace mha
