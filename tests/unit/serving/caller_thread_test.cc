// CallerThread (server/serving/caller_thread.h): BeforeBlocking runs the caller's hook once, a
// caller without a hook (a worker) runs nothing, and may_run_pass says what the front end said.
#include "server/serving/caller_thread.h"

#include <gtest/gtest.h>

namespace mha::serve {
namespace caller_thread_test {

void Count(void* arg) { ++*static_cast<int*>(arg); }

TEST(CallerThreadTest, BeforeBlockingRunsTheHookOnce) {
  int runs = 0;
  CallerThread caller(true, &Count, &runs);
  EXPECT_TRUE(caller.may_run_pass());
  caller.BeforeBlocking();
  EXPECT_EQ(runs, 1);
  caller.BeforeBlocking();  // handed on already: not again
  EXPECT_EQ(runs, 1);
}

TEST(CallerThreadTest, AWorkerHasNoHookAndRunsNoPassOfACallers) {
  CallerThread worker = CallerThread::Worker();
  EXPECT_FALSE(worker.may_run_pass());
  worker.BeforeBlocking();  // nothing to run
  int runs = 0;
  CallerThread other(false, &Count, &runs);
  EXPECT_FALSE(other.may_run_pass());
  other.BeforeBlocking();
  EXPECT_EQ(runs, 1);
}

}  // namespace caller_thread_test
}  // namespace mha::serve
