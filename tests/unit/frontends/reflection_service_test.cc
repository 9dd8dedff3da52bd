// ReflectionService (server/frontends/reflection/reflection_service.h): its answers, read back
// as grpcurl reads them (FileDescriptorProtos built into a pool of their own), and one real
// stream of several requests on a CqQueue.
#include "server/frontends/reflection/reflection_service.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cq_test_server.h"
#include "wait.h"

namespace mha::serve {
namespace reflection_service_test {

namespace rpb = grpc::reflection::v1alpha;

// The files of a FileDescriptorResponse, built into `pool` (each after the files it imports).
std::set<std::string> BuildFiles(const rpb::FileDescriptorResponse& files,
                                 google::protobuf::DescriptorPool* pool) {
  std::vector<google::protobuf::FileDescriptorProto> protos(files.file_descriptor_proto_size());
  for (int i = 0; i < files.file_descriptor_proto_size(); ++i) {
    EXPECT_TRUE(protos[i].ParseFromString(files.file_descriptor_proto(i)));
  }
  std::set<std::string> names;
  for (bool progress = true; progress;) {  // imports first, whatever the order sent
    progress = false;
    for (const auto& p : protos) {
      if (names.count(p.name())) continue;
      bool ready = true;
      for (const auto& d : p.dependency()) ready = ready && names.count(d);
      if (!ready) continue;
      EXPECT_NE(pool->BuildFile(p), nullptr) << p.name();
      names.insert(p.name());
      progress = true;
    }
  }
  EXPECT_EQ(names.size(), protos.size()) << "a file's imports were not all sent";
  return names;
}

TEST(ReflectionServiceTest, AnswersServicesFilesSymbolsAndNotFound) {
  CqQueue queue{CqQueue::Options{}};
  const ReflectionService service(&queue, {"mha.v1.AttentionService", "grpc.health.v1.Health"});
  rpb::ServerReflectionRequest request;
  request.set_host("h");
  request.set_list_services("");
  rpb::ServerReflectionResponse r = service.Answer(request);
  EXPECT_EQ(r.valid_host(), "h");
  EXPECT_TRUE(r.original_request().has_list_services());
  std::vector<std::string> names;
  for (const auto& s : r.list_services_response().service()) names.push_back(s.name());
  EXPECT_EQ(names, (std::vector<std::string>{"mha.v1.AttentionService", "grpc.health.v1.Health",
                                             "grpc.reflection.v1alpha.ServerReflection"}));

  request.set_file_containing_symbol("mha.v1.AttentionService.Forward");
  r = service.Answer(request);
  google::protobuf::DescriptorPool pool;
  const std::set<std::string> files = BuildFiles(r.file_descriptor_response(), &pool);
  EXPECT_TRUE(files.count("mha/v1/attention.proto"));
  EXPECT_TRUE(files.count("mha/v1/tensor.proto")) << "the file's imports come with it";
  const auto* method = pool.FindMethodByName("mha.v1.AttentionService.Forward");
  ASSERT_NE(method, nullptr);
  EXPECT_EQ(method->input_type()->full_name(), "mha.v1.ForwardRequest");

  request.set_file_by_filename("grpc/health/v1/health.proto");
  r = service.Answer(request);
  ASSERT_EQ(r.file_descriptor_response().file_descriptor_proto_size(), 1);

  for (const char* symbol : {"no.such.Symbol", ""}) {
    request.set_file_containing_symbol(symbol);
    r = service.Answer(request);
    EXPECT_EQ(r.error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  }
  request.set_file_by_filename("no/such.proto");
  EXPECT_EQ(service.Answer(request).error_response().error_code(),
            static_cast<int>(grpc::StatusCode::NOT_FOUND));
  // A proto3 message has no extension ranges, so no extensions. (A type with ranges is looked up
  // in protobuf's pool, whose lock ThreadSanitizer misreads: libprotobuf unlocks it in a tail
  // call, which TSan attributes to the caller. Not exercised here.)
  request.set_all_extension_numbers_of_type("mha.v1.ForwardRequest");
  r = service.Answer(request);
  EXPECT_EQ(r.all_extension_numbers_response().base_type_name(), "mha.v1.ForwardRequest");
  EXPECT_EQ(r.all_extension_numbers_response().extension_number_size(), 0);
}

TEST(ReflectionServiceTest, AStreamAnswersEachRequestInOrder) {
  CqQueue queue{CqQueue::Options{}};
  ReflectionService service(&queue, {"mha.v1.AttentionService"});
  testing::CqTestServer served(&queue, {&service});
  ASSERT_TRUE(served.listening());
  auto stub = rpb::ServerReflection::NewStub(served.Channel());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + testing::kWaitTimeout);
  auto stream = stub->ServerReflectionInfo(&context);
  rpb::ServerReflectionRequest request;
  request.set_list_services("");
  ASSERT_TRUE(stream->Write(request));
  request.set_file_containing_symbol("no.such.Symbol");
  ASSERT_TRUE(stream->Write(request));
  request.set_file_by_filename("mha/v1/attention.proto");
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  rpb::ServerReflectionResponse r;
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.list_services_response().service(0).name(), "mha.v1.AttentionService");
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_GE(r.file_descriptor_response().file_descriptor_proto_size(), 2);
  EXPECT_FALSE(stream->Read(&r));
  EXPECT_TRUE(stream->Finish().ok());
}

}  // namespace reflection_service_test
}  // namespace mha::serve
