// Triton's shared-memory extension over REST, on the registry the gRPC front end shares
// (shm/shared_memory_registry.h), with the same admin token and messages:
//   GET  /v2/systemsharedmemory[/region/{r}]/status   -> [{"name","key","offset","byte_size"}]
//   POST /v2/systemsharedmemory/region/{r}/register   {"key","offset","byte_size"} -> {}
//   POST /v2/systemsharedmemory[/region/{r}]/unregister  -> {} once the region is unmapped
//   the same under /v2/cudasharedmemory: register {"raw_handle": {"b64": ...}, "device_id",
//   "byte_size"} (the cudaIpcMemHandle_t's 64 bytes, base64), status [{"name","device_id",
//   "byte_size"}]; a build without CUDA shared memory refuses register (FAILED_PRECONDITION).
#include <cstdint>
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "server/frontends/rest/rest_handlers.h"

namespace mha::serve::rest {
namespace {

using nlohmann::json;

std::string RegionOf(const httplib::Request& req) {
  return req.matches.size() > 1 ? req.matches[1].str() : "";
}

Status NoRegistry() {
  return FailedPrecondition("shared memory is not available on this endpoint");
}

// A non-negative integer member of the body (absent = 0).
StatusOr<uint64_t> Count(const json& body, const char* key) {
  const auto it = body.find(key);
  if (it == body.end()) return uint64_t{0};
  if (!it->is_number_unsigned()) {
    return InvalidArgument(std::string(key) + ": must be a non-negative integer");
  }
  return it->get<uint64_t>();
}

// Standard base64 (RFC 4648, '=' padding optional): INVALID_ARGUMENT naming `field` otherwise.
StatusOr<std::string> Base64Decode(const std::string& text, const std::string& field) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  size_t end = text.size();
  while (end > 0 && text[end - 1] == '=') --end;
  if (text.size() - end > 2) return InvalidArgument(field + ": is not base64 (too much padding)");
  for (size_t i = 0; i < end; ++i) {
    const size_t v = kAlphabet.find(text[i]);
    if (v == std::string::npos) {
      return InvalidArgument(field + ": is not base64 (character " + std::to_string(i) + ")");
    }
    bits = (bits << 6) | static_cast<uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xff));
    }
  }
  return out;
}

StatusOr<CudaShmRegionSpec> CudaRegisterSpec(const httplib::Request& req) {
  auto body = SmallBody(req);
  if (!body.ok()) return body.status();
  CudaShmRegionSpec spec;
  spec.name = RegionOf(req);
  const auto handle = body->find("raw_handle");
  if (handle == body->end() || !handle->is_object() || !handle->contains("b64") ||
      !(*handle)["b64"].is_string()) {
    return InvalidArgument("raw_handle: must be {\"b64\": \"<base64 of the cudaIpcMemHandle_t>\"}");
  }
  auto raw = Base64Decode((*handle)["b64"].get<std::string>(), "raw_handle.b64");
  if (!raw.ok()) return raw.status();
  spec.raw_handle = std::move(raw.value());
  auto device = Count(*body, "device_id");
  if (!device.ok()) return device.status();
  auto size = Count(*body, "byte_size");
  if (!size.ok()) return size.status();
  if (*device > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
    return InvalidArgument("device_id: " + std::to_string(*device) + " is not a device index");
  }
  spec.device_id = static_cast<int64_t>(*device);
  spec.byte_size = *size;
  return spec;
}

StatusOr<ShmRegionSpec> RegisterSpec(const httplib::Request& req) {
  auto body = SmallBody(req);
  if (!body.ok()) return body.status();
  ShmRegionSpec spec;
  spec.name = RegionOf(req);
  const auto key = body->find("key");
  if (key == body->end() || !key->is_string()) return InvalidArgument("key: must be a string");
  spec.key = key->get<std::string>();
  auto offset = Count(*body, "offset");
  if (!offset.ok()) return offset.status();
  auto size = Count(*body, "byte_size");
  if (!size.ok()) return size.status();
  spec.offset = *offset;
  spec.byte_size = *size;
  return spec;
}

}  // namespace

void HandleShmStatus(const RestContext& c, const httplib::Request& req, httplib::Response& res,
                     bool cuda) {
  const RequestLog log = BeginRequest(
      req, res, cuda ? "rest CudaSharedMemoryStatus" : "rest SystemSharedMemoryStatus");
  if (Status s = Authorize(c, req); !s.ok()) return Reply(res, log, s);
  const std::string name = RegionOf(req);
  if (c.options->shm == nullptr) return Reply(res, log, NoRegistry());
  json out = json::array();
  if (cuda) {
    auto regions = c.options->shm->CudaRegions(name);
    if (!regions.ok()) return Reply(res, log, regions.status());
    for (const CudaShmRegionSpec& r : *regions) {
      out.push_back({{"name", r.name}, {"device_id", r.device_id}, {"byte_size", r.byte_size}});
    }
    return Reply(res, log, Status::Ok(), out);
  }
  auto regions = c.options->shm->Regions(name);
  if (!regions.ok()) return Reply(res, log, regions.status());
  for (const ShmRegionSpec& r : *regions) {
    out.push_back(
        {{"name", r.name}, {"key", r.key}, {"offset", r.offset}, {"byte_size", r.byte_size}});
  }
  Reply(res, log, Status::Ok(), out);
}

void HandleShmRegister(const RestContext& c, const httplib::Request& req, httplib::Response& res,
                       bool cuda) {
  const RequestLog log = BeginRequest(
      req, res, cuda ? "rest CudaSharedMemoryRegister" : "rest SystemSharedMemoryRegister");
  if (Status s = Authorize(c, req); !s.ok()) return Reply(res, log, s);
  if (c.options->shm == nullptr) return Reply(res, log, NoRegistry());
  if (cuda) {
    if (!c.options->shm->allowed()) return Reply(res, log, c.options->shm->RegisterCuda({}));
    auto spec = CudaRegisterSpec(req);
    if (!spec.ok()) return Reply(res, log, spec.status());
    return Reply(res, log, c.options->shm->RegisterCuda(*spec), json::object());
  }
  auto spec = RegisterSpec(req);
  if (!spec.ok()) return Reply(res, log, spec.status());
  Reply(res, log, c.options->shm->Register(*spec), json::object());
}

void HandleShmUnregister(const RestContext& c, const httplib::Request& req, httplib::Response& res,
                         bool cuda) {
  const RequestLog log = BeginRequest(
      req, res, cuda ? "rest CudaSharedMemoryUnregister" : "rest SystemSharedMemoryUnregister");
  if (Status s = Authorize(c, req); !s.ok()) return Reply(res, log, s);
  if (c.options->shm == nullptr) return Reply(res, log, NoRegistry());
  auto unmapped = std::make_shared<std::promise<void>>();
  std::future<void> done = unmapped->get_future();
  c.options->shm->Unregister(
      RegionOf(req), [unmapped] { unmapped->set_value(); },
      cuda ? ShmKind::kCuda : ShmKind::kSystem);
  done.wait();  // this connection's thread waits until requests using the region are answered
  Reply(res, log, Status::Ok(), json::object());
}

}  // namespace mha::serve::rest
