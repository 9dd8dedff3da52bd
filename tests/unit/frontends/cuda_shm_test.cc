// CUDA shared memory on a device (built with MHA_WITH_CUDA and MHA_CUDA_SHM; every case skips
// elsewhere, and where no device is seen): a child process allocates device memory, fills it and
// exports a cudaIpcMemHandle_t (a handle opens only in another process than its maker; the cases
// share one child and each registers the handle in a registry of its own), the server side opens
// it through the registry, reads it as a device tensor without a host copy,
// writes an output into it device to device, and closes it when the last holder lets go.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "mha/device_memory.h"
#include "mha/tensor_adapter.h"
#include "mha/v1/attention.pb.h"
#include "server/frontends/shm/shared_memory_registry.h"
#include "server/frontends/shm/shm_tensor.h"

#if defined(MHA_WITH_CUDA) && defined(MHA_CUDA_SHM)
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>
#define MHA_CUDA_SHM_TEST 1
#endif

namespace mha::serve {
namespace cuda_shm_test {

using ::testing::HasSubstr;

constexpr int64_t kFloats = 1024;  // the child's allocation: 4 KiB of float32 i * 0.5
constexpr uint64_t kBytes = kFloats * sizeof(float);

#ifdef MHA_CUDA_SHM_TEST
// The client: a child process that owns the allocation until the test lets it go.
class IpcExporter {
 public:
  IpcExporter() {
    int up[2], down[2];
    if (pipe(up) != 0 || pipe(down) != 0) return;
    pid_ = fork();
    if (pid_ == 0) Child(up[1], down[0]);  // never returns
    close(up[1]);
    close(down[0]);
    release_ = down[1];
    handle_.resize(kCudaIpcHandleBytes);
    ok_ = read(up[0], handle_.data(), handle_.size()) == static_cast<ssize_t>(handle_.size());
    close(up[0]);
  }
  ~IpcExporter() {
    if (release_ >= 0) close(release_);  // the child frees its memory and exits
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  bool ok() const { return ok_; }
  const std::string& handle() const { return handle_; }

 private:
  [[noreturn]] static void Child(int up, int down) {
    void* data = nullptr;
    cudaIpcMemHandle_t handle;
    std::vector<float> values(kFloats);
    for (int64_t i = 0; i < kFloats; ++i) values[i] = static_cast<float>(i) * 0.5f;
    const bool ok =
        cudaSetDevice(0) == cudaSuccess && cudaMalloc(&data, kBytes) == cudaSuccess &&
        cudaMemcpy(data, values.data(), kBytes, cudaMemcpyHostToDevice) == cudaSuccess &&
        cudaIpcGetMemHandle(&handle, data) == cudaSuccess;
    if (ok && write(up, &handle, sizeof(handle)) == static_cast<ssize_t>(sizeof(handle))) {
      char byte;
      while (read(down, &byte, 1) > 0) {
      }
    }
    _exit(0);
  }

  pid_t pid_ = -1;
  int release_ = -1;
  bool ok_ = false;
  std::string handle_;
};

std::vector<float> ReadBack(const void* device_data, size_t floats) {
  std::vector<float> out(floats);
  EXPECT_EQ(cudaMemcpy(out.data(), device_data, floats * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return out;
}
#endif

class CudaShmTest : public ::testing::Test {
 protected:
#ifdef MHA_CUDA_SHM_TEST
  // One exporter for the suite, forked before this process touches CUDA (a child forked after
  // the parent initialized CUDA cannot use it): this binary holds this suite only.
  static void SetUpTestSuite() { exporter_ = new IpcExporter(); }
  static void TearDownTestSuite() {
    delete exporter_;
    exporter_ = nullptr;
  }
#endif

  void SetUp() override {
#ifndef MHA_CUDA_SHM_TEST
    GTEST_SKIP() << "built without CUDA shared memory: " << CudaShmUnavailableReason();
#else
    int count = 0;
    if (!exporter_->ok() || cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      GTEST_SKIP() << "no CUDA device (or the child could not export a handle)";
    }
    ASSERT_TRUE(registry_.RegisterCuda({"dev", exporter_->handle(), 0, kBytes}).ok());
#endif
  }

  SharedMemoryRegistry registry_{ShmRegistryOptions{true, int64_t{1} << 20}};
#ifdef MHA_CUDA_SHM_TEST
  static IpcExporter* exporter_;
#endif
};

#ifdef MHA_CUDA_SHM_TEST
IpcExporter* CudaShmTest::exporter_ = nullptr;
#endif

#ifdef MHA_CUDA_SHM_TEST
TEST_F(CudaShmTest, RegistersListsAndReadsTheClientsDeviceBytes) {
  auto regions = registry_.CudaRegions("");
  ASSERT_TRUE(regions.ok());
  ASSERT_EQ(regions->size(), 1u);
  EXPECT_EQ((*regions)[0].name, "dev");
  EXPECT_EQ((*regions)[0].device_id, 0);
  EXPECT_EQ((*regions)[0].byte_size, kBytes);
  EXPECT_EQ(registry_.mapped_bytes(), static_cast<int64_t>(kBytes));
  auto slice = registry_.Acquire("query", "dev", 16, 64);
  ASSERT_TRUE(slice.ok()) << slice.status().message();
  EXPECT_EQ(slice->device, 0);
  EXPECT_EQ(ReadBack(slice->data, 1)[0], 2.0f);  // float 4 = 4 * 0.5
  EXPECT_EQ(registry_.RegisterCuda({"dev", exporter_->handle(), 0, kBytes}).code(),
            StatusCode::kAlreadyExists);
}

TEST_F(CudaShmTest, AnInputIsADeviceTensorOverTheRegion) {
  ShmPlan plan;
  HostTensor query;
  const ShmRef ref{"dev", 2 * 4 * 8 * sizeof(float), 0};
  ASSERT_TRUE(
      AcquireShmInput("query", ref, v1::FLOAT32, {2, 4, 8}, "FP32", &registry_, &plan, &query)
          .ok());
  ASSERT_TRUE(query.on_device());
  const at::Tensor t = ToTensor(query);
  EXPECT_TRUE(t.is_cuda());
  EXPECT_EQ(t.data_ptr(), static_cast<const void*>(query.data()));  // no copy
  EXPECT_TRUE(at::equal(t.cpu().flatten(), at::arange(64, at::kFloat) * 0.5));
  const ShmRef odd{"dev", 4, 2};
  const Status s =
      AcquireShmInput("query", odd, v1::FLOAT32, {1}, "FP32", &registry_, &plan, &query);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not a multiple of the element size 4"));
}

TEST_F(CudaShmTest, AnOutputIsWrittenDeviceToDevice) {
  auto slot = registry_.Acquire("output", "dev", 512, 256);
  ASSERT_TRUE(slot.ok());
  OutputTypes types;
  PlaceOnDevice(std::optional<ShmSlice>(*slot), &types.output_place);
  ForwardOutputs out;
  out.output = at::full({2, 4, 8}, 7.0, at::TensorOptions().device(at::kCUDA, 0));
  const HostOutputs host = ToHostOutputs(out, types);
  ASSERT_TRUE(host.output.on_device());
  EXPECT_EQ(host.output.data(), slot->data);
  EXPECT_TRUE(WriteShmTensor(host.output, *slot, "output", "FP32").ok());
  EXPECT_EQ(ReadBack(slot->data, 64), std::vector<float>(64, 7.0f));
  // A host answer (an output the core could not place) is copied host to device.
  const HostTensor ones = HostTensor::FromFloats({4}, {1, 1, 1, 1});
  EXPECT_TRUE(WriteShmTensor(ones, *slot, "output", "FP32").ok());
  EXPECT_EQ(ReadBack(slot->data, 4), std::vector<float>(4, 1.0f));
  const HostTensor big = HostTensor::FromFloats({128}, std::vector<float>(128, 0.f));
  EXPECT_THAT(WriteShmTensor(big, *slot, "output", "FP32").message(), HasSubstr("too small"));
}

TEST_F(CudaShmTest, UnregisterClosesWhenTheLastHolderLetsGo) {
  auto slice = registry_.Acquire("query", "dev", 0, 64);
  ASSERT_TRUE(slice.ok());
  bool closed = false;
  registry_.Unregister(
      "dev", [&] { closed = true; }, ShmKind::kCuda);
  EXPECT_FALSE(closed);  // a request holds it
  EXPECT_EQ(registry_.Acquire("query", "dev", 0, 64).status().code(), StatusCode::kNotFound);
  slice = StatusOr<ShmSlice>(Internal("released"));
  EXPECT_TRUE(closed);
  EXPECT_EQ(registry_.mapped_bytes(), 0);
}

TEST_F(CudaShmTest, RefusesABadHandleAndADeviceOutOfRange) {
  const Status bad = registry_.RegisterCuda({"bad", std::string(64, '\x7f'), 0, 64});
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("cudaIpcOpenMemHandle"));
  const Status far = registry_.RegisterCuda({"far", exporter_->handle(), 999, 64});
  EXPECT_EQ(far.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(far.message(), HasSubstr("device_id 999 is not in [0, "));
}
#else
TEST_F(CudaShmTest, SkipsWithoutCuda) {}
#endif

}  // namespace cuda_shm_test
}  // namespace mha::serve
