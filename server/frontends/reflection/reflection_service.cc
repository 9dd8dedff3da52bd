#include "server/frontends/reflection/reflection_service.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <set>
#include <utility>

namespace mha::serve {

namespace rpb = grpc::reflection::v1alpha;
using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;

namespace {

// The stream: one answer per request, in order; one read or one write out at a time.
class ReflectionReactor final
    : public CqBidiReactor<rpb::ServerReflectionRequest, rpb::ServerReflectionResponse> {
 public:
  ReflectionReactor(const ReflectionService* service, std::unique_ptr<CqStreamCall> call)
      : CqBidiReactor(std::move(call)), service_(service) {
    StartRead(&request_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::OK);  // the client is done (or gone)
    response_ = service_->Answer(request_);
    StartWrite(&response_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
    StartRead(&request_);
  }
  void OnDone() override { delete this; }

 private:
  const ReflectionService* const service_;
  rpb::ServerReflectionRequest request_;
  rpb::ServerReflectionResponse response_;
};

// `file` and every file it imports, each once, as serialized FileDescriptorProtos.
void AddFileAndImports(const FileDescriptor* file, std::set<std::string>* seen,
                       rpb::FileDescriptorResponse* out) {
  if (!seen->insert(file->name()).second) return;
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  out->add_file_descriptor_proto(proto.SerializeAsString());
  for (int i = 0; i < file->dependency_count(); ++i)
    AddFileAndImports(file->dependency(i), seen, out);
}

void NotFound(const std::string& message, rpb::ServerReflectionResponse* out) {
  out->mutable_error_response()->set_error_code(static_cast<int>(grpc::StatusCode::NOT_FOUND));
  out->mutable_error_response()->set_error_message(message);
}

}  // namespace

ReflectionService::ReflectionService(CqQueue* queue, std::vector<std::string> services)
    : services_(std::move(services)) {
  stream_ = ServeRawStream(queue, this, &ReflectionService::RequestServerReflectionInfo,
                           [this](std::unique_ptr<CqStreamCall> call) -> CqBidiBase* {
                             return new ReflectionReactor(this, std::move(call));
                           });
}

rpb::ServerReflectionResponse ReflectionService::Answer(
    const rpb::ServerReflectionRequest& request) const {
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  rpb::ServerReflectionResponse out;
  out.set_valid_host(request.host());
  *out.mutable_original_request() = request;
  std::set<std::string> seen;
  switch (request.message_request_case()) {
    case rpb::ServerReflectionRequest::kListServices: {
      auto* list = out.mutable_list_services_response();
      for (const std::string& name : services_) list->add_service()->set_name(name);
      list->add_service()->set_name(rpb::ServerReflection::service_full_name());
      break;
    }
    case rpb::ServerReflectionRequest::kFileByFilename: {
      const FileDescriptor* file = pool->FindFileByName(request.file_by_filename());
      if (file == nullptr) {
        NotFound("File not found.", &out);
      } else {
        AddFileAndImports(file, &seen, out.mutable_file_descriptor_response());
      }
      break;
    }
    case rpb::ServerReflectionRequest::kFileContainingSymbol: {
      const FileDescriptor* file = pool->FindFileContainingSymbol(request.file_containing_symbol());
      if (file == nullptr) {
        NotFound("Symbol not found.", &out);
      } else {
        AddFileAndImports(file, &seen, out.mutable_file_descriptor_response());
      }
      break;
    }
    case rpb::ServerReflectionRequest::kFileContainingExtension: {
      const auto& ext = request.file_containing_extension();
      const auto* type = pool->FindMessageTypeByName(ext.containing_type());
      const auto* field =
          type == nullptr ? nullptr : pool->FindExtensionByNumber(type, ext.extension_number());
      if (field == nullptr) {
        NotFound(type == nullptr ? "Type not found." : "Extension not found.", &out);
      } else {
        AddFileAndImports(field->file(), &seen, out.mutable_file_descriptor_response());
      }
      break;
    }
    case rpb::ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const auto* type = pool->FindMessageTypeByName(request.all_extension_numbers_of_type());
      if (type == nullptr) {
        NotFound("Type not found.", &out);
        break;
      }
      std::vector<const google::protobuf::FieldDescriptor*> extensions;
      // Only a type with extension ranges can have extensions (no proto3 message does).
      if (type->extension_range_count() > 0) pool->FindAllExtensions(type, &extensions);
      auto* numbers = out.mutable_all_extension_numbers_response();
      numbers->set_base_type_name(type->full_name());
      for (const auto* e : extensions) numbers->add_extension_number(e->number());
      break;
    }
    case rpb::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
      out.mutable_error_response()->set_error_code(
          static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
      out.mutable_error_response()->set_error_message("no request in the message");
      break;
  }
  return out;
}

}  // namespace mha::serve
