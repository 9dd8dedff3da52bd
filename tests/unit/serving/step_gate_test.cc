// StepGate (server/serving/sessions/step_gate.h): a step starts when it is first in the line of
// every session it names; lines are bounded; leaving starts the next turns in arrival order; a
// closed session's waiting turns are dropped (with the index of its line) and the turns behind
// them move up; a started turn is never dropped.
#include "server/serving/sessions/step_gate.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mha::serve {
namespace step_gate_test {

class StepGateTest : public ::testing::Test {
 protected:
  // A turn over `lines`, recording its start and refusal in `log` under `name`.
  StepTurnPtr Turn(const std::string& name, std::vector<StepLine*> lines) {
    auto turn = std::make_shared<StepTurn>();
    turn->lines = std::move(lines);
    turn->start = [this, name](CallerThread&) { log_.push_back("start " + name); };
    turn->refuse = [this, name](size_t line, Status why) {
      log_.push_back("refuse " + name + " line " + std::to_string(line) + ": " + why.message());
    };
    return turn;
  }
  // Enters `turn`; starts it when it may start now (as a store does after unlocking).
  Status Enter(const StepTurnPtr& turn) {
    bool now = false;
    Status s = gate_.EnterLocked(turn, {"session 'a'", "session 'b'"}, &now);
    if (s.ok() && now) StepGate::Start({turn});
    return s;
  }

  StepGate gate_{2};
  StepLine a_, b_;
  std::vector<std::string> log_;
};

TEST_F(StepGateTest, OneSessionsStepsRunOneAtATimeInArrivalOrderWithinTheBound) {
  auto t1 = Turn("1", {&a_}), t2 = Turn("2", {&a_}), t3 = Turn("3", {&a_});
  ASSERT_TRUE(Enter(t1).ok());
  ASSERT_TRUE(Enter(t2).ok());
  ASSERT_TRUE(Enter(t3).ok());
  EXPECT_EQ(log_, std::vector<std::string>{"start 1"});
  EXPECT_TRUE(a_.held());
  const Status over = Enter(Turn("4", {&a_}));
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(over.message(),
            "session 'a' has 2 steps waiting behind the one in flight (at most 2, "
            "--max-pending-steps); send the next after an answer");
  StepGate::Start(gate_.LeaveLocked(t1));
  StepGate::Start(gate_.LeaveLocked(t2));
  EXPECT_TRUE(gate_.LeaveLocked(t3).empty());
  EXPECT_EQ(log_, (std::vector<std::string>{"start 1", "start 2", "start 3"}));
  EXPECT_FALSE(a_.held());
}

TEST_F(StepGateTest, AMessageOverSeveralSessionsWaitsForEachAndKeepsArrivalOrderInEach) {
  auto first_a = Turn("a1", {&a_});
  auto both = Turn("ab", {&a_, &b_});
  auto later_b = Turn("b1", {&b_});
  ASSERT_TRUE(Enter(first_a).ok());
  ASSERT_TRUE(Enter(both).ok());
  ASSERT_TRUE(Enter(later_b).ok());  // b is free, but `both` came first
  EXPECT_EQ(log_, std::vector<std::string>{"start a1"});
  StepGate::Start(gate_.LeaveLocked(first_a));
  EXPECT_EQ(log_, (std::vector<std::string>{"start a1", "start ab"}));
  StepGate::Start(gate_.LeaveLocked(both));
  EXPECT_EQ(log_.back(), "start b1");
  EXPECT_TRUE(gate_.LeaveLocked(later_b).empty());
  EXPECT_FALSE(a_.held() || b_.held());
}

TEST_F(StepGateTest, ClosingASessionDropsItsWaitingTurnsAndTheTurnsBehindThemMoveUp) {
  auto running = Turn("run", {&a_});
  auto waiting = Turn("ab", {&b_, &a_});
  auto behind = Turn("b", {&b_});
  ASSERT_TRUE(Enter(running).ok());
  ASSERT_TRUE(Enter(waiting).ok());
  ASSERT_TRUE(Enter(behind).ok());
  std::vector<StepGate::Dropped> dropped;
  std::vector<StepTurnPtr> ready;
  gate_.DropWaitingLocked(&a_, &dropped, &ready);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].turn, waiting);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0], behind);
  StepGate::Refuse(dropped, NotFound("closed"));
  StepGate::Start(ready);
  EXPECT_EQ(log_, (std::vector<std::string>{"start run", "refuse ab line 1: closed", "start b"}));
  EXPECT_EQ(a_.size(), 1u) << "the running turn stays until it leaves";
  EXPECT_TRUE(gate_.LeaveLocked(running).empty());
  EXPECT_TRUE(gate_.LeaveLocked(behind).empty());
  EXPECT_FALSE(a_.held() || b_.held());
}

}  // namespace step_gate_test
}  // namespace mha::serve
