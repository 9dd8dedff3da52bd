// One pass of a scheduler (DynamicBatcher, LayerStepScheduler) run so that an exception escaping
// it (a fake's, say) becomes INTERNAL "<what> failed: ..." instead of ending the worker thread.
#pragma once

#include <exception>
#include <string>

#include "mha/status.h"

namespace mha::serve {

template <typename Fn>
Status Safely(const char* what, Fn&& pass) {
  try {
    return pass();
  } catch (const std::exception& e) {
    return Internal(std::string(what) + " failed: " + e.what());
  } catch (...) {
    return Internal(std::string(what) + " failed with a non-std exception");
  }
}

}  // namespace mha::serve
