#include "client/cli/decode_command.h"

#include <cstdio>

#include "client/cli/cli_util.h"
#include "client/cli/efficiency.h"
#include "client/cli/plot_inputs.h"

namespace mha::client::cli {

void DecodeCommand::Add(CLI::App& app) {
  cmd = app.add_subcommand(
      "decode",
      "Decoding sessions: open M sessions, step each N times (one token per step); "
      "reports steps/s and step latency p50/p99");
  AddModelFlags(cmd, &options.model, &options.model_version);
  cmd->add_option("--tokens", options.tokens, "Decode steps per session")->capture_default_str();
  cmd->add_option("--sessions", options.sessions, "Sessions decoding at once (a thread each)")
      ->capture_default_str();
  cmd->add_option("--prefill", options.prefill, "Tokens of a first (untimed) prefill step")
      ->capture_default_str();
  cmd->add_option("-b,--batch", options.batch, "Rows per session")->capture_default_str();
  cmd->add_flag("-w,--need-weights", options.need_weights, "Ask for the attention weights");
  cmd->add_flag("--per-head", options.per_head,
                "With -w: per-head weights (average_attn_weights=false)");
  cmd->add_option("--seed", options.seed, "Random queries' seed")->capture_default_str();
  cmd->add_flag("--stateless", options.stateless,
                "Baseline without sessions: each step sends the whole prefix with is_causal");
  cmd->add_flag("--stream", options.stream,
                "Each session's steps as messages of one ForwardStream (not a Forward call each)");
  cmd->add_flag("!--no-resume", options.resume,
                "A session lost with its replica fails its step (default: re-open the same id "
                "and replay its tokens, counted as resumed)");
  cmd->add_option("--fork", options.fork,
                  "Fork N continuations of each session after its prefill (ForkSession: KV "
                  "blocks shared); each continuation steps --tokens times")
      ->capture_default_str();
  cmd->add_option("--speculate", options.speculate,
                  "Speculative decoding: each of --tokens rounds appends K tokens in one step, "
                  "then truncates back a random 0..K of them (TruncateSession)")
      ->capture_default_str();
  AddServerCpuFlags(cmd, &options.server_cpu);
  cmd->add_flag("--json", json, "Print one JSON object");
  AddPlotOption(cmd, &plot_file,
                "Draw the step latency distribution (p50/p90/p99 marked), the throughput over "
                "time and, with -w, session 0's last step's weights over its cache");
  cmd->add_option("--plot-row", plot_row, "The batch row of the last step's weights --plot draws")
      ->capture_default_str();
}

int DecodeCommand::Run(AttentionClient& client, std::chrono::milliseconds timeout) {
  options.timeout = timeout;
  auto report = RunDecodeBench(client, options);
  if (!report.ok()) return Fail(report.status());
  if (report->server_cpu.measured) {
    FillEfficiency(&report->server_cpu, DecodeStepFlops(options, report->embed_dim),
                   MeasureMatmulFlopsPerCpuSecond());
  }
  if (json) {
    std::printf("%s\n", DecodeBenchReportJson(*report).c_str());
  } else {
    std::printf("%s", DecodeBenchReportText(options, *report).c_str());
  }
  if (!plot_file.empty()) {
    const Status s = PlotDecode(plot_file, options, *report, plot_row, json ? stderr : stdout);
    if (!s.ok()) return Fail(s);
  }
  return report->errors == 0 ? 0 : 1;
}

}  // namespace mha::client::cli
