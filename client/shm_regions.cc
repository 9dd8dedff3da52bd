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

void SetShm(v1::SharedMemoryRef* ref, const std::string& region, size_t bytes, size_t offset) {
  ref->set_shared_memory_region(region);
  ref->set_shared_memory_byte_size(bytes);
  ref->set_shared_memory_offset(offset);
}

// A ForwardRequest's input tensors, in the order RewriteV1 places them.
std::vector<const v1::Tensor*> V1Inputs(const v1::ForwardRequest& r) {
  std::vector<const v1::Tensor*> out{&r.query()};
  if (r.has_key()) out.push_back(&r.key());
  if (r.has_value()) out.push_back(&r.value());
  if (r.has_key_padding_mask()) out.push_back(&r.key_padding_mask());
  if (r.has_attn_mask()) out.push_back(&r.attn_mask());
  return out;
}

std::vector<v1::Tensor*> MutableV1Inputs(v1::ForwardRequest* r) {
  std::vector<v1::Tensor*> out{r->mutable_query()};
  if (r->has_key()) out.push_back(r->mutable_key());
  if (r->has_value()) out.push_back(r->mutable_value());
  if (r->has_key_padding_mask()) out.push_back(r->mutable_key_padding_mask());
  if (r->has_attn_mask()) out.push_back(r->mutable_attn_mask());
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<ShmObject>> ShmObject::Create(
    inference::GRPCInferenceService::StubInterface* stub, const std::string& name, size_t size) {
  std::unique_ptr<ShmObject> o(new ShmObject());
  o->stub_ = stub;
  o->name_ = name + "-" + std::to_string(getpid());  // two clients' regions never collide
  const std::string key = "/" + o->name_;
  const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Unavailable("--shm: shm_open " + key + ": " + std::strerror(errno));
  o->key_ = key;  // unlinked by the destructor from here on
  o->size_ = size;
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(size)) == 0) {
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (p == MAP_FAILED) return Unavailable("--shm: cannot size or map " + key);
  o->data_ = static_cast<char*>(p);
  grpc::ClientContext context;
  inference::SystemSharedMemoryRegisterRequest request;
  request.set_name(o->name_);
  request.set_key(key);
  request.set_byte_size(size);
  inference::SystemSharedMemoryRegisterResponse response;
  const grpc::Status s = stub->SystemSharedMemoryRegister(&context, request, &response);
  if (!s.ok()) {
    return Unavailable("--shm: registering " + key + " failed: " + s.error_message() +
                       " (the server needs --allow-client-shm=true)");
  }
  o->registered_ = true;
  return o;
}

ShmObject::~ShmObject() {
  if (registered_) {
    grpc::ClientContext context;
    inference::SystemSharedMemoryUnregisterRequest request;
    request.set_name(name_);
    inference::SystemSharedMemoryUnregisterResponse response;
    (void)stub_->SystemSharedMemoryUnregister(&context, request, &response);
  }
  if (data_ != nullptr) munmap(data_, size_);
  if (!key_.empty()) shm_unlink(key_.c_str());
}

StatusOr<std::unique_ptr<ShmRegions>> ShmRegions::Make(
    inference::GRPCInferenceService::StubInterface* stub,
    const std::vector<std::vector<std::string_view>>& inputs) {
  std::unique_ptr<ShmRegions> r(new ShmRegions());
  size_t in_bytes = 0, out_bytes = 64;
  for (const auto& request : inputs) {
    std::vector<size_t> offsets;
    for (std::string_view raw : request) {
      in_bytes = (in_bytes + 63) / 64 * 64;  // each tensor 64-byte aligned
      offsets.push_back(in_bytes);
      in_bytes += raw.size();
    }
    if (!request.empty()) out_bytes = std::max(out_bytes, 2 * request.front().size());
    r->offsets_.push_back(std::move(offsets));
  }
  auto in = ShmObject::Create(stub, kIn, std::max<size_t>(in_bytes, 64));
  if (!in.ok()) return in.status();
  r->in_ = std::move(in.value());
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (size_t k = 0; k < inputs[i].size(); ++k) {
      std::memcpy(r->in_->data() + r->offsets_[i][k], inputs[i][k].data(), inputs[i][k].size());
    }
  }
  auto out = ShmObject::Create(stub, kOut, out_bytes);
  if (!out.ok()) return out.status();
  r->out_ = std::move(out.value());
  return r;
}

StatusOr<std::unique_ptr<ShmRegions>> ShmRegions::Create(
    inference::GRPCInferenceService::StubInterface* stub,
    const std::vector<inference::ModelInferRequest>& requests) {
  std::vector<std::vector<std::string_view>> inputs;
  inputs.reserve(requests.size());
  for (const auto& request : requests) {
    inputs.emplace_back(request.raw_input_contents().begin(), request.raw_input_contents().end());
  }
  return Make(stub, inputs);
}

StatusOr<std::unique_ptr<ShmRegions>> ShmRegions::CreateV1(
    inference::GRPCInferenceService::StubInterface* stub,
    const std::vector<v1::ForwardRequest>& requests) {
  std::vector<std::vector<std::string_view>> inputs;
  inputs.reserve(requests.size());
  for (const v1::ForwardRequest& request : requests) {
    inputs.emplace_back();
    for (const v1::Tensor* t : V1Inputs(request)) inputs.back().push_back(t->data());
  }
  return Make(stub, inputs);
}

Status ShmRegions::Rewrite(size_t index, inference::ModelInferRequest* request) const {
  if (index >= offsets_.size()) return InvalidArgument("--shm: no such request");
  const auto& offsets = offsets_[index];
  if (static_cast<size_t>(request->raw_input_contents_size()) != offsets.size()) {
    return InvalidArgument("--shm: the request's inputs changed");
  }
  for (int k = 0; k < request->inputs_size(); ++k) {
    SetShm(request->mutable_inputs(k)->mutable_parameters(), in_->name(),
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
    if (o.name() == "output") SetShm(o.mutable_parameters(), out_->name(), out_->size(), 0);
  }
  return Status::Ok();
}

Status ShmRegions::RewriteV1(size_t index, v1::ForwardRequest* request) const {
  if (index >= offsets_.size()) return InvalidArgument("--shm: no such request");
  const auto& offsets = offsets_[index];
  const std::vector<v1::Tensor*> tensors = MutableV1Inputs(request);
  if (tensors.size() != offsets.size())
    return InvalidArgument("--shm: the request's inputs changed");
  for (size_t k = 0; k < tensors.size(); ++k) {
    v1::Tensor* t = tensors[k];
    SetShm(t->mutable_shared_memory(), in_->name(), t->data().size(), offsets[k]);
    t->clear_data();
  }
  SetShm(request->mutable_output_shared_memory(), out_->name(), out_->size(), 0);
  return Status::Ok();
}

}  // namespace mha::client
