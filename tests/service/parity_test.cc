// Through-the-wire parity: every fixture case served by a real mha-server (safetensors,
// torch.save and TorchScript files in one repository), compared with PyTorch's expected values;
// streams in order; many concurrent clients; model metadata.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "service_test_util.h"

namespace mha::testing {
namespace parity_test {

class ParityServer : public SharedServerTest<ParityServer> {
 public:
  static SharedServerSpec Spec() {
    return {FixtureCaseNames(),
            "wrong_shape",
            {"--default-model", "self_basic", "--workers", "2", "--log-level", "debug"}};
  }

 protected:
  static FixtureCase Case(const std::string& name) {
    auto c = LoadFixtureCase(name);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? c.value() : FixtureCase();
  }
};

class CaseParity : public ParityServer, public ::testing::WithParamInterface<std::string> {};

TEST_P(CaseParity, MatchesPyTorchThroughTheWire) {
  const FixtureCase c = Case(GetParam());
  auto response = client_->ForwardRaw(CaseRequest(c, c.name));
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->model(), c.name);
  EXPECT_EQ(response->output().dtype(), v1::FLOAT32);
  ExpectMatchesCase(*response, c, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(AllFixtureCases, CaseParity, ::testing::ValuesIn(FixtureCaseNames()),
                         [](const auto& info) { return info.param; });

TEST_F(ParityServer, EveryFileFormatIsLoadedAsDetectedAndAnswersLikePyTorch) {
  std::set<std::string> formats;
  for (const auto& name : FixtureCaseNames()) {
    const FixtureCase c = Case(name);
    auto info = client_->GetModel(name);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->state(), v1::READY) << name << ": " << info->error();
    EXPECT_EQ(info->format(), c.meta["expect"]["format"].get<std::string>()) << name;
    EXPECT_EQ(info->layout(), c.meta["expect"]["layout"].get<std::string>()) << name;
    formats.insert(info->format());
  }
  EXPECT_EQ(formats, (std::set<std::string>{"safetensors", "torch_save", "torchscript"}));
  for (const char* name : {"format_safetensors", "format_torch_save", "format_torchscript"}) {
    const FixtureCase c = Case(name);
    auto response = client_->ForwardRaw(CaseRequest(c, name));
    ASSERT_TRUE(response.ok()) << name << ": " << response.status().ToString();
    ExpectMatchesCase(*response, c, 1e-5);
  }
}

TEST_F(ParityServer, ForwardStreamAnswersEveryMessageInOrder) {
  const std::vector<std::string> names = FixtureCaseNames();
  ASSERT_GE(names.size(), 4u);
  std::vector<FixtureCase> cases;
  std::vector<v1::ForwardRequest> requests;
  for (size_t i = 0; i < 3 * names.size(); ++i) {  // every case three times, interleaved
    cases.push_back(Case(names[(i * 7) % names.size()]));
    requests.push_back(CaseRequest(cases.back(), cases.back().name));
  }
  std::vector<v1::ForwardResponse> responses;
  const Status status = client_->ForwardStreamRaw(requests, &responses);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(responses.size(), requests.size());
  for (size_t i = 0; i < responses.size(); ++i) {
    SCOPED_TRACE("stream message " + std::to_string(i));
    EXPECT_EQ(responses[i].model(), cases[i].name);
    ExpectMatchesCase(responses[i], cases[i], 1e-5);
  }
}

TEST_F(ParityServer, ConcurrentClientsAllGetTheirOwnCorrectAnswers) {
  const std::vector<std::string> names = FixtureCaseNames();
  constexpr int kThreads = 4, kPerThread = 12;
  std::vector<FixtureCase> cases;
  for (const auto& n : names) cases.push_back(Case(n));
  std::vector<std::vector<v1::ForwardResponse>> answers(kThreads);
  std::vector<std::vector<size_t>> asked(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      client::TensorClient client({shared_->server->target(), std::chrono::seconds(60)});
      for (int i = 0; i < kPerThread; ++i) {
        const size_t k = (t * 5 + i * 3) % cases.size();
        auto response = client.ForwardRaw(CaseRequest(cases[k], cases[k].name));
        if (!response.ok()) {
          errors[t] = response.status().ToString();
          return;
        }
        asked[t].push_back(k);
        answers[t].push_back(std::move(response.value()));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
    ASSERT_EQ(answers[t].size(), asked[t].size());
    for (size_t i = 0; i < answers[t].size(); ++i) {
      SCOPED_TRACE("thread " + std::to_string(t) + " request " + std::to_string(i));
      ExpectMatchesCase(answers[t][i], cases[asked[t][i]], 1e-5);
    }
  }
}

TEST_F(ParityServer, EmptyModelNameUsesTheDefaultAndRequestIdIsEchoed) {
  const FixtureCase c = Case("self_basic");
  std::string request_id = "test-id-42";
  auto response = client_->ForwardRaw(CaseRequest(c, ""), std::nullopt, &request_id);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->model(), "self_basic");
  EXPECT_EQ(request_id, "test-id-42");
  ExpectMatchesCase(*response, c, 1e-5);

  std::string generated;  // none sent: the server makes one up
  ASSERT_TRUE(client_->ForwardRaw(CaseRequest(c, ""), std::nullopt, &generated).ok());
  EXPECT_FALSE(generated.empty());
}

TEST_F(ParityServer, AttentionWeightsAreUnsetUnlessAskedAndAveragedByDefault) {
  const FixtureCase c = Case("self_basic");
  v1::ForwardRequest request = CaseRequest(c, c.name);
  request.set_need_weights(false);
  auto response = client_->ForwardRaw(request);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_FALSE(response->has_attn_weights());

  request.set_need_weights(true);
  request.clear_average_attn_weights();  // unset = PyTorch's default: averaged [B, T, S]
  response = client_->ForwardRaw(request);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  const auto& q = c.inputs.query;
  EXPECT_EQ(codec::ShapeOf(response->attn_weights()),
            (std::vector<int64_t>{q.size(0), q.size(1), q.size(1)}));

  request.set_average_attn_weights(false);
  response = client_->ForwardRaw(request);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(codec::ShapeOf(response->attn_weights()),
            (std::vector<int64_t>{q.size(0), c.meta["expect"]["num_heads"].get<int64_t>(),
                                  q.size(1), q.size(1)}));
}

TEST_F(ParityServer, FullyMaskedQueryRowIsNaNAsInPyTorch) {
  const FixtureCase c = Case("self_basic");
  ForwardInputs in = c.inputs;
  const int64_t b = in.query.size(0), t = in.query.size(1);
  ASSERT_GE(b, 2);
  in.key_padding_mask = at::zeros({b, t}, at::kBool);
  in.key_padding_mask[0].fill_(true);  // batch 0: every key masked
  client::ForwardOptions options;
  options.model = c.name;
  auto result = client_->Forward(in, options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(at::isnan(result->output[0]).all().item<bool>());
  EXPECT_TRUE(at::isfinite(result->output.slice(0, 1)).all().item<bool>());
}

TEST_F(ParityServer, HalfPrecisionInputsAndOutputs) {
  const FixtureCase c = Case("cross_attention");
  ForwardInputs in = c.inputs;
  in.query = in.query.to(at::kHalf);
  in.key = in.key.to(at::kBFloat16);
  client::ForwardOptions options;
  options.model = c.name;
  options.output_dtype = v1::FLOAT16;
  auto result = client_->Forward(in, options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->output.scalar_type(), at::kHalf);
  EXPECT_TRUE(TensorsNear(result->output.to(at::kFloat), c.expected_output, 2e-2));
}

TEST_F(ParityServer, ListModelsShowsReadyModelsAndTheFailedOne) {
  auto models = client_->ListModels();
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  EXPECT_EQ(models->default_model(), "self_basic");
  EXPECT_EQ(static_cast<size_t>(models->models_size()), FixtureCaseNames().size() + 1);
  bool saw_broken = false;
  for (const auto& m : models->models()) {
    if (m.name() == "broken") {
      saw_broken = true;
      EXPECT_EQ(m.state(), v1::FAILED);
      EXPECT_NE(m.error().find("out_proj.weight"), std::string::npos) << m.error();
      EXPECT_NE(m.error().find("[16, 17]"), std::string::npos) << m.error();
    } else {
      EXPECT_EQ(m.state(), v1::READY) << m.name() << ": " << m.error();
      EXPECT_EQ(m.is_default(), m.name() == "self_basic");
    }
  }
  EXPECT_TRUE(saw_broken);
}

TEST_F(ParityServer, GetModelReportsShapesFormatAndSource) {
  auto info = client_->GetModel("kdim_vdim");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  const FixtureCase c = Case("kdim_vdim");
  const auto& expect = c.meta["expect"];
  EXPECT_EQ(info->name(), "kdim_vdim");
  EXPECT_EQ(info->state(), v1::READY);
  EXPECT_EQ(info->embed_dim(), expect["embed_dim"].get<int64_t>());
  EXPECT_EQ(info->num_heads(), expect["num_heads"].get<int64_t>());
  EXPECT_EQ(info->head_dim(), info->embed_dim() / info->num_heads());
  EXPECT_EQ(info->kdim(), expect["kdim"].get<int64_t>());
  EXPECT_EQ(info->vdim(), expect["vdim"].get<int64_t>());
  EXPECT_EQ(info->bias(), expect["bias"].get<bool>());
  EXPECT_EQ(info->add_bias_kv(), expect["add_bias_kv"].get<bool>());
  EXPECT_EQ(info->dtype(), v1::FLOAT32);
  EXPECT_EQ(info->compute_dtype(), v1::FLOAT32);
  // The fixture configs say "auto": the GPU where LibTorch sees one (gpu-check.sh), else the CPU.
  EXPECT_EQ(info->device(), at::hasCUDA() ? "cuda:0" : "cpu");
  EXPECT_EQ(info->format(), "safetensors");
  EXPECT_EQ(info->layout(), expect["layout"].get<std::string>());
  EXPECT_GT(info->parameter_count(), 0);
  EXPECT_NE(info->source().find("kdim_vdim/model.safetensors"), std::string::npos);

  auto broken = client_->GetModel("broken");
  ASSERT_TRUE(broken.ok()) << broken.status().ToString();
  EXPECT_EQ(broken->state(), v1::FAILED);
  EXPECT_FALSE(broken->error().empty());

  auto fallback = client_->GetModel("");
  ASSERT_TRUE(fallback.ok());
  EXPECT_EQ(fallback->name(), "self_basic");
  EXPECT_TRUE(fallback->is_default());
}

}  // namespace parity_test
}  // namespace mha::testing
