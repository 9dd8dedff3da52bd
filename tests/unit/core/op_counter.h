// The ATen ops this thread dispatches while an OpCounter lives (LibTorch's RecordFunction), and
// of them those that do work: on a GPU each is a kernel launch or a copy, which a pass pays in
// host time whatever the size of its tensors. Views and metadata ops are not counted as work, and
// work counts only the ops our code dispatches itself (depth 0): what a composite op such as
// scaled_dot_product_attention runs inside is LibTorch's choice per shape and device (on CUDA
// its backend selection and the mask's alignment padding), and count() still sees all of them.
#pragma once

#include <ATen/record_function.h>

#include <memory>
#include <set>
#include <string>

namespace mha::testing {

class OpCounter {
 public:
  OpCounter()
      : handle_(at::addThreadLocalCallback(
            at::RecordFunctionCallback(&OpCounter::Enter, &OpCounter::Leave)
                .scopes({at::RecordScope::FUNCTION}))) {
    Ops()->clear();
    TopLevel()->clear();
    *Depth() = 0;
  }
  ~OpCounter() { Stop(); }
  OpCounter(const OpCounter&) = delete;
  OpCounter& operator=(const OpCounter&) = delete;

  void Stop() {
    if (handle_ != 0) at::removeCallback(handle_);
    handle_ = 0;
  }
  int count(const std::string& op) const { return static_cast<int>(Ops()->count(op)); }
  int all() const { return static_cast<int>(Ops()->size()); }
  int work() const {
    static const std::set<std::string> kViews = {"aten::view",       "aten::narrow",
                                                 "aten::slice",      "aten::transpose",
                                                 "aten::as_strided", "aten::t",
                                                 "aten::unsqueeze",  "aten::reshape",
                                                 "aten::expand",     "aten::_reshape_alias",
                                                 "aten::select",     "aten::permute",
                                                 "aten::alias",      "aten::detach",
                                                 "aten::empty",      "aten::empty_strided",
                                                 "aten::resize_",    "aten::lift_fresh",
                                                 "aten::to",         "aten::_unsafe_view",
                                                 "aten::split",      "aten::unbind",
                                                 "aten::contiguous", "aten::flatten"};
    int n = 0;
    for (const std::string& op : *TopLevel()) n += kViews.count(op) ? 0 : 1;
    return n;
  }

 private:
  static std::multiset<std::string>* Ops() {
    thread_local std::multiset<std::string> ops;
    return &ops;
  }
  static std::multiset<std::string>* TopLevel() {
    thread_local std::multiset<std::string> ops;
    return &ops;
  }
  static int* Depth() {
    thread_local int depth = 0;
    return &depth;
  }
  static std::unique_ptr<at::ObserverContext> Enter(const at::RecordFunction& fn) {
    Ops()->insert(fn.name());
    if ((*Depth())++ == 0) TopLevel()->insert(fn.name());
    return nullptr;
  }
  static void Leave(const at::RecordFunction&, at::ObserverContext*) { --*Depth(); }

  at::CallbackHandle handle_;
};

}  // namespace mha::testing
