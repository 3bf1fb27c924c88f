//===- WorkerArgs.cpp - dtorch-worker's command line ---------------------===//
//
// parseWorkerArgs (Worker.h): flags, the token and CURVE key sources, and
// the placement a launcher's variables give (WorkerLaunch.h), explicit flags
// winning; a dialing worker's controller address (--controller, --dial-in,
// $DTORCH_CONTROLLER).
//
//===----------------------------------------------------------------------===//

#include "dtorch/runtime/Security.h"
#include "dtorch/runtime/Worker.h"
#include "dtorch/runtime/WorkerLaunch.h"

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>

namespace dtorch::rt {

namespace {

int parseInt(const std::string &text, const char *flag) {
  try {
    size_t used = 0;
    long long value = std::stoll(text, &used);
    if (used != text.size())
      throw std::invalid_argument(text);
    return static_cast<int>(value);
  } catch (const std::exception &) {
    throw RuntimeError(std::string("invalid value '") + text + "' for " + flag);
  }
}

} // namespace

WorkerOptions parseWorkerArgs(int argc, char **argv) {
  return parseWorkerArgs(argc, argv, processEnvironment());
}

namespace {

// The specific IPv4 address of a tcp:// endpoint, or empty (a name, a
// wildcard, another transport).
std::string specificAddressOf(const std::string &endpoint) {
  const std::string scheme = "tcp://";
  if (endpoint.compare(0, scheme.size(), scheme) != 0)
    return "";
  std::string host = endpoint.substr(scheme.size());
  host = host.substr(0, host.rfind(':'));
  if (host == "*" || host == "0.0.0.0")
    return "";
  int dots = 0;
  for (char c : host) {
    if (c == '.')
      ++dots;
    else if (c < '0' || c > '9')
      return "";
  }
  return dots == 3 ? host : "";
}

} // namespace

WorkerOptions parseWorkerArgs(int argc, char **argv,
                              const EnvironmentLookup &env) {
  static const char *usage =
      "usage: dtorch-worker (--connect ADDR | --listen ADDR | a launcher's "
      "variables) (--token-file PATH | --token-fd N | $DTORCH_TOKEN) "
      "(--ranks A-B --world-size N | a launcher's variables) "
      "[--launcher auto|slurm|torchrun|none] [--ranks-per-worker N] "
      "[--port P] [--bind-address ADDR|hostname|interface:NAME] "
      "[--host-id ID] [--collective-timeout-ms MS] "
      "[--controller-timeout-ms MS] [--heartbeat-ms MS] "
      "[--max-message-bytes B] [--link-fd N] "
      "[--collective-address HOST] [--ranks-on-host N] [--generation G] "
      "[--controller HOST:PORT | --dial-in] [--controller-wait-ms MS] "
      "[--curve-secret-key-file F --curve-controller-public-key-file F]\n"
      "       dtorch-worker --generate-curve-keypair PREFIX\n"
      "(docs/guide/multi-host.md: Slurm and torchrun variables)";
  WorkerOptions options;
  bool haveRanks = false, haveWorld = false, haveCollectiveAddress = false,
       haveRanksOnHost = false;
  int tokenSources = 0;
  std::string curveSecretFile, curveControllerFile;
  LaunchRequest launch;
  std::string bindFlag, portFlag, ranksPerWorkerFlag, launcherFlag;
  std::string controllerFlag, controllerWaitFlag;
  bool dialInFlag = false;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--dial-in") { // the only flag without a value
      dialInFlag = true;
      continue;
    }
    if (i + 1 >= argc)
      throw RuntimeError("missing value for " + flag + "\n" + usage);
    std::string value = argv[++i];
    if (flag == "--connect")
      options.connect = value;
    else if (flag == "--link-fd") {
      options.linkFd = parseInt(value, "--link-fd");
      if (options.linkFd < 3)
        throw RuntimeError("--link-fd must be an inherited descriptor (3 or "
                           "more)");
    } else if (flag == "--controller")
      controllerFlag = value;
    else if (flag == "--controller-wait-ms")
      controllerWaitFlag = value;
    else if (flag == "--listen")
      options.listen = value;
    else if (flag == "--token") {
      options.token = value;
      options.tokenOnCommandLine = true;
      ++tokenSources;
    } else if (flag == "--token-file") {
      options.token = readSecretFile(value);
      ++tokenSources;
    } else if (flag == "--token-fd") {
      options.token = readSecretDescriptor(parseInt(value, "--token-fd"));
      ++tokenSources;
    } else if (flag == "--curve-secret-key-file")
      curveSecretFile = value;
    else if (flag == "--curve-controller-public-key-file")
      curveControllerFile = value;
    else if (flag == "--generate-curve-keypair")
      options.generateCurveKeyPairPrefix = value;
    else if (flag == "--world-size") {
      options.worldSize = parseInt(value, "--world-size");
      haveWorld = true;
    } else if (flag == "--collective-timeout-ms")
      options.collectiveTimeout =
          std::chrono::milliseconds(parseInt(value, "--collective-timeout-ms"));
    else if (flag == "--controller-timeout-ms")
      options.controllerTimeout =
          std::chrono::milliseconds(parseInt(value, "--controller-timeout-ms"));
    else if (flag == "--heartbeat-ms")
      options.transport.heartbeatInterval =
          std::chrono::milliseconds(parseInt(value, "--heartbeat-ms"));
    else if (flag == "--max-message-bytes")
      options.transport.maxMessageBytes =
          parseInt(value, "--max-message-bytes");
    else if (flag == "--gloo-host" || flag == "--collective-address") {
      options.glooHost = value;
      haveCollectiveAddress = true;
    } else if (flag == "--ranks-on-host") {
      options.ranksOnHost = parseInt(value, "--ranks-on-host");
      haveRanksOnHost = true;
    } else if (flag == "--generation") {
      int generation = parseInt(value, "--generation");
      if (generation < 0)
        throw RuntimeError("--generation must not be negative");
      options.generation = static_cast<uint64_t>(generation);
    } else if (flag == "--ranks") {
      size_t dash = value.find('-');
      int first = parseInt(value.substr(0, dash), "--ranks");
      int last = dash == std::string::npos
                     ? first
                     : parseInt(value.substr(dash + 1), "--ranks");
      options.firstRank = first;
      options.numRanks = last - first + 1;
      haveRanks = true;
    } else if (flag == "--launcher")
      launcherFlag = value;
    else if (flag == "--ranks-per-worker")
      ranksPerWorkerFlag = value;
    else if (flag == "--port")
      portFlag = value;
    else if (flag == "--bind-address")
      bindFlag = value;
    else if (flag == "--host-id") {
      if (value.empty())
        throw RuntimeError("--host-id must not be empty");
      options.hostId = value;
    } else {
      throw RuntimeError("unknown option " + flag + "\n" + usage);
    }
  }
  if (!options.generateCurveKeyPairPrefix.empty()) {
    if (argc != 3)
      throw RuntimeError("--generate-curve-keypair takes no other option\n" +
                         std::string(usage));
    return options;
  }
  // Dial-in: the controller's address comes from the flags or the
  // environment (WorkerLaunch.h); a launcher may still place the worker.
  // Explicit flags win: a --listen worker does not dial because of the
  // environment (only --controller / --dial-in conflict with it).
  bool dialFlags = dialInFlag || !controllerFlag.empty();
  std::optional<std::string> dialController =
      options.connect.empty() && (options.listen.empty() || dialFlags)
          ? dialInControllerAddress(controllerFlag, dialInFlag, env)
          : std::nullopt;
  if (!options.connect.empty() && (dialInFlag || !controllerFlag.empty()))
    throw RuntimeError("--connect and --controller / --dial-in exclude each "
                       "other");
  if (dialController && !options.listen.empty())
    throw RuntimeError(
        "a dialing worker (--controller, --dial-in, $DTORCH_CONTROLLER or "
        "$DTORCH_DIAL_IN) does not listen: drop --listen");
  options.dialIn = dialController.has_value();
  // Launch settings: a flag, else its variable (not for a --connect worker:
  // the embedded cluster's workers inherit the client's environment and
  // stay on loopback); each error names its source.
  auto setting =
      [&](const std::string &flagValue, const char *flag,
          const char *variable) -> std::pair<std::string, std::string> {
    if (!flagValue.empty())
      return {flagValue, flag};
    if (!options.connect.empty())
      return {"", ""};
    if (std::optional<std::string> value = env(variable))
      return {*value, std::string("$") + variable};
    return {"", ""};
  };
  auto [launcher, launcherSource] =
      setting(launcherFlag, "--launcher", "DTORCH_LAUNCHER");
  launch.launcher = launcher;
  if (auto [text, source] = setting(ranksPerWorkerFlag, "--ranks-per-worker",
                                    "DTORCH_RANKS_PER_WORKER");
      !text.empty()) {
    launch.ranksPerWorker = parseInt(text, source.c_str());
    if (launch.ranksPerWorker < 1)
      throw RuntimeError(source + " must be at least 1");
  }
  if (auto [text, source] = setting(portFlag, "--port", "DTORCH_WORKER_PORT");
      !text.empty()) {
    launch.basePort = parseInt(text, source.c_str());
    if (launch.basePort < 1 || launch.basePort > 65535)
      throw RuntimeError(source + " must be a port number (1 to 65535)");
  }
  std::string bindAddress;
  if (auto [text, source] =
          setting(bindFlag, "--bind-address", "DTORCH_BIND_ADDRESS");
      !text.empty())
    bindAddress = resolveBindAddress(text, source);
  launch.bindAddress = bindAddress;
  if (options.hostId.empty())
    options.hostId = env("DTORCH_HOST_ID").value_or("");

  // A launcher places only a listening worker, and only what the flags
  // leave open (the embedded cluster's --connect workers never look).
  bool needsPlacement =
      options.connect.empty() &&
      ((options.listen.empty() && !options.dialIn) || !haveRanks || !haveWorld);
  // A dialing worker listens nowhere: no address or port is derived.
  launch.listenGiven = !options.listen.empty() || options.dialIn;
  if (needsPlacement) {
    if (std::optional<LaunchPlacement> placement =
            placementFromLauncher(launch, env)) {
      std::string overridden;
      if (options.listen.empty())
        options.listen = placement->listen;
      else
        overridden += " --listen";
      if (!haveRanks) {
        options.firstRank = placement->firstRank;
        options.numRanks = placement->numRanks;
        haveRanks = true;
      } else {
        overridden += " --ranks";
      }
      if (!haveWorld) {
        options.worldSize = placement->worldSize;
        haveWorld = true;
      } else {
        overridden += " --world-size";
      }
      if (!haveRanksOnHost)
        options.ranksOnHost = placement->ranksOnHost;
      if (bindAddress.empty())
        bindAddress = placement->bindAddress;
      options.launchDescription = placement->launcher + " (";
      for (size_t i = 0; i < placement->sources.size(); ++i)
        options.launchDescription += (i ? " " : "") + placement->sources[i];
      options.launchDescription += ")";
      if (!overridden.empty())
        options.launchDescription += "; explicit flags win:" + overridden;
    } else if (options.listen.empty() && launch.basePort > 0 &&
               !options.dialIn) {
      // By hand: --bind-address (else loopback) and --port.
      options.listen = "tcp://" +
                       (bindAddress.empty() ? "127.0.0.1" : bindAddress) + ":" +
                       std::to_string(launch.basePort);
    }
  } else if (!launcherFlag.empty() || env("DTORCH_LAUNCHER")) {
    // Still check the setting's spelling.
    if (launcher != "auto" && launcher != "slurm" && launcher != "torchrun" &&
        launcher != "none")
      throw RuntimeError(launcherSource +
                         " must be auto, slurm, torchrun or none, not '" +
                         launcher + "'");
  }
  if (options.dialIn)
    options.connect = *dialController;
  if (!controllerWaitFlag.empty() || env("DTORCH_CONTROLLER_WAIT_MS")) {
    const char *source = controllerWaitFlag.empty()
                             ? "$DTORCH_CONTROLLER_WAIT_MS"
                             : "--controller-wait-ms";
    int wait =
        parseInt(controllerWaitFlag.empty() ? *env("DTORCH_CONTROLLER_WAIT_MS")
                                            : controllerWaitFlag,
                 source);
    if (wait <= 0)
      throw RuntimeError(std::string(source) + " must be positive");
    options.controllerWait = std::chrono::milliseconds(wait);
  }
  if (options.linkFd >= 0 && (options.connect.empty() || options.dialIn))
    throw RuntimeError("--link-fd needs --connect (the embedded cluster's "
                       "workers)");
  if (options.connect.empty() == options.listen.empty())
    throw RuntimeError(
        std::string("give exactly one of --connect and --listen (or --port, "
                    "or start the worker under a launcher)\n") +
        usage);
  if (tokenSources > 1)
    throw RuntimeError("give the token once: --token-file, --token-fd or "
                       "--token");
  if (tokenSources == 0) {
    if (std::optional<std::string> token = env("DTORCH_TOKEN"))
      options.token = *token;
  }
  if (options.token.empty())
    throw RuntimeError(
        std::string("a token is required: --token-file PATH, --token-fd N or "
                    "$DTORCH_TOKEN\n") +
        usage);
  // The collective links: explicit, else the bind address, else the
  // specific address --listen names, else loopback.
  if (!haveCollectiveAddress) {
    if (std::optional<std::string> address = env("DTORCH_COLLECTIVE_ADDRESS"))
      options.glooHost = *address;
    else if (!bindAddress.empty())
      options.glooHost = bindAddress;
    else if (std::string listened = specificAddressOf(options.listen);
             !listened.empty())
      options.glooHost = listened;
    else if (options.dialIn) {
      // The address this host reaches the controller from: the network
      // the rest of the world shares with it.
      try {
        options.glooHost = localAddressToward(controllerHostOf(options.connect),
                                              "the controller's address");
      } catch (const RuntimeError &error) {
        throw RuntimeError(
            std::string(error.what()) +
            " (a dialing worker's collectives bind the address it reaches "
            "the controller from; or give --collective-address or "
            "--bind-address)");
      }
    }
  }
  if (curveSecretFile.empty() != curveControllerFile.empty())
    throw RuntimeError("CURVE needs both --curve-secret-key-file and "
                       "--curve-controller-public-key-file");
  if (!curveSecretFile.empty()) {
    requireCurve();
    options.curveSecretKey =
        readCurveKeyFile(curveSecretFile, "this worker's CURVE secret key");
    options.curveControllerPublicKey = readCurveKeyFile(
        curveControllerFile, "the controller's CURVE public key");
  }
  if (!haveRanks || !haveWorld)
    throw RuntimeError(
        std::string("--ranks and --world-size are required (or start the "
                    "worker under srun or with torchrun-style variables "
                    "RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, "
                    "MASTER_PORT)\n") +
        usage);
  if (options.numRanks < 1 || options.firstRank < 0 ||
      options.firstRank + options.numRanks > options.worldSize)
    throw RuntimeError(
        "--ranks must be a non-empty range inside [0, world-size)");
  if (options.collectiveTimeout.count() <= 0 ||
      options.controllerTimeout.count() <= 0 ||
      options.transport.heartbeatInterval.count() <= 0 ||
      options.transport.maxMessageBytes <= 0 || options.ranksOnHost < 0)
    throw RuntimeError("timeouts, --max-message-bytes and --ranks-on-host "
                       "must be positive");
  return options;
}

} // namespace dtorch::rt
