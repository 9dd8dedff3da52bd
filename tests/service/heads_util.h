// The head-option fixtures (tests/fixtures/heads, written by scripts/fixtures/head_reference.py):
// each request's options and expected tensors, turned into mha.v1 requests on the fixture case's
// inputs, and the checks of an answer against them.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "mha/loader.h"
#include "mha/tensor_adapter.h"
#include "service_test_util.h"

namespace mha::testing {

struct HeadRequest {
  std::string case_name, id;
  nlohmann::json options;
  std::vector<std::string> expect;
};
// Readable in test listings (ctest prints GetParam()) instead of the struct's bytes.
inline void PrintTo(const HeadRequest& r, std::ostream* os) {
  *os << r.case_name << "/" << r.id << " " << r.options.dump();
}

inline nlohmann::json ReadFixtureJson(const std::string& relative) {
  std::ifstream in(FixturePath(relative));
  return nlohmann::json::parse(in);
}

inline std::vector<HeadRequest> HeadRequests() {
  std::vector<HeadRequest> out;
  const nlohmann::json index = ReadFixtureJson("heads/index.json");  // outlives the loop
  for (const auto& name : index["cases"]) {
    const auto c = ReadFixtureJson("heads/" + name.get<std::string>() + ".json");
    for (const auto& r : c["requests"]) {
      out.push_back({c["model_case"].get<std::string>(), r["id"].get<std::string>(), r["options"],
                     r["expect"].get<std::vector<std::string>>()});
    }
  }
  return out;
}

inline TensorMap HeadTensors(const std::string& case_name) {
  auto tensors = ReadSafetensors(FixturePath("heads/" + case_name + ".safetensors"));
  EXPECT_TRUE(tensors.ok()) << tensors.status().ToString();
  return tensors.ok() ? tensors.value() : TensorMap();
}

inline v1::DataType WireDType(const nlohmann::json& o, const char* key) {
  if (!o.contains(key)) return v1::DATA_TYPE_UNSPECIFIED;
  v1::DataType dtype = v1::DATA_TYPE_UNSPECIFIED;
  EXPECT_TRUE(v1::DataType_Parse(o[key].get<std::string>(), &dtype)) << o[key];
  return dtype;
}

// The fixture case's inputs with the request's head options, as sent by a client that sets only
// what the options name (average_attn_weights unset unless given).
inline v1::ForwardRequest HeadForwardRequest(const FixtureCase& c, const HeadRequest& h,
                                             const TensorMap& tensors) {
  const nlohmann::json& o = h.options;
  ForwardInputs in = c.inputs;
  in.need_weights = o.value("need_weights", false);
  in.head_stats = o.value("head_stats", false);
  if (o.contains("head_mask")) in.head_mask = tensors.at(o["head_mask"].get<std::string>());
  v1::ForwardRequest r = CaseRequest(c, c.name);
  r.set_need_weights(in.need_weights);
  r.set_head_stats(in.head_stats);
  if (o.contains("average_attn_weights")) {
    r.set_average_attn_weights(o["average_attn_weights"].get<bool>());
  } else {
    r.clear_average_attn_weights();
  }
  for (int64_t head : o.value("weights_heads", std::vector<int64_t>{})) r.add_weights_heads(head);
  if (o.contains("weights_query_begin")) {
    r.set_weights_query_begin(o["weights_query_begin"].get<int64_t>());
  }
  if (o.contains("weights_query_end"))
    r.set_weights_query_end(o["weights_query_end"].get<int64_t>());
  r.set_weights_top_k(o.value("weights_top_k", 0));
  r.set_weights_topk_indices_dtype(WireDType(o, "weights_topk_indices_dtype"));
  r.set_weights_dtype(WireDType(o, "weights_dtype"));
  if (in.head_mask.defined()) {
    EXPECT_TRUE(
        codec::EncodeTensor(ToHost(in.head_mask, ElementType::kFloat32), r.mutable_head_mask())
            .ok());
  }
  return r;
}

// PyTorch's dense per-head weights [B, H, T, S'] of the case sliced as the request asks (rows,
// heads, average), before any top-k: what the returned top-k indices must point at.
inline at::Tensor SliceDenseWeights(const at::Tensor& dense, const nlohmann::json& o) {
  at::Tensor w = dense.to(at::kDouble);
  const int64_t t = w.size(2);
  const int64_t begin = o.value("weights_query_begin", int64_t{0});
  w = w.narrow(2, begin, o.value("weights_query_end", t) - begin);
  const auto heads = o.value("weights_heads", std::vector<int64_t>{});
  if (!heads.empty()) w = w.index_select(1, at::tensor(heads, at::kLong));
  if (o.value("average_attn_weights", heads.empty())) w = w.sum(1) / w.size(1);
  return w;
}

// The answer to `h` equals the generator's expected tensors; top-k indices point at the values.
inline void ExpectMatchesHeadRequest(const v1::ForwardResponse& response, const FixtureCase& c,
                                     const HeadRequest& h, const TensorMap& tensors) {
  auto result = client::ParseForwardResponse(response);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  auto expected = [&](const std::string& field) { return tensors.at(h.id + "/" + field); };
  const std::map<std::string, at::Tensor> got = {{"output", result->output},
                                                 {"attn_weights", result->attn_weights},
                                                 {"attn_weights_topk_values", result->topk_values},
                                                 {"head_entropy", result->head_entropy},
                                                 {"head_max_weight", result->head_max_weight}};
  for (const auto& [field, tensor] : got) {
    const bool wanted = std::find(h.expect.begin(), h.expect.end(), field) != h.expect.end();
    ASSERT_EQ(tensor.defined(), wanted) << h.id << ": " << field;
    if (!wanted) continue;
    const bool fp16 = h.options.value("weights_dtype", "") == "FLOAT16" && field == "attn_weights";
    EXPECT_TRUE(TensorsNear(tensor, expected(field), fp16 ? 5e-4 : 1e-5)) << h.id << " " << field;
  }
  if (h.options.value("weights_dtype", "") == "FLOAT16") {
    EXPECT_EQ(response.attn_weights().dtype(), v1::FLOAT16);
  }
  ASSERT_EQ(result->topk_indices.defined(), result->topk_values.defined());
  if (!result->topk_indices.defined()) return;
  const bool int64 = h.options.value("weights_topk_indices_dtype", "") == "INT64";
  EXPECT_EQ(result->topk_indices.scalar_type(), int64 ? at::kLong : at::kInt);
  // Ties (masked keys weigh exactly 0) may order indices differently from torch.topk: check that
  // each index picks its value out of PyTorch's dense per-head weights, sliced as asked.
  const at::Tensor dense = SliceDenseWeights(c.expected_weights, h.options);
  const at::Tensor picked = dense.gather(-1, result->topk_indices.to(at::kLong));
  EXPECT_TRUE(TensorsNear(picked, result->topk_values, 1e-5)) << h.id << " indices";
}

}  // namespace mha::testing
