// CallerThread (server/serving/scheduling/caller_thread.h): BeforeBlocking runs the hook this
// thread installed, once per scope; a thread without one (or after its scope) runs nothing; a
// nested scope restores the outer one.
#include "server/serving/scheduling/caller_thread.h"

#include <gtest/gtest.h>

#include <thread>

namespace mha::serve {
namespace {

void Count(void* arg) { ++*static_cast<int*>(arg); }

TEST(CallerThreadTest, BeforeBlockingRunsThisThreadsHookOncePerScope) {
  int runs = 0;
  {
    const CallerThread::Scope scope(&Count, &runs);
    std::thread([] { CallerThread::BeforeBlocking(); }).join();  // another thread: not its hook
    EXPECT_EQ(runs, 0);
    CallerThread::BeforeBlocking();
    CallerThread::BeforeBlocking();  // handed on already: not again
    EXPECT_EQ(runs, 1);
  }
  CallerThread::BeforeBlocking();  // the scope ended: nothing installed
  EXPECT_EQ(runs, 1);
}

TEST(CallerThreadTest, ANestedScopeRestoresTheOuterHook) {
  int outer = 0, inner = 0;
  const CallerThread::Scope outer_scope(&Count, &outer);
  {
    const CallerThread::Scope inner_scope(&Count, &inner);
    CallerThread::BeforeBlocking();
  }
  CallerThread::BeforeBlocking();
  EXPECT_EQ(inner, 1);
  EXPECT_EQ(outer, 1);
}

}  // namespace
}  // namespace mha::serve
