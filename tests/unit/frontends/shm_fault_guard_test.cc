// ShmFaultGuard (server/frontends/shm/shm_fault_guard.h): a read or write of a truncated
// shared mapping inside a watched range completes (zeros) and is recorded; outside one, SIGBUS
// keeps its default action.
#include "server/frontends/shm/shm_fault_guard.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>

#include "shm_test_object.h"

namespace mha::serve {
namespace {

using testing::ShmTestObject;

// The server's own mapping of a client's object (the registry maps it so).
char* MapShared(const ShmTestObject& object) {
  const int fd = shm_open(object.key().c_str(), O_RDWR, 0);
  void* p = mmap(nullptr, object.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

TEST(ShmFaultGuard, AFaultInAWatchedRangeReadsZerosAndIsRecorded) {
  ShmTestObject object(2 * 4096);
  ASSERT_TRUE(object.ok());
  char* mapped = MapShared(object);
  ASSERT_NE(mapped, nullptr);
  mapped[4096 + 1] = 9;
  auto slot = ShmFaultGuard::Watch(mapped, object.size());
  ASSERT_TRUE(slot.ok()) << slot.status().message();
  EXPECT_FALSE(ShmFaultGuard::Faulted(*slot));
  EXPECT_EQ(mapped[1], 0);  // a page inside the object: no fault
  EXPECT_FALSE(ShmFaultGuard::Faulted(*slot));
  ASSERT_TRUE(object.Truncate(4096));
  volatile char* past = mapped + 4096 + 1;
  EXPECT_EQ(*past, 0);  // SIGBUS caught: a zero page now, not the 9 that was there
  EXPECT_TRUE(ShmFaultGuard::Faulted(*slot));
  ShmFaultGuard::Unwatch(*slot);
  munmap(mapped, object.size());
}

TEST(ShmFaultGuard, SlotsAreFreedAndReused) {
  ShmTestObject object(4096);
  ASSERT_TRUE(object.ok());
  const int before = ShmFaultGuard::Watched();
  auto a = ShmFaultGuard::Watch(object.data(), 4096);
  auto b = ShmFaultGuard::Watch(object.data(), 4096);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(ShmFaultGuard::Watched(), before + 2);
  ShmFaultGuard::Unwatch(*a);
  ShmFaultGuard::Unwatch(*b);
  EXPECT_EQ(ShmFaultGuard::Watched(), before);
  EXPECT_FALSE(ShmFaultGuard::Faulted(-1));
}

TEST(ShmFaultGuardDeathTest, AFaultOutsideEveryRangeKeepsTheDefaultAction) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ShmTestObject object(2 * 4096);
  ASSERT_TRUE(object.ok());
  ShmTestObject other(4096);
  auto slot = ShmFaultGuard::Watch(other.data(), 4096);  // the handler is installed
  ASSERT_TRUE(slot.ok());
  EXPECT_EXIT(
      {
        char* mapped = MapShared(object);
        object.Truncate(4096);
        volatile char* past = mapped + 4096;
        *past = 1;
      },
#if defined(__SANITIZE_ADDRESS__)
      // The handler before ours is AddressSanitizer's: it reports the bus error and exits 1.
      ::testing::ExitedWithCode(1), "AddressSanitizer.*BUS");
#else
      ::testing::KilledBySignal(SIGBUS), "");
#endif
  ShmFaultGuard::Unwatch(*slot);
}

}  // namespace
}  // namespace mha::serve
