// SharedMemoryRegistry (server/frontends/shm/shared_memory_registry.h) on real POSIX
// shared-memory objects: registration and its refusals, slices, the budget, unregistering while
// a request holds a region, and a client truncating its object.
#include "server/frontends/shm/shared_memory_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>

#include "server/frontends/shm/shm_fault_guard.h"
#include "shm_test_object.h"

namespace mha::serve {
namespace shared_memory_registry_test {

using ::testing::HasSubstr;
using testing::ShmTestObject;

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

ShmRegistryOptions On(int64_t max_bytes = int64_t{1} << 30) { return {true, max_bytes}; }

TEST(SharedMemoryRegistry, RegistrationIsOffUnlessAllowed) {
  ShmTestObject object(4096);
  ASSERT_TRUE(object.ok());
  SharedMemoryRegistry registry(ShmRegistryOptions{});
  const Status s = registry.Register({"r", object.key(), 0, 64});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("--allow-client-shm=true"));
  auto slice = registry.Acquire("query", "r", 0, 64);
  EXPECT_EQ(slice.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(slice.status().message(), HasSubstr("registration is off"));
}

TEST(SharedMemoryRegistry, SliceReadsAndWritesTheClientsBytes) {
  ShmTestObject object(8192);
  ASSERT_TRUE(object.ok());
  SharedMemoryRegistry registry(On());
  ASSERT_TRUE(registry.Register({"r", object.key(), 100, 5000}).ok());  // offset not page-aligned
  std::memcpy(object.data() + 100 + 16, "hello", 5);
  auto slice = registry.Acquire("query", "r", 16, 5);
  ASSERT_TRUE(slice.ok()) << slice.status().message();
  EXPECT_EQ(std::string(slice->data, slice->bytes), "hello");
  EXPECT_EQ(slice->offset, 16u);
  std::memcpy(slice->data, "HELLO", 5);  // the server writes an output
  EXPECT_EQ(std::string(object.data() + 116, 5), "HELLO");
  EXPECT_TRUE(slice->Check().ok());
  auto regions = registry.Regions("");
  ASSERT_TRUE(regions.ok());
  ASSERT_EQ(regions->size(), 1u);
  EXPECT_EQ((*regions)[0].key, object.key());
  EXPECT_EQ((*regions)[0].offset, 100u);
  EXPECT_EQ((*regions)[0].byte_size, 5000u);
  EXPECT_EQ(registry.mapped_bytes(), 5000);
}

TEST(SharedMemoryRegistry, RefusesBadRegistrations) {
  ShmTestObject object(4096);
  ASSERT_TRUE(object.ok());
  SharedMemoryRegistry registry(On(/*max_bytes=*/6000));
  const auto code = [&](const ShmRegionSpec& spec) { return registry.Register(spec).code(); };
  EXPECT_EQ(code({"", object.key(), 0, 8}), StatusCode::kInvalidArgument);
  for (const char* key : {"", "/", "name", "/a/b", "//x", "/..", "/."}) {
    const Status s = registry.Register({"r", key, 0, 8});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(s.message(), HasSubstr("is not a plain shared-memory name")) << key;
  }
  EXPECT_EQ(code({"r", object.key(), 0, 0}), StatusCode::kInvalidArgument);
  Status past = registry.Register({"r", object.key(), 4000, 97});
  EXPECT_EQ(past.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(past.message(), HasSubstr("offset 4000 + 97 = 4097 is past the end of"));
  EXPECT_THAT(past.message(), HasSubstr("(4096 bytes)"));
  past = registry.Register({"r", object.key(), kMax, 2});
  EXPECT_THAT(past.message(), HasSubstr("(overflows)"));
  Status missing = registry.Register({"r", "/mha_unit_no_such_object", 0, 8});
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("shm_open"));
  ASSERT_TRUE(registry.Register({"r", object.key(), 0, 4096}).ok());
  Status twice = registry.Register({"r", object.key(), 0, 8});
  EXPECT_EQ(twice.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(twice.message(), HasSubstr("region 'r' is registered already"));
  Status budget = registry.Register({"s", object.key(), 0, 4096});
  EXPECT_EQ(budget.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(budget.message(), HasSubstr("4096 + 4096 = 8192 bytes, over --max-shm-bytes 6000"));
  EXPECT_EQ(registry.mapped_bytes(), 4096);
}

TEST(SharedMemoryRegistry, AcquireChecksTheRegionsBounds) {
  ShmTestObject object(4096);
  ASSERT_TRUE(object.ok());
  SharedMemoryRegistry registry(On());
  ASSERT_TRUE(registry.Register({"r", object.key(), 0, 1000}).ok());
  auto unknown = registry.Acquire("key", "nope", 0, 4);
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("key: shared memory region 'nope' is not registered (registered: 'r')"));
  auto past = registry.Acquire("query", "r", 900, 101);
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(past.status().message(), HasSubstr("900 + 101 = 1001 is past the end of region 'r' "
                                                 "(1000 bytes)"));
  EXPECT_THAT(registry.Acquire("query", "r", kMax, 2).status().message(), HasSubstr("(overflows)"));
  EXPECT_TRUE(registry.Acquire("query", "r", 900, 100).ok());
  EXPECT_EQ(registry.Regions("nope").status().code(), StatusCode::kNotFound);
}

TEST(SharedMemoryRegistry, UnregisterWaitsForTheRequestsHoldingTheRegion) {
  ShmTestObject object(4096);
  ASSERT_TRUE(object.ok());
  SharedMemoryRegistry registry(On());
  ASSERT_TRUE(registry.Register({"r", object.key(), 0, 4096}).ok());
  const int watched = ShmFaultGuard::Watched();
  auto slice = registry.Acquire("query", "r", 0, 64);
  ASSERT_TRUE(slice.ok());
  bool done = false;
  registry.Unregister("r", [&done] { done = true; });
  EXPECT_FALSE(done);  // a request holds it: still mapped
  EXPECT_EQ(registry.Acquire("query", "r", 0, 64).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(registry.mapped_bytes(), 4096);
  slice->data[0] = 1;                                              // still valid memory
  ASSERT_TRUE(registry.Register({"r", object.key(), 0, 8}).ok());  // the name is free again
  *slice = ShmSlice();                                             // the request is answered
  EXPECT_TRUE(done);
  EXPECT_EQ(registry.mapped_bytes(), 8);
  EXPECT_EQ(ShmFaultGuard::Watched(), watched);  // the old mapping gone, the new one there
}

TEST(SharedMemoryRegistry, UnregisterAllAndUnknownNames) {
  ShmTestObject object(4096);
  ASSERT_TRUE(object.ok());
  SharedMemoryRegistry registry(On());
  int calls = 0;
  registry.Unregister("never", [&calls] { ++calls; });  // nothing to remove: OK at once
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(registry.Register({"a", object.key(), 0, 8}).ok());
  ASSERT_TRUE(registry.Register({"b", object.key(), 8, 8}).ok());
  registry.Unregister("", [&calls] { ++calls; });
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(registry.Regions("")->empty());
  EXPECT_EQ(registry.mapped_bytes(), 0);
}

TEST(SharedMemoryRegistry, DestructionUnmapsEveryRegion) {
  ShmTestObject object(4096);
  ASSERT_TRUE(object.ok());
  const int watched = ShmFaultGuard::Watched();
  {
    SharedMemoryRegistry registry(On());
    ASSERT_TRUE(registry.Register({"a", object.key(), 0, 8}).ok());
    ASSERT_TRUE(registry.Register({"b", object.key(), 0, 8}).ok());
    EXPECT_EQ(ShmFaultGuard::Watched(), watched + 2);
  }
  EXPECT_EQ(ShmFaultGuard::Watched(), watched);
}

TEST(SharedMemoryRegistry, ATruncatedObjectIsAnErrorNotACrash) {
  ShmTestObject object(3 * 4096);
  ASSERT_TRUE(object.ok());
  SharedMemoryRegistry registry(On());
  ASSERT_TRUE(registry.Register({"r", object.key(), 0, 3 * 4096}).ok());
  auto held = registry.Acquire("query", "r", 0, 3 * 4096);
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(object.Truncate(4096));
  // Taken after the truncation: refused before anything is touched.
  auto later = registry.Acquire("query", "r", 0, 8);
  EXPECT_EQ(later.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(later.status().message(),
              HasSubstr("its object '" + object.key() + "' is now 4096 bytes"));
  // Held across the truncation (a request in the core): the read past the end faults, the
  // guard maps zeros there, and the request's check fails.
  volatile char* past = held->data + 2 * 4096 + 5;
  EXPECT_EQ(*past, 0);
  *past = 7;  // a write lands in memory nobody reads
  const Status check = held->Check();
  EXPECT_EQ(check.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(check.message(), HasSubstr("was truncated while registered (a page faulted)"));
  ASSERT_TRUE(object.Truncate(3 * 4096));  // even grown back, the region stays poisoned
  EXPECT_THAT(registry.Acquire("query", "r", 0, 8).status().message(), HasSubstr("page faulted"));
}

}  // namespace shared_memory_registry_test
}  // namespace mha::serve
