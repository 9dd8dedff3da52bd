// ReleaseListener: a replica's end of the handover channel. A thread subscribed to
// "<prefix>release:<owner>" (RedisLeases::Channel) on a connection of its own; each message names
// a session another replica needs, and `on_request` runs with it on this thread (it writes the
// session's unwritten blocks and releases its lease). When the connection breaks (Redis
// restarted), it connects and subscribes again, a connect timeout apart, until Stop.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "mha/status.h"
#include "server/serving/sessions/redis/redis_client.h"

namespace mha::serve {

class ReleaseListener {
 public:
  using OnRequest = std::function<void(const std::string& session)>;
  // Starts the thread. `on_status` (may be null) hears each change between subscribed (OK) and
  // not (the reason), for the log and /metrics.
  ReleaseListener(std::shared_ptr<RedisClient> client, std::string channel, OnRequest on_request,
                  std::function<void(const Status&)> on_status = nullptr);
  ~ReleaseListener() { Stop(); }
  ReleaseListener(const ReleaseListener&) = delete;
  ReleaseListener& operator=(const ReleaseListener&) = delete;

  // Ends the subscription and joins the thread (a request being handled finishes first).
  void Stop();
  // Blocks until subscribed (or `timeout`): whether it is.
  bool WaitSubscribed(std::chrono::milliseconds timeout);

 private:
  void Run();
  // One connection's life: subscribe, then handle messages until it breaks or Stop.
  Status Listen();
  void SetSubscribed(bool on, const Status& why);

  const std::shared_ptr<RedisClient> client_;
  const std::string channel_;
  const OnRequest on_request_;
  const std::function<void(const Status&)> on_status_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                      // guarded by mu_
  bool subscribed_ = false;                // guarded by mu_
  RedisConnection* connection_ = nullptr;  // guarded by mu_: the one Listen reads
  std::thread thread_;
};

}  // namespace mha::serve
