// StepGate: the one way a step holds its sessions, for every model kind (Triton's sequence batcher
// keeps one request of a sequence in flight in the same way). Each session has a StepLine: the
// steps that name it, in arrival order. A step (one session's step, or a layer-step message over
// several sessions) starts when it is first in the line of every session it names, and holds them
// until it leaves, answered or refused; so each session's steps apply one at a time in arrival
// order, whatever stream they came on, and a message over several sessions never deadlocks (every
// line orders the same steps the same way: by arrival).
//
// A held session (a non-empty line) is never evicted or expired (SessionTable). Closing one drops
// the steps waiting in its line (DropWaitingLocked: the caller answers them NOT_FOUND); the step
// that started keeps its session's cache until it leaves.
//
// The gate has no lock of its own: every *Locked call runs under the owning store's lock, and a
// turn's callbacks run after the caller lets go of it (Start, Refuse). A turn's callbacks run at
// most once and are dropped when they have run, so a turn owns nothing once it started: a line
// holds its turns, a turn only points at its lines (no ownership cycle between sessions and the
// steps that wait for them).
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mha/status.h"
#include "server/serving/caller_thread.h"

namespace mha::serve {

struct StepTurn;
using StepTurnPtr = std::shared_ptr<StepTurn>;

// One session's steps, oldest first: the first is running (or queued in a scheduler) once it
// started; the others wait behind it.
class StepLine {
 public:
  bool held() const { return !turns_.empty(); }
  size_t size() const { return turns_.size(); }

 private:
  friend class StepGate;
  std::deque<StepTurnPtr> turns_;
};

// A step that holds the sessions of `lines` (distinct) from EnterLocked until LeaveLocked.
struct StepTurn {
  std::vector<StepLine*> lines;
  // Its turn came: submit it (runs outside the lock, once), on `caller`: the submitting thread when
  // it starts at once, else the thread whose step let it start (a worker: CallerThread::Worker()).
  std::function<void(CallerThread& caller)> start;
  // The session of lines[i] ended while this waited: refuse(i, why) (outside the lock, once).
  std::function<void(size_t, Status)> refuse;
  bool started = false;  // guarded by the store's lock
};

class StepGate {
 public:
  // A line holds the step that started and at most `max_waiting` behind it
  // (--max-pending-steps).
  explicit StepGate(size_t max_waiting) : max_waiting_(max_waiting) {}

  // Queues `turn` at the end of each of its lines, all or none: RESOURCE_EXHAUSTED naming
  // labels[i] ("session 'x'") when line i already holds max_waiting steps behind its first. On OK,
  // `*now` says whether it is first everywhere: the caller then calls Start({turn}) after
  // unlocking.
  Status EnterLocked(const StepTurnPtr& turn, const std::vector<std::string>& labels,
                     bool* now) const;
  // `turn` (started) is done: it leaves its lines; returns the turns that may start now.
  std::vector<StepTurnPtr> LeaveLocked(const StepTurnPtr& turn) const;
  // A turn a closed session's line dropped: `line` is the index of that line in turn->lines.
  struct Dropped {
    StepTurnPtr turn;
    size_t line = 0;
  };
  // The session of `line` ended: the turns waiting in it (not started) leave every line and go to
  // `dropped`; the turns their leaving lets start go to `ready`.
  void DropWaitingLocked(StepLine* line, std::vector<Dropped>* dropped,
                         std::vector<StepTurnPtr>* ready) const;

  // Outside the lock: starts each turn on `caller` / refuses each dropped turn with `why`.
  static void Start(const std::vector<StepTurnPtr>& turns, CallerThread& caller);
  static void Start(const std::vector<StepTurnPtr>& turns) {
    CallerThread worker;
    Start(turns, worker);
  }
  static void Refuse(const std::vector<Dropped>& dropped, const Status& why);

 private:
  // Removes `turn` from its lines; adds the turns now first everywhere to `ready` (marked
  // started).
  static void RemoveLocked(const StepTurnPtr& turn, std::vector<StepTurnPtr>* ready);
  static bool FirstEverywhere(const StepTurn& turn);

  const size_t max_waiting_;
};

}  // namespace mha::serve
