#include "client/cli/afd_command.h"

#include <cstdio>

#include "client/cli/cli_util.h"
#include "client/cli/efficiency.h"

namespace mha::client::cli {

void AfdCommand::Add(CLI::App& app) {
  cmd = app.add_subcommand(
      "afd",
      "Attention-FFN disaggregation: drive L layers x N sessions x T steps of a Llama model "
      "through LayerSteps with a stand-in FFN; reports steps/s and per-layer round trips");
  AddModelFlags(cmd, &options.model, &options.model_version);
  cmd->add_option("--sessions", options.sessions, "Sessions (N)")->capture_default_str();
  cmd->add_option("--streams", options.streams,
                  "LayerSteps streams, a thread each; the sessions split evenly over them")
      ->capture_default_str();
  cmd->add_option("--steps", options.steps, "Decode steps per session (T)")->capture_default_str();
  cmd->add_option("--prefill", options.prefill, "Tokens of each session's prefill (untimed)")
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", options.prefill_chunk,
                  "Send the prefill in chunks of at most this many tokens (0 = one chunk)")
      ->capture_default_str();
  cmd->add_option("--layers", options.layers, "Layers driven, from 0 (0 = every layer: L)")
      ->capture_default_str();
  cmd->add_option("--seed", options.seed, "Seed of the stand-in FFN and embeddings")
      ->capture_default_str();
  cmd->add_flag("--shm", options.shm,
                "Hidden states and outputs through shared-memory regions (registered through the "
                "Open Inference Protocol; the server needs --allow-client-shm=true)");
  AddServerCpuFlags(cmd, &options.server_cpu);  // per layer message of the decode phase
  cmd->add_flag("--json", json, "Print one JSON object");
}

int AfdCommand::Run(AttentionClient& client, std::chrono::milliseconds timeout) {
  options.timeout = timeout;
  auto report = RunAfdBench(client, options);
  if (!report.ok()) return Fail(report.status());
  if (report->server_cpu.measured) {
    const int64_t per_stream = (options.sessions + options.streams - 1) / options.streams;
    FillEfficiency(&report->server_cpu, AfdLayerMessageFlops(*report, options, per_stream),
                   MeasureMatmulFlopsPerCpuSecond());
  }
  if (json) {
    std::printf("%s\n", AfdBenchReportJson(*report).c_str());
  } else {
    std::printf("%s", AfdBenchReportText(options, *report).c_str());
  }
  return report->failed_steps == 0 && report->failed_messages == 0 ? 0 : 1;
}

}  // namespace mha::client::cli
