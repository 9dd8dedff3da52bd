// The core's facades (engine.cc, llama_engine.cc): run `fn` (which may throw while it wraps or
// copies tensors) under InferenceMode and turn LibTorch's errors into INTERNAL "<what> failed:
// ...", as MhaModel does for its passes.
#pragma once

#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <exception>
#include <string>

#include "mha/status.h"

namespace mha {

template <typename Fn>
Status Guarded(const char* what, Fn&& fn) {
  try {
    c10::InferenceMode guard;
    return fn();
  } catch (const c10::Error& e) {
    return Internal(std::string(what) + " failed: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Internal(std::string(what) + " failed: " + e.what());
  }
}

}  // namespace mha
