// CUDA regions in SharedMemoryRegistry (Triton's cuda_shared_memory extension): the refusals that
// need no device, which every build answers the same (registration off, the handle's size, a
// byte size of 0, a name a system region has, the budget), the answer of a build without CUDA
// shared memory, and the status lists keeping the two kinds apart. A real IPC handle opened on a
// device: cuda_shm_test.cc (skips without one).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "mha/device_memory.h"
#include "mha/host_io.h"
#include "server/frontends/shm/shared_memory_registry.h"
#include "shm_test_object.h"

namespace mha::serve {
namespace cuda_shm_registry_test {

using ::testing::HasSubstr;
using testing::ShmTestObject;

const std::string kHandle(kCudaIpcHandleBytes, '\x01');

ShmRegistryOptions On(int64_t max_bytes = int64_t{1} << 30) { return {true, max_bytes}; }

TEST(CudaShmRegistry, RegistrationIsOffUnlessAllowed) {
  SharedMemoryRegistry registry(ShmRegistryOptions{});
  const Status s = registry.RegisterCuda({"c", kHandle, 0, 64});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("--allow-client-shm=true"));
}

TEST(CudaShmRegistry, RefusesAHandleThatIsNot64Bytes) {
  SharedMemoryRegistry registry(On());
  const Status s = registry.RegisterCuda({"c", std::string(63, 'x'), 0, 64});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("CUDA region 'c': raw_handle is 63 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("cudaIpcMemHandle_t is 64"));
  EXPECT_EQ(registry.mapped_bytes(), 0);
}

TEST(CudaShmRegistry, RefusesZeroBytesEmptyNamesAndNegativeDevices) {
  SharedMemoryRegistry registry(On());
  const Status zero = registry.RegisterCuda({"c", kHandle, 0, 0});
  EXPECT_EQ(zero.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.message(), HasSubstr("byte_size must be > 0"));
  EXPECT_EQ(registry.RegisterCuda({"", kHandle, 0, 64}).code(), StatusCode::kInvalidArgument);
  const Status negative = registry.RegisterCuda({"c", kHandle, -1, 64});
  EXPECT_EQ(negative.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.message(), HasSubstr("device_id -1"));
}

TEST(CudaShmRegistry, ABuildWithoutCudaShmSaysSo) {
  if (CudaShmBuilt()) GTEST_SKIP() << "built with CUDA shared memory (cuda_shm_test.cc)";
  SharedMemoryRegistry registry(On());
  const Status s = registry.RegisterCuda({"c", kHandle, 0, 64});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("CUDA region 'c': CUDA shared memory: this server was built"));
  EXPECT_THAT(s.message(), HasSubstr("use system shared memory"));
  EXPECT_FALSE(CudaShmUnavailableReason().empty());
  EXPECT_EQ(registry.mapped_bytes(), 0);
}

TEST(CudaShmRegistry, SharesTheNamesWithSystemRegions) {
  ShmTestObject object(4096);
  ASSERT_TRUE(object.ok());
  SharedMemoryRegistry registry(On());
  ASSERT_TRUE(registry.Register({"r", object.key(), 0, 64}).ok());
  const Status s = registry.RegisterCuda({"r", kHandle, 0, 64});
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("region 'r' is registered already as a system region"));
  // Unregistering CUDA regions leaves the system one; its name is still taken.
  bool done = false;
  registry.Unregister(
      "r", [&] { done = true; }, ShmKind::kCuda);
  EXPECT_TRUE(done);
  EXPECT_TRUE(registry.Regions("r").ok());
  EXPECT_EQ(registry.RegisterCuda({"r", kHandle, 0, 64}).code(), StatusCode::kAlreadyExists);
}

TEST(CudaShmRegistry, CountsAgainstTheBudgetBeforeOpening) {
  SharedMemoryRegistry registry(On(1024));
  const Status s = registry.RegisterCuda({"big", kHandle, 0, 4096});
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("4096 bytes more would map 0 + 4096 = 4096 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("over --max-shm-bytes 1024"));
}

TEST(CudaShmRegistry, StatusListsKeepTheKindsApart) {
  ShmTestObject object(4096);
  ASSERT_TRUE(object.ok());
  SharedMemoryRegistry registry(On());
  ASSERT_TRUE(registry.Register({"sys", object.key(), 0, 64}).ok());
  auto cuda = registry.CudaRegions("");
  ASSERT_TRUE(cuda.ok());
  EXPECT_TRUE(cuda->empty());  // the system region is not a CUDA one
  auto named = registry.CudaRegions("sys");
  EXPECT_EQ(named.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(named.status().message(),
              HasSubstr("CUDA shared memory region 'sys' is not registered (CUDA regions: none)"));
  auto system = registry.Regions("");
  ASSERT_TRUE(system.ok());
  ASSERT_EQ(system->size(), 1u);
  auto slice = registry.Acquire("query", "sys", 0, 64);
  ASSERT_TRUE(slice.ok());
  EXPECT_FALSE(slice->on_device());
  EXPECT_EQ(slice->device, -1);
}

// The device view the front ends carry for an input in a CUDA region (never dereferenced there).
TEST(CudaShmRegistry, DeviceViewsCarryTheirDevice) {
  float fake = 0;  // stands in for a device pointer: only its value is carried
  auto view = HostTensor::DeviceView(ElementType::kFloat32, {1}, &fake, 4, 1, nullptr, "query");
  ASSERT_TRUE(view.ok());
  EXPECT_TRUE(view->on_device());
  EXPECT_EQ(view->device(), 1);
  EXPECT_FALSE(HostTensor::FromFloats({1}, {0.f}).on_device());
  auto host = HostTensor::DeviceView(ElementType::kFloat32, {1}, &fake, 4, -1, nullptr, "query");
  EXPECT_EQ(host.status().code(), StatusCode::kInvalidArgument);
  auto size = HostTensor::DeviceView(ElementType::kFloat32, {2}, &fake, 4, 0, nullptr, "query");
  EXPECT_THAT(size.status().message(), HasSubstr("query: data has 4 bytes"));
  DevicePlace place;
  EXPECT_FALSE(place.defined());  // answers go to the host unless a CUDA region is named
}

}  // namespace cuda_shm_registry_test
}  // namespace mha::serve
