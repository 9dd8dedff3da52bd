#include "server/serving/sessions/session_directory.h"

#include <cstdio>
#include <random>

#include "mha/text.h"

namespace mha::serve {

void SessionDirectory::Add(const std::string& id, SessionLocation where) {
  std::lock_guard<std::mutex> lock(mu_);
  open_[id] = std::move(where);
}

void SessionDirectory::End(const std::string& id, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (open_.erase(id) == 0) return;
  ended_[id] = why;
  ended_order_.push_back(id);
  while (ended_order_.size() > kMaxTombstones) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

StatusOr<SessionLocation> SessionDirectory::Find(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(id);
  if (it != open_.end()) return it->second;
  return NotFoundLocked(id);
}

Status SessionDirectory::NotFoundFor(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return NotFoundLocked(id);
}

Status SessionDirectory::NotFoundLocked(const std::string& id) const {
  const std::string name = "session '" + Abbreviate(id) + "' ";
  auto it = ended_.find(id);
  if (it != ended_.end()) return NotFound(name + it->second);
  return NotFound(name +
                  "is unknown: never opened on this server, or opened before it restarted "
                  "(sessions live in the server's memory only; open a new one)");
}

int64_t SessionDirectory::open_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(open_.size());
}

std::string NewSessionId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof(buf), "s-%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

}  // namespace mha::serve
