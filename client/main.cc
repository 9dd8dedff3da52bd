// mha-client: command-line client for mha-server.
//   mha-client [--target HOST:PORT] list | info MODEL | health [SERVICE] | forward ... | bench ...
//   mha-client --protocol oip forward|bench ...   (the same through the Open Inference Protocol)
//   mha-client analyze [MODEL] [--plot FILE.png]
//   mha-client decode --tokens N --sessions M   (decoding sessions: steps/s, p50/p99)
//   mha-client afd --sessions N --steps T   (a Llama model's LayerSteps with a stand-in FFN)
//   mha-client [--admin-token-file FILE] load MODEL | unload MODEL | index
//   mha-client local-bench ...   (the same pass in this process, no server)
#include <CLI/CLI.hpp>

#include "client/cli/afd_command.h"
#include "client/cli/commands.h"
#include "client/cli/control_commands.h"
#include "client/cli/decode_command.h"
#include "client/cli/head_commands.h"
#include "client/cli/tls_flags.h"

namespace {

using namespace mha::client::cli;

// Every subcommand: registered on the app, then the one given runs.
struct Commands {
  InfoCommands info;
  ForwardCommand forward;
  BenchCommand bench;
  DecodeCommand decode;
  AfdCommand afd;
  LocalBenchCommand local;
  ControlCommands control;
  AnalyzeCommand analyze;

  void Add(CLI::App& app) {
    info.Add(app);
    control.Add(app);
    forward.Add(app);
    bench.Add(app);
    decode.Add(app);
    afd.Add(app);
    local.Add(app);
    analyze.Add(app);
  }
  // The command that talks to the server through `client`.
  int Run(mha::client::AttentionClient& client, std::chrono::milliseconds timeout) {
    if (const int code = control.Run(client); code >= 0) return code;
    if (*forward.cmd) return forward.Run(client);
    if (*bench.cmd) return bench.Run(client, timeout);
    if (*analyze.cmd) return analyze.Run(client);
    if (*decode.cmd) return decode.Run(client, timeout);
    if (*afd.cmd) return afd.Run(client, timeout);
    const int code = info.Run(client);
    return code < 0 ? 0 : code;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mha-client: talk to mha-server (mha.v1.AttentionService)"};
  app.require_subcommand(1);
  mha::client::ClientOptions client_options;
  int64_t timeout_ms = 30000;
  app.add_option("-a,--target", client_options.target,
                 "Server address host:port, or several: ipv4:A:P,B:P or dns:///NAME:P")
      ->envname("MHA_TARGET")
      ->capture_default_str();
  app.add_option("--lb", client_options.channel.lb,
                 "round_robin or pick_first (default: round_robin for several addresses or dns:)")
      ->check(CLI::IsMember({"round_robin", "pick_first"}));
  app.add_option("--timeout-ms", timeout_ms, "Deadline of each call")->capture_default_str();
  std::string protocol = "mha.v1";
  app.add_option("--protocol", protocol,
                 "API of forward and bench: mha.v1 (AttentionService/Forward) or oip (the Open "
                 "Inference Protocol's ModelInfer, same port)")
      ->envname("MHA_PROTOCOL")
      ->check(CLI::IsMember({"mha.v1", "oip"}))
      ->capture_default_str();
  AddTlsFlags(app, &client_options.tls);
  std::string admin_token_file;
  AddAdminTokenFlag(app, &admin_token_file);
  Commands commands;
  commands.Add(app);
  CLI11_PARSE(app, argc, argv);

  client_options.timeout = std::chrono::milliseconds(timeout_ms);
  client_options.protocol =
      protocol == "oip" ? mha::client::WireProtocol::kOip : mha::client::WireProtocol::kNative;
  if (*commands.local.cmd) return commands.local.Run();
  if (auto tls = mha::client::MakeChannelCredentials(client_options.tls); !tls.ok()) {
    return Fail(tls.status());  // an unreadable TLS file, before any call
  }
  auto token = ReadTokenFile(admin_token_file);
  if (!token.ok()) return Fail(token.status());
  client_options.admin_token = *token;
  mha::client::AttentionClient client(client_options);
  return commands.Run(client, client_options.timeout);
}
