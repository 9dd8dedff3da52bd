#include "client/shm_regions.h"

#include <fcntl.h>
#include <grpcpp/client_context.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace mha::client {
namespace {

constexpr char kIn[] = "mha-client-in";
constexpr char kOut[] = "mha-client-out";

void SetShm(google::protobuf::Map<std::string, inference::InferParameter>* p,
            const std::string& region, size_t bytes, size_t offset) {
  (*p)["shared_memory_region"].set_string_param(region);
  (*p)["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(bytes));
  (*p)["shared_memory_offset"].set_int64_param(static_cast<int64_t>(offset));
}

}  // namespace

StatusOr<std::unique_ptr<ShmRegions>> ShmRegions::Create(
    inference::GRPCInferenceService::StubInterface* stub,
    const std::vector<inference::ModelInferRequest>& requests) {
  std::unique_ptr<ShmRegions> r(new ShmRegions());
  r->stub_ = stub;
  size_t in_bytes = 0, out_bytes = 64;
  for (const auto& request : requests) {
    std::vector<size_t> offsets;
    for (const std::string& raw : request.raw_input_contents()) {
      in_bytes = (in_bytes + 63) / 64 * 64;  // each tensor 64-byte aligned
      offsets.push_back(in_bytes);
      in_bytes += raw.size();
    }
    if (request.raw_input_contents_size() > 0) {
      out_bytes = std::max(out_bytes, 2 * request.raw_input_contents(0).size());
    }
    r->offsets_.push_back(std::move(offsets));
  }
  const std::string base = "/mha-client-" + std::to_string(getpid());
  MHA_RETURN_IF_ERROR(r->Open(&r->in_, base + "-in", std::max<size_t>(in_bytes, 64)));
  MHA_RETURN_IF_ERROR(r->Open(&r->out_, base + "-out", out_bytes));
  for (size_t i = 0; i < requests.size(); ++i) {
    for (size_t k = 0; k < r->offsets_[i].size(); ++k) {
      const std::string& raw = requests[i].raw_input_contents(static_cast<int>(k));
      std::memcpy(r->in_.data + r->offsets_[i][k], raw.data(), raw.size());
    }
  }
  MHA_RETURN_IF_ERROR(r->Register(kIn, r->in_));
  MHA_RETURN_IF_ERROR(r->Register(kOut, r->out_));
  return r;
}

Status ShmRegions::Open(Object* object, const std::string& key, size_t size) {
  const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Unavailable("--shm: shm_open " + key + ": " + std::strerror(errno));
  object->key = key;  // unlinked by the destructor from here on
  object->size = size;
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(size)) == 0) {
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (p == MAP_FAILED) return Unavailable("--shm: cannot size or map " + key);
  object->data = static_cast<char*>(p);
  return Status::Ok();
}

Status ShmRegions::Register(const std::string& name, const Object& object) {
  grpc::ClientContext context;
  inference::SystemSharedMemoryRegisterRequest request;
  request.set_name(name);
  request.set_key(object.key);
  request.set_byte_size(object.size);
  inference::SystemSharedMemoryRegisterResponse response;
  const grpc::Status s = stub_->SystemSharedMemoryRegister(&context, request, &response);
  if (!s.ok()) {
    return Unavailable("--shm: registering " + object.key + " failed: " + s.error_message() +
                       " (the server needs --allow-client-shm=true)");
  }
  registered_.push_back(name);
  return Status::Ok();
}

Status ShmRegions::Rewrite(size_t index, inference::ModelInferRequest* request) const {
  if (index >= offsets_.size()) return InvalidArgument("--shm: no such request");
  const auto& offsets = offsets_[index];
  if (static_cast<size_t>(request->raw_input_contents_size()) != offsets.size()) {
    return InvalidArgument("--shm: the request's inputs changed");
  }
  for (int k = 0; k < request->inputs_size(); ++k) {
    SetShm(request->mutable_inputs(k)->mutable_parameters(), kIn,
           request->raw_input_contents(k).size(), offsets[static_cast<size_t>(k)]);
  }
  request->clear_raw_input_contents();
  bool listed = false;
  for (auto& o : *request->mutable_outputs()) listed = listed || o.name() == "output";
  if (!listed) {  // the default outputs, listed: output first (attn_weights in-band if asked)
    const bool weights = request->parameters().count("need_weights") != 0 &&
                         request->parameters().at("need_weights").bool_param();
    request->add_outputs()->set_name("output");
    if (weights) request->add_outputs()->set_name("attn_weights");
  }
  for (auto& o : *request->mutable_outputs()) {
    if (o.name() == "output") SetShm(o.mutable_parameters(), kOut, out_.size, 0);
  }
  return Status::Ok();
}

ShmRegions::~ShmRegions() {
  for (const std::string& name : registered_) {
    grpc::ClientContext context;
    inference::SystemSharedMemoryUnregisterRequest request;
    request.set_name(name);
    inference::SystemSharedMemoryUnregisterResponse response;
    (void)stub_->SystemSharedMemoryUnregister(&context, request, &response);
  }
  for (const Object* o : {&in_, &out_}) {
    if (o->data != nullptr) munmap(o->data, o->size);
    if (!o->key.empty()) shm_unlink(o->key.c_str());
  }
}

}  // namespace mha::client
