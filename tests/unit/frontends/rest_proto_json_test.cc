// The JSON of the OIP protos as the REST front end answers it (proto_json.h): 64-bit integers as
// numbers, enums by name, maps as objects, defaults present, unset messages left out.
#include <gtest/gtest.h>

#include "inference/grpc_service.pb.h"
#include "inference/model_config.pb.h"
#include "server/frontends/rest/proto_json.h"

namespace mha::serve::rest {
namespace rest_proto_json_test {

TEST(RestProtoJson, Int64AsNumbersEnumsByNameMapsAsObjects) {
  inference::ModelMetadataResponse m;
  m.set_name("enc");
  auto* input = m.add_inputs();
  input->set_name("query");
  input->add_shape(-1);
  input->add_shape(int64_t{1} << 40);
  const nlohmann::json j = ProtoToJson(m);
  EXPECT_EQ(j["inputs"][0]["shape"], nlohmann::json::array({-1, int64_t{1} << 40}));
  EXPECT_EQ(j["versions"], nlohmann::json::array());  // repeated fields always present
  inference::ModelConfig config;
  config.add_input()->set_data_type(inference::TYPE_BF16);
  (*config.mutable_parameters())["embed_dim"].set_string_value("16");
  const nlohmann::json c = ProtoToJson(config);
  EXPECT_EQ(c["input"][0]["data_type"], "TYPE_BF16");
  EXPECT_EQ(c["parameters"]["embed_dim"]["string_value"], "16");
  EXPECT_EQ(c["max_batch_size"], 0);             // scalars with their default value too
  EXPECT_FALSE(c.contains("dynamic_batching"));  // unset messages are left out
}

}  // namespace rest_proto_json_test
}  // namespace mha::serve::rest
