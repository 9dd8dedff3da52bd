// Triton's shared-memory extension over REST, on the registry the gRPC front end shares
// (common/shared_memory_registry.h), with the same admin token and messages:
//   GET  /v2/systemsharedmemory[/region/{r}]/status   -> [{"name","key","offset","byte_size"}]
//   POST /v2/systemsharedmemory/region/{r}/register   {"key","offset","byte_size"} -> {}
//   POST /v2/systemsharedmemory[/region/{r}]/unregister  -> {} once the region is unmapped
//   the same under /v2/cudasharedmemory ({"raw_handle": {"b64"}, "device_id", "byte_size"}):
//   status lists none, register is refused (oip::CudaShmRefusal), unregister is OK.
#include <future>
#include <memory>
#include <string>

#include "server/frontends/oip/inference_service.h"
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
  if (cuda) {
    if (name.empty()) return Reply(res, log, Status::Ok(), json::array());
    return Reply(res, log,
                 NotFound("CUDA shared memory region '" + name.substr(0, 128) +
                          "' is not registered (" + oip::CudaShmRefusal().message() + ")"));
  }
  if (c.options->shm == nullptr) return Reply(res, log, NoRegistry());
  auto regions = c.options->shm->Regions(name);
  if (!regions.ok()) return Reply(res, log, regions.status());
  json out = json::array();
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
  if (cuda) return Reply(res, log, oip::CudaShmRefusal());
  if (c.options->shm == nullptr) return Reply(res, log, NoRegistry());
  auto spec = RegisterSpec(req);
  if (!spec.ok()) return Reply(res, log, spec.status());
  Reply(res, log, c.options->shm->Register(*spec), json::object());
}

void HandleShmUnregister(const RestContext& c, const httplib::Request& req, httplib::Response& res,
                         bool cuda) {
  const RequestLog log = BeginRequest(
      req, res, cuda ? "rest CudaSharedMemoryUnregister" : "rest SystemSharedMemoryUnregister");
  if (Status s = Authorize(c, req); !s.ok()) return Reply(res, log, s);
  if (cuda) return Reply(res, log, Status::Ok(), json::object());  // none is ever registered
  if (c.options->shm == nullptr) return Reply(res, log, NoRegistry());
  auto unmapped = std::make_shared<std::promise<void>>();
  std::future<void> done = unmapped->get_future();
  c.options->shm->Unregister(RegionOf(req), [unmapped] { unmapped->set_value(); });
  done.wait();  // this connection's thread waits until requests using the region are answered
  Reply(res, log, Status::Ok(), json::object());
}

}  // namespace mha::serve::rest
