#include "server/serving/sessions/session_directory.h"

#include <cctype>
#include <cstdio>
#include <random>

#include "mha/text.h"

namespace mha::serve {

Status SessionDirectory::Add(const std::string& id, SessionLocation where) {
  std::lock_guard<std::mutex> lock(mu_);
  if (open_.count(id) > 0) {
    return AlreadyExists("session_id: '" + Abbreviate(id) +
                         "' is open on this server already (close it, or choose another id)");
  }
  ended_.erase(id);  // its place in ended_order_ goes when it ages out
  restorable_.erase(id);
  open_[id] = std::move(where);
  return Status::Ok();
}

void SessionDirectory::End(const std::string& id, const std::string& why, bool restorable) {
  std::lock_guard<std::mutex> lock(mu_);
  if (open_.erase(id) == 0) return;
  ended_[id] = why;
  restorable_[id] = restorable;
  ended_order_.push_back(id);
  while (ended_order_.size() > kMaxTombstones) {
    ended_.erase(ended_order_.front());
    restorable_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

bool SessionDirectory::Restorable(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (open_.count(id) > 0) return false;
  auto it = restorable_.find(id);
  return it == restorable_.end() || it->second;
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

Status CheckSessionId(const std::string& id, const char* field) {
  if (id.empty()) return InvalidArgument(std::string(field) + ": required");
  if (id.size() > kMaxSessionIdLength) {
    return InvalidArgument(std::string(field) + ": " + std::to_string(id.size()) +
                           " characters, a session id is at most " +
                           std::to_string(kMaxSessionIdLength));
  }
  for (size_t i = 0; i < id.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(id[i]);
    if (!std::isalnum(c) && c != '.' && c != '_' && c != ':' && c != '-') {
      char code[8];
      std::snprintf(code, sizeof(code), "0x%02x", c);
      return InvalidArgument(std::string(field) + ": character " + std::to_string(i) + " is " +
                             code + "; a session id is made of [A-Za-z0-9._:-]");
    }
  }
  return Status::Ok();
}

std::string NewSessionId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof(buf), "s-%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

}  // namespace mha::serve
