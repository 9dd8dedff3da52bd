// The mha-client subcommands. Each registers its flags on the app (Add) and runs once the command
// line is parsed (Run), returning the process exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "client/bench/bench_runner.h"
#include "client/cli/cli_util.h"
#include "local_bench.h"

namespace mha::client::cli {

// list | info MODEL | health [SERVICE]: the metadata calls.
struct InfoCommands {
  void Add(CLI::App& app);
  // -1 when none of them was given.
  int Run(AttentionClient& client);

  CLI::App* list = nullptr;
  CLI::App* info = nullptr;
  CLI::App* health = nullptr;
  std::string info_model, health_service;
};

struct ForwardCommand {
  void Add(CLI::App& app);
  int Run(AttentionClient& client);

  CLI::App* cmd = nullptr;
  ShapeFlags shape;
  std::string output_file, plot_file;
  int64_t plot_row = 0;  // --plot-row: the batch row drawn
  bool shm = false;      // --shm: query/key/value and output through shared memory (mha.v1)
};

struct BenchCommand {
  void Add(CLI::App& app);
  int Run(AttentionClient& client, std::chrono::milliseconds timeout);

  CLI::App* cmd = nullptr;
  ShapeFlags shape;
  BenchOptions options;
  bool json = false;
  std::string arrival = "poisson";
  int64_t seq_min = 0, seq_max = 0;
  bool shm = false;  // --shm: tensors through shared memory (client/shm_regions.h)
  std::string plot_file;
};

struct LocalBenchCommand {
  void Add(CLI::App& app);
  int Run();

  CLI::App* cmd = nullptr;
  ShapeFlags shape;
  LocalBenchOptions options;
  int64_t embed = 512, heads = 8;
  std::string device = "cpu", dtype = "float32";
  bool json = false;
};

}  // namespace mha::client::cli
