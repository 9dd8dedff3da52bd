#include "server/frontends/shm/shm_fault_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>

namespace mha::serve {
namespace {

struct Slot {
  std::atomic<bool> used{false};
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> faulted{false};
};

Slot g_slots[ShmFaultGuard::kSlots];
uintptr_t g_page_mask = ~uintptr_t{4095};
struct sigaction g_previous;  // the handler before ours, for addresses that are not ours
std::once_flag g_install_once;
bool g_installed = false;

// The slot whose range holds `address`, or -1. Async-signal-safe (atomics only).
int SlotOf(uintptr_t address) {
  for (int i = 0; i < ShmFaultGuard::kSlots; ++i) {
    const uintptr_t begin = g_slots[i].begin.load(std::memory_order_acquire);
    const uintptr_t end = g_slots[i].end.load(std::memory_order_acquire);
    if (begin != 0 && address >= begin && address < end) return i;
  }
  return -1;
}

void PassOn(int sig, siginfo_t* info, void* context) {
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_IGN && g_previous.sa_handler != SIG_DFL &&
      g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(sig);
    return;
  }
  // The default action: restore it and raise again (a fault re-faults on return).
  signal(sig, SIG_DFL);
  raise(sig);
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  const int slot = SlotOf(address);
  if (slot >= 0) {
    // mmap is a plain system call on Linux; the page becomes private zeros, the access resumes.
    char* start = static_cast<char*>(info->si_addr) - (address & ~g_page_mask);  // its page
    void* page = mmap(start, ~g_page_mask + 1, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (page != MAP_FAILED) {
      g_slots[slot].faulted.store(true, std::memory_order_release);
      return;
    }
  }
  PassOn(sig, info, context);
}

void Install() {
  const long page = sysconf(_SC_PAGESIZE);
  if (page > 0) g_page_mask = ~(static_cast<uintptr_t>(page) - 1);
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_sigaction = &OnSigbus;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  g_installed = sigaction(SIGBUS, &action, &g_previous) == 0;
}

}  // namespace

StatusOr<int> ShmFaultGuard::Watch(const void* begin, size_t length) {
  std::call_once(g_install_once, Install);
  if (!g_installed) return Internal("cannot install the SIGBUS handler for shared memory");
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (!g_slots[i].used.compare_exchange_strong(expected, true)) continue;
    const auto b = reinterpret_cast<uintptr_t>(begin);
    g_slots[i].faulted.store(false);
    g_slots[i].end.store(b + length, std::memory_order_release);
    g_slots[i].begin.store(b, std::memory_order_release);
    return i;
  }
  return ResourceExhausted("shared memory: " + std::to_string(kSlots) +
                           " regions are registered already (unregister one first)");
}

void ShmFaultGuard::Unwatch(int slot) {
  if (slot < 0 || slot >= kSlots) return;
  g_slots[slot].begin.store(0, std::memory_order_release);
  g_slots[slot].end.store(0, std::memory_order_release);
  g_slots[slot].used.store(false);
}

bool ShmFaultGuard::Faulted(int slot) {
  return slot >= 0 && slot < kSlots && g_slots[slot].faulted.load(std::memory_order_acquire);
}

int ShmFaultGuard::Watched() {
  int n = 0;
  for (const Slot& s : g_slots) n += s.used.load() ? 1 : 0;
  return n;
}

}  // namespace mha::serve
