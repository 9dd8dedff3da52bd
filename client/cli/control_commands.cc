#include "client/cli/control_commands.h"

#include <cstdio>
#include <fstream>

#include "client/cli/cli_util.h"

namespace mha::client::cli {

void AddAdminTokenFlag(CLI::App& app, std::string* file) {
  app.add_option("--admin-token-file", *file,
                 "Token for load/unload/index (sent as 'authorization: Bearer <token>')")
      ->envname("MHA_ADMIN_TOKEN_FILE");
}

StatusOr<std::string> ReadTokenFile(const std::string& file) {
  if (file.empty()) return std::string();
  std::ifstream in(file);
  if (!in) return NotFound("--admin-token-file " + file + ": cannot open");
  std::string line;
  std::getline(in, line);
  const size_t first = line.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return InvalidArgument("--admin-token-file " + file + ": empty");
  return line.substr(first, line.find_last_not_of(" \t\r\n") - first + 1);
}

void ControlCommands::Add(CLI::App& app) {
  load = app.add_subcommand("load", "Load a model, or reload it from the repository as it is now");
  load->add_option("model", model, "Model name")->required();
  unload = app.add_subcommand("unload", "Unload a model (its accepted requests complete first)");
  unload->add_option("model", model, "Model name")->required();
  index = app.add_subcommand("index", "Every model folder of the repository and its state");
  stats = app.add_subcommand("stats", "Per-version statistics (all models when none is named)");
  stats->add_option("model", model, "Model name");
  stats->add_option("--model-version", version, "One version only");
}

namespace {

int PrintStatistics(AttentionClient& client, const std::string& model, const std::string& version) {
  auto stats = client.GetModelStatistics(model, version);
  if (!stats.ok()) return Fail(stats.status());
  std::printf(
      "model\tversion\tsuccess\tfailure\tinferences\texecutions\tqueue_ms\tcompute_ms"
      "\tlast_inference_ms\n");
  for (const auto& s : stats->models()) {
    std::printf("%s\t%s\t%lld\t%lld\t%lld\t%lld\t%.3f\t%.3f\t%lld\n", s.name().c_str(),
                s.version().c_str(), (long long)s.success_count(), (long long)s.failure_count(),
                (long long)s.inference_count(), (long long)s.execution_count(), s.queue_ns() / 1e6,
                s.compute_ns() / 1e6, (long long)s.last_inference_ms());
  }
  return 0;
}

}  // namespace

int ControlCommands::Run(AttentionClient& client) {
  if (*load || *unload) {
    const Status s = *load ? client.LoadModel(model) : client.UnloadModel(model);
    if (!s.ok()) return Fail(s);
    std::printf("%s %s\n", *load ? "loaded" : "unloaded", model.c_str());
    return 0;
  }
  if (*stats) return PrintStatistics(client, model, version);
  if (*index) {
    auto rows = client.RepositoryIndex();
    if (!rows.ok()) return Fail(rows.status());
    for (const auto& r : rows->models()) {
      const std::string state =
          r.state() == v1::MODEL_STATE_UNSPECIFIED ? "-" : v1::ModelState_Name(r.state());
      std::printf("%s\t%s\t%s%s%s\n", r.name().c_str(),
                  r.version().empty() ? "-" : r.version().c_str(), state.c_str(),
                  r.reason().empty() ? "" : "\t", r.reason().c_str());
    }
    return 0;
  }
  return -1;
}

}  // namespace mha::client::cli
