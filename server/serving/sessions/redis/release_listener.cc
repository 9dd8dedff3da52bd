#include "server/serving/sessions/redis/release_listener.h"

#include <utility>

namespace mha::serve {

ReleaseListener::ReleaseListener(std::shared_ptr<RedisClient> client, std::string channel,
                                 OnRequest on_request, std::function<void(const Status&)> on_status)
    : client_(std::move(client)),
      channel_(std::move(channel)),
      on_request_(std::move(on_request)),
      on_status_(std::move(on_status)) {
  thread_ = std::thread([this] { Run(); });
}

void ReleaseListener::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    if (connection_ != nullptr) connection_->Interrupt();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool ReleaseListener::WaitSubscribed(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return subscribed_ || stop_; }) && subscribed_;
}

void ReleaseListener::SetSubscribed(bool on, const Status& why) {
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    changed = subscribed_ != on;
    subscribed_ = on;
  }
  cv_.notify_all();
  if (changed && on_status_) on_status_(why);
}

void ReleaseListener::Run() {
  for (;;) {
    const Status ended = Listen();
    SetSubscribed(false, ended.ok() ? Unavailable("stopped") : ended);
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, client_->options().connect_timeout, [&] { return stop_; })) return;
  }
}

Status ReleaseListener::Listen() {
  auto conn = client_->Dedicated();
  if (!conn.ok()) return conn.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Status::Ok();
    connection_ = conn->get();
  }
  struct Forget {  // connection_ is cleared before the connection goes
    ReleaseListener* self;
    ~Forget() {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->connection_ = nullptr;
    }
  } forget{this};
  MHA_RETURN_IF_ERROR((*conn)->Send({"SUBSCRIBE", channel_}));
  for (;;) {
    auto message = (*conn)->Read(/*unbounded=*/true);
    if (!message.ok()) return message.status();
    const auto& e = message->elements;
    if (message->type != RedisReply::Type::kArray || e.size() != 3) continue;
    if (e[0].str == "subscribe") {
      SetSubscribed(true, Status::Ok());
    } else if (e[0].str == "message") {
      on_request_(e[2].str);
    }
  }
}

}  // namespace mha::serve
