#include "server/serving/sessions/step_gate.h"

#include <algorithm>

namespace mha::serve {

bool StepGate::FirstEverywhere(const StepTurn& turn) {
  for (const StepLine* line : turn.lines) {
    if (line->turns_.empty() || line->turns_.front().get() != &turn) return false;
  }
  return true;
}

Status StepGate::EnterLocked(const StepTurnPtr& turn, const std::vector<std::string>& labels,
                             bool* now) const {
  for (size_t i = 0; i < turn->lines.size(); ++i) {
    const size_t waiting = turn->lines[i]->size() > 0 ? turn->lines[i]->size() - 1 : 0;
    if (turn->lines[i]->held() && waiting >= max_waiting_) {
      const std::string& label = i < labels.size() ? labels[i] : labels.back();
      return ResourceExhausted(label + " has " + std::to_string(waiting) +
                               " steps waiting behind the one in flight (at most " +
                               std::to_string(max_waiting_) +
                               ", --max-pending-steps); send the next after an answer");
    }
  }
  for (StepLine* line : turn->lines) line->turns_.push_back(turn);
  *now = FirstEverywhere(*turn);
  turn->started = *now;
  return Status::Ok();
}

void StepGate::RemoveLocked(const StepTurnPtr& turn, std::vector<StepTurnPtr>* ready) {
  for (StepLine* line : turn->lines) {
    auto& turns = line->turns_;
    turns.erase(std::remove(turns.begin(), turns.end(), turn), turns.end());
  }
  for (StepLine* line : turn->lines) {
    if (line->turns_.empty()) continue;
    const StepTurnPtr& next = line->turns_.front();
    if (!next->started && FirstEverywhere(*next)) {
      next->started = true;
      ready->push_back(next);
    }
  }
}

std::vector<StepTurnPtr> StepGate::LeaveLocked(const StepTurnPtr& turn) const {
  std::vector<StepTurnPtr> ready;
  RemoveLocked(turn, &ready);
  return ready;
}

void StepGate::DropWaitingLocked(StepLine* line, std::vector<Dropped>* dropped,
                                 std::vector<StepTurnPtr>* ready) const {
  std::vector<StepTurnPtr> waiting;
  for (const StepTurnPtr& turn : line->turns_) {
    if (!turn->started) waiting.push_back(turn);
  }
  for (const StepTurnPtr& turn : waiting) {
    const auto at = std::find(turn->lines.begin(), turn->lines.end(), line);
    dropped->push_back({turn, static_cast<size_t>(at - turn->lines.begin())});
    RemoveLocked(turn, ready);
  }
  // A turn dropped here may have been made ready by an earlier removal in this loop.
  ready->erase(std::remove_if(ready->begin(), ready->end(),
                              [&](const StepTurnPtr& t) {
                                return std::find(waiting.begin(), waiting.end(), t) !=
                                       waiting.end();
                              }),
               ready->end());
}

void StepGate::Start(const std::vector<StepTurnPtr>& turns, CallerThread& caller) {
  for (const StepTurnPtr& turn : turns) {
    auto start = std::move(turn->start);
    turn->start = nullptr;
    turn->refuse = nullptr;
    if (start) start(caller);
  }
}

void StepGate::Refuse(const std::vector<Dropped>& dropped, const Status& why) {
  for (const Dropped& d : dropped) {
    auto refuse = std::move(d.turn->refuse);
    d.turn->refuse = nullptr;
    d.turn->start = nullptr;
    if (refuse) refuse(d.line, why);
  }
}

}  // namespace mha::serve
