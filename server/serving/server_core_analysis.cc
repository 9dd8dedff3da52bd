// ServerCore::Analyze: the head analysis of a served version (docs/heads.md), computed once per
// loaded version on the first AnalyzeModel call and kept with the version's handle (dropped with
// it).
#include <spdlog/spdlog.h>

#include <chrono>

#include "server/serving/server_core.h"
#include "server/serving/server_core_internal.h"

namespace mha::serve {

StatusOr<ModelAnalysisResult> ServerCore::Analyze(const std::string& name,
                                                  const std::string& version) {
  if (stopping_) return Unavailable("server is shutting down");
  auto state = Current();  // holds the handle while it is analysed
  auto entry = state->repository->Resolve(name, version);
  if (!entry.ok()) return entry.status();
  auto it = state->handles.find({(*entry)->name, (*entry)->version});
  if (it == state->handles.end()) {
    return Unavailable("model '" + (*entry)->name + "' version " + (*entry)->version +
                       " is not being served");
  }
  ModelHandle& handle = *it->second;
  std::call_once(handle.analysis_once, [this, &handle] {
    ++analyses_computed_;
    const auto start = std::chrono::steady_clock::now();
    const HeadAnalyzer* analyzer = handle.served->head_analysis();
    if (analyzer == nullptr) {
      handle.analysis_status = internal::NotOffered(StatusCode::kFailedPrecondition, "", handle,
                                                    "head analysis (AnalyzeModel analyses one "
                                                    "attention layer's heads)");
      return;
    }
    auto analysis = analyzer->AnalyzeHeads();
    if (!analysis.ok()) {
      handle.analysis_status = analysis.status();
      return;
    }
    handle.analysis = std::make_shared<const HeadAnalysis>(std::move(analysis.value()));
    spdlog::info("model {} v{}: head analysis computed in {} ms", handle.entry->name,
                 handle.entry->version,
                 std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count());
  });
  if (!handle.analysis) return handle.analysis_status;
  return ModelAnalysisResult{handle.entry->name, handle.entry->version, handle.analysis};
}

}  // namespace mha::serve
