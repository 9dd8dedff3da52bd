// Model kinds: what the serving core knows of a family of models (Triton's backend API, TF
// Serving's SourceAdapter / Loader / Servable). Each kind lives in its own folder under
// server/serving/kinds/ and is registered once, in kinds/registry.cc; the repository scan, the
// lifecycle, the serving core and the front ends call these interfaces and never name a kind.
//
//   ModelKind      how a version folder is recognised, located and loaded (one object per kind)
//   Servable       one loaded version, immutable: warmup, its log line, Serve (kept in ModelEntry)
//   ServedModel    the serving side of one READY version: scheduler, sessions, steps, analysis
//                  (made by Serve for each ModelHandle, destroyed with it)
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "mha/head_analysis.h"
#include "mha/status.h"
#include "server/serving/inference.h"
#include "server/serving/inference_server.h"
#include "server/serving/layer_step.h"
#include "server/serving/repository/serving_config.h"
#include "server/serving/scheduling/batcher_options.h"
#include "server/serving/scheduling/runner.h"

namespace mha::serve {

struct ModelEntry;         // repository/model_repository.h
struct LoadOverrides;      // repository/model_repository.h
struct ServerCoreOptions;  // server_core_options.h
class SessionDirectory;    // sessions/session_directory.h
class StatsAggregator;     // observability/stats_aggregator.h

// What a READY version's serving side is made with.
struct ServeContext {
  const ServerCoreOptions* options = nullptr;   // the server's flags (limits, batcher, sessions)
  StatsAggregator* metrics = nullptr;           // the version's
  std::shared_ptr<SessionDirectory> directory;  // session ids, server-wide
};

// The serving side of one READY version (Triton's Model): its scheduler, its decoding sessions
// and what else its kind runs. Destroyed with the version's handle: its sessions end, then its
// scheduler answers every task it accepted.
class ServedModel {
 public:
  virtual ~ServedModel() = default;

  // What the version's scheduler runs (ModelConfig, REST config, ServerCore::Scheduling).
  virtual SchedulerView scheduling() const = 0;
  // A stateless forward: checked once against the version and the limits (shapes, the pass's
  // working memory and response), then queued; `done` answers it exactly once.
  virtual Status ValidateForward(const InferenceRequest& request) const = 0;
  virtual void Submit(InferenceTask task, DoneCallback done) = 0;

  // Decoding sessions (docs/sessions.md). Ids are checked and unique server-wide by the caller.
  virtual StatusOr<OpenSessionResponse> OpenSession(const OpenSessionRequest& request) = 0;
  virtual StatusOr<CloseSessionResponse> CloseSession(const std::string& session_id) = 0;
  // A fork of one of this version's sessions (its id checked and free server-wide by the caller)
  // and a session's rewind (docs/sessions.md, "Fork, truncate and spill").
  virtual StatusOr<ForkSessionResponse> ForkSession(const ForkSessionRequest& request) = 0;
  virtual StatusOr<TruncateSessionResponse> TruncateSession(const std::string& session_id,
                                                            int64_t tokens) = 0;
  // A Forward call with a session_id on one of this version's sessions: the step's own checks,
  // then queued behind the session's earlier steps.
  virtual Status CheckStep(const InferenceRequest& request) const = 0;
  virtual void Step(const std::string& session_id, InferenceTask task, DoneCallback done) = 0;
  // A LayerSteps message whose sessions are this version's: its checks and the hold on its
  // sessions, then queued. OK: `done` will answer it; else the refusal (`done` is not called).
  virtual Status StepLayer(LayerStepRequest& request, LayerStepDone done) = 0;

  // Seed 001's head analysis (AnalyzeModel; the core computes it once per handle).
  virtual StatusOr<HeadAnalysis> AnalyzeHeads() const = 0;

  // Stops accepting; every task already accepted is answered (the schedulers drain). Idempotent;
  // the destructor does it first.
  virtual void Shutdown() = 0;
};

// A version's default warmup: its passes and what the log line says of them ("" = nothing).
struct DefaultWarmupPasses {
  std::vector<WarmupShape> shapes;
  std::string note;
};

// One loaded model version, immutable (TF Serving's Servable).
class Servable {
 public:
  virtual ~Servable() = default;
  // The warmup passes when config.json has no "warmup" key, for the scheduler the version will
  // run with (on a device, the merge's shapes: kinds/warmup_plan.h).
  virtual DefaultWarmupPasses DefaultWarmup(const BatcherOptions& scheduler) const = 0;
  // One warmup pass before the version is READY; `given`: one of config.json's.
  virtual Status WarmupPass(const WarmupShape& shape, bool given) const = 0;
  // The READY line of the start-up log.
  virtual void LogReady(const ModelEntry& entry, bool is_default) const = 0;
  // The serving side of `entry` (this servable's version) for one handle.
  virtual std::unique_ptr<ServedModel> Serve(const ModelEntry& entry,
                                             const ServeContext& context) const = 0;
};

// A model kind: how its version folders are recognised, located and loaded.
class ModelKind {
 public:
  virtual ~ModelKind() = default;
  // What ModelInfo.architecture says of its versions (also before they load).
  virtual const char* architecture() const = 0;
  // Whether a version folder whose (layered) config.json is `config` is of this kind.
  virtual bool Claims(const ServingConfig& config) const = 0;
  // The version folder `dir`: entry->path (what Load reads) and the files it is loaded from,
  // appended to `files` (the version's fingerprint covers them).
  virtual Status Locate(const std::filesystem::path& dir, ModelEntry* entry,
                        std::vector<std::string>* files) const = 0;
  // Loads a LOADING entry: sets servable, info, description, format, layout, unused_keys; READY
  // is the caller's to set. An error leaves the entry to the caller (FAILED).
  virtual Status Load(const LoadOverrides& overrides, ModelEntry* entry) const = 0;
  // The model served when no repository is given, as Load sets it; UNIMPLEMENTED for a kind
  // without one.
  virtual Status LoadBuiltin(const LoadOverrides& overrides, ModelEntry* entry) const {
    return Unimplemented("this model kind has no built-in model");
  }
};

// The kind of a version folder: the first registered kind that claims its config.json; the
// last one (the one-layer MHA model) claims every folder (kinds/registry.cc).
const ModelKind& KindFor(const ServingConfig& config);
// The kind of the built-in model (served without a repository): the last registered one.
const ModelKind& BuiltinKind();

}  // namespace mha::serve
