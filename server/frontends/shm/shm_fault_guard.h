// Keeps a client's shared-memory object from crashing the server when the client truncates it
// while it is registered. Touching a mapped page past the object's new end raises SIGBUS; the
// guard's handler, for an address inside a watched range, maps an anonymous zero page over the
// faulting page (MAP_FIXED) and records the fault, so the read or write that faulted completes
// (on zeros, or into memory nobody reads) wherever it ran: in the front end's copy, or inside the
// core reading a borrowed input. The request that used the range then checks Faulted() and is
// answered with an error instead of its (meaningless) results; the range stays poisoned until it
// is unwatched (unregistered). A SIGBUS for any other address goes to the previous handler, or
// to the default action (the process ends, as without the guard).
//
// Process-wide, at most kSlots ranges at once; the handler reads the slots lock-free (atomics).
#pragma once

#include <cstddef>

#include "mha/status.h"

namespace mha::serve {

class ShmFaultGuard {
 public:
  static constexpr int kSlots = 1024;

  // Watches [begin, begin + length) (installs the handler on first use). RESOURCE_EXHAUSTED when
  // every slot is taken, INTERNAL when the handler cannot be installed. Returns the slot.
  static StatusOr<int> Watch(const void* begin, size_t length);
  // Stops watching `slot` (before the range is unmapped) and frees it.
  static void Unwatch(int slot);
  // Whether a page of `slot`'s range has faulted since Watch.
  static bool Faulted(int slot);
  // Ranges watched now (tests).
  static int Watched();
};

}  // namespace mha::serve
