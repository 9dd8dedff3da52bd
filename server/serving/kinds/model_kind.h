// Model kinds: what the serving core knows of a family of models (Triton's backend API, TF
// Serving's SourceAdapter / Loader / Servable). Each kind lives in its own folder under
// server/serving/kinds/ and is registered once, in kinds/registry.cc; the repository scan, the
// lifecycle, the serving core and the front ends call these interfaces and never name a kind.
//
//   ModelKind      how a version folder is recognised, located and loaded (one object per kind)
//   Servable       one loaded version, immutable: warmup, its log line, Serve (kept in ModelEntry)
//   ServedModel    the serving side of one READY version: its scheduler, and the capabilities
//                  its kind offers (sessions, session steps, layer steps, head analysis); made by
//                  Serve for each ModelHandle, destroyed with it
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
#include "server/serving/sessions/sessions.h"

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

// Optional capabilities of a served version (Triton's backend API: only execution is required,
// the other entry points may be absent). A kind that lacks one returns null from ServedModel's
// getter; ServerCore refuses the call once, in one wording (server_core_internal.h NotOffered).

// Session steps as Forward calls with a session_id (the one-layer kind's).
class SessionSteps {
 public:
  virtual ~SessionSteps() = default;
  // The step's own checks (the session's model, fields a step may not carry, the limits).
  virtual Status CheckStep(const InferenceRequest& request) const = 0;
  // Queued behind the session's earlier steps; `done` answers it exactly once.
  virtual void Step(const std::string& session_id, InferenceTask task, DoneCallback done) = 0;
};

// Per-layer steps of multi-layer stacks (LayerSteps messages, docs/afd.md).
class LayerStepper {
 public:
  virtual ~LayerStepper() = default;
  // The message's checks and the hold on its sessions, then queued. OK: `done` will answer it;
  // else the refusal (`done` is not called).
  virtual Status StepLayer(LayerStepRequest& request, LayerStepDone done) = 0;
};

// The head analysis of one attention layer (AnalyzeModel; computed once per handle by the core).
class HeadAnalyzer {
 public:
  virtual ~HeadAnalyzer() = default;
  virtual StatusOr<HeadAnalysis> AnalyzeHeads() const = 0;
};

// The serving side of one READY version (Triton's Model): its scheduler, and what else its kind
// offers (the capabilities above, and decoding sessions: sessions/sessions.h). Destroyed with
// the version's handle: its sessions end, then its scheduler answers every task it accepted.
class ServedModel {
 public:
  virtual ~ServedModel() = default;

  // What the version's scheduler runs (ModelConfig, REST config, ServerCore::Scheduling).
  virtual SchedulerView scheduling() const = 0;
  // A stateless forward: checked once against the version and the limits (shapes, the pass's
  // working memory and response), then queued; `done` answers it exactly once.
  virtual Status ValidateForward(const InferenceRequest& request) const = 0;
  virtual void Submit(InferenceTask task, DoneCallback done) = 0;
  // Stops accepting; every task already accepted is answered (the schedulers drain). Idempotent;
  // the destructor does it first.
  virtual void Shutdown() = 0;

  // The capabilities it offers (null: none).
  virtual Sessions* sessions() { return nullptr; }
  virtual SessionSteps* session_steps() { return nullptr; }
  virtual LayerStepper* layer_steps() { return nullptr; }
  virtual const HeadAnalyzer* head_analysis() const { return nullptr; }
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
  // run with (on a device, the merge's shapes: kinds/multihead/warmup_plan.h).
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
