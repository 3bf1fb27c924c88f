#include "dtorch/runtime/WorkerLaunch.h"

#include "dtorch/runtime/Tensor.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace dtorch::rt {

namespace {

constexpr int kDefaultSlurmBasePort = 29500;

// A whole number in [minimum, maximum] from `text`; `what` names its source.
int parseBounded(const std::string &text, const std::string &what, int minimum,
                 int maximum = 1 << 30) {
  size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception &) {
    used = 0;
  }
  if (text.empty() || used != text.size())
    throw RuntimeError(what + "='" + text + "' is not a whole number");
  if (value < minimum || value > maximum)
    throw RuntimeError(what + "=" + text + " is out of range (" +
                       std::to_string(minimum) + " to " +
                       std::to_string(maximum) + ")");
  return static_cast<int>(value);
}

// One variable of a launcher's set, remembered for the start-up line.
class Variables {
public:
  Variables(const EnvironmentLookup &env, std::string launcher)
      : env_(env), launcher_(std::move(launcher)) {}

  std::optional<std::string> optional(const std::string &name) {
    std::optional<std::string> value = env_(name);
    if (value)
      sources.push_back(name + "=" + *value);
    return value;
  }
  std::string required(const std::string &name, const std::string &needed) {
    std::optional<std::string> value = optional(name);
    if (!value)
      throw RuntimeError(name + " is not set (the " + launcher_ +
                         " launcher needs it for " + needed +
                         "; or give the worker's flags explicitly)");
    return *value;
  }
  int requiredInt(const std::string &name, const std::string &needed,
                  int minimum) {
    return parseBounded(required(name, needed), name, minimum);
  }

  std::vector<std::string> sources;

private:
  const EnvironmentLookup &env_;
  std::string launcher_;
};

bool isLoopbackAddress(const std::string &address) {
  in_addr parsed{};
  if (inet_pton(AF_INET, address.c_str(), &parsed) == 1)
    return (ntohl(parsed.s_addr) >> 24) == 127;
  return address == "::1" || address == "localhost";
}

// The first IPv4 address `name` resolves to.
std::string resolveIPv4(const std::string &name, const std::string &what) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo *found = nullptr;
  int status = getaddrinfo(name.c_str(), nullptr, &hints, &found);
  if (status != 0 || !found)
    throw RuntimeError(what + ": cannot resolve '" + name +
                       "' to an IPv4 address: " + gai_strerror(status));
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in *>(found->ai_addr)->sin_addr,
            text, sizeof(text));
  freeaddrinfo(found);
  return text;
}

std::string interfaceAddress(const std::string &interface,
                             const std::string &what) {
  ifaddrs *list = nullptr;
  if (getifaddrs(&list) != 0)
    throw RuntimeError(
        what + ": cannot list the network interfaces: " + std::strerror(errno));
  std::string address;
  for (ifaddrs *entry = list; entry; entry = entry->ifa_next) {
    if (!entry->ifa_addr || entry->ifa_addr->sa_family != AF_INET ||
        interface != entry->ifa_name)
      continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET,
              &reinterpret_cast<sockaddr_in *>(entry->ifa_addr)->sin_addr, text,
              sizeof(text));
    address = text;
    break;
  }
  freeifaddrs(list);
  if (address.empty())
    throw RuntimeError(what + ": interface '" + interface +
                       "' has no IPv4 address on this host");
  return address;
}

// The host part of a ZeroMQ TCP endpoint ("tcp://host:port", IPv6 in
// brackets); empty for other transports.
std::string endpointHost(const std::string &endpoint) {
  const std::string scheme = "tcp://";
  if (endpoint.compare(0, scheme.size(), scheme) != 0)
    return "";
  std::string rest = endpoint.substr(scheme.size());
  if (!rest.empty() && rest.front() == '[') {
    size_t close = rest.find(']');
    return close == std::string::npos ? rest : rest.substr(1, close - 1);
  }
  size_t colon = rest.rfind(':');
  return colon == std::string::npos ? rest : rest.substr(0, colon);
}

} // namespace

EnvironmentLookup processEnvironment() {
  return [](const std::string &name) -> std::optional<std::string> {
    const char *value = std::getenv(name.c_str());
    if (!value || !*value)
      return std::nullopt;
    return std::string(value);
  };
}

std::string resolveBindAddress(const std::string &spec,
                               const std::string &what) {
  if (spec.empty())
    throw RuntimeError(what + " is empty");
  const std::string interfacePrefix = "interface:";
  if (spec.compare(0, interfacePrefix.size(), interfacePrefix) == 0)
    return interfaceAddress(spec.substr(interfacePrefix.size()), what);
  if (spec == "hostname") {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0)
      throw RuntimeError(what + ": gethostname failed");
    return resolveIPv4(name, what + " (hostname '" + std::string(name) + "')");
  }
  in_addr parsed{};
  if (inet_pton(AF_INET, spec.c_str(), &parsed) == 1)
    return spec;
  return resolveIPv4(spec, what);
}

std::string localAddressToward(const std::string &host,
                               const std::string &what) {
  std::string remote = resolveIPv4(host, what);
  if (isLoopbackAddress(remote))
    return "127.0.0.1";
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    throw RuntimeError(what + ": socket failed: " + std::strerror(errno));
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(9); // any port: a UDP connect sends nothing
  inet_pton(AF_INET, remote.c_str(), &peer.sin_addr);
  sockaddr_in local{};
  socklen_t length = sizeof(local);
  bool ok =
      connect(fd, reinterpret_cast<sockaddr *>(&peer), sizeof(peer)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr *>(&local), &length) == 0;
  int savedErrno = errno;
  close(fd);
  if (!ok)
    throw RuntimeError(what + ": no route from this host to " + remote + ": " +
                       std::strerror(savedErrno));
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  return text;
}

std::vector<std::string> expandSlurmHostList(const std::string &list,
                                             const std::string &what) {
  // Split at the commas outside brackets; each item is PREFIX[RANGES]SUFFIX
  // (one bracket group, as Slurm prints them) or a plain name.
  std::vector<std::string> items;
  std::string current;
  int depth = 0;
  for (char c : list) {
    if (c == '[')
      ++depth;
    if (c == ']' && --depth < 0)
      throw RuntimeError(what + "='" + list + "': unbalanced ']'");
    if (c == ',' && depth == 0) {
      items.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (depth != 0)
    throw RuntimeError(what + "='" + list + "': unbalanced '['");
  items.push_back(current);
  std::vector<std::string> hosts;
  for (const std::string &item : items) {
    if (item.empty())
      throw RuntimeError(what + "='" + list + "': empty host name");
    size_t open = item.find('[');
    if (open == std::string::npos) {
      hosts.push_back(item);
      continue;
    }
    size_t close = item.find(']', open);
    std::string prefix = item.substr(0, open);
    std::string suffix = item.substr(close + 1);
    std::string ranges = item.substr(open + 1, close - open - 1);
    size_t start = 0;
    while (start <= ranges.size()) {
      size_t comma = ranges.find(',', start);
      std::string range =
          ranges.substr(start, comma == std::string::npos ? std::string::npos
                                                          : comma - start);
      size_t dash = range.find('-');
      std::string first = range.substr(0, dash);
      std::string last =
          dash == std::string::npos ? first : range.substr(dash + 1);
      int from = parseBounded(first, what + " range", 0);
      int to = parseBounded(last, what + " range", 0);
      if (to < from || to - from > (1 << 20))
        throw RuntimeError(what + "='" + list + "': bad range '" + range + "'");
      for (int n = from; n <= to; ++n) {
        std::string digits = std::to_string(n);
        // Zero padding as written ("01-03" gives 01, 02, 03).
        if (digits.size() < first.size())
          digits.insert(0, first.size() - digits.size(), '0');
        hosts.push_back(prefix + digits + suffix);
      }
      if (comma == std::string::npos)
        break;
      start = comma + 1;
    }
  }
  return hosts;
}

std::vector<int> expandSlurmTasksPerNode(const std::string &value,
                                         const std::string &what) {
  std::vector<int> perNode;
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    std::string item = value.substr(
        start, comma == std::string::npos ? std::string::npos : comma - start);
    int repeat = 1;
    size_t paren = item.find('(');
    if (paren != std::string::npos) {
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 ||
          item.back() != ')')
        throw RuntimeError(what + "='" + value + "': bad item '" + item + "'");
      repeat = parseBounded(item.substr(paren + 2, item.size() - paren - 3),
                            what + " repeat count", 1, 1 << 20);
      item = item.substr(0, paren);
    }
    int tasks = parseBounded(item, what, 1);
    perNode.insert(perNode.end(), repeat, tasks);
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return perNode;
}

std::optional<LaunchPlacement>
placementFromLauncher(const LaunchRequest &request,
                      const EnvironmentLookup &env) {
  std::string launcher = request.launcher.empty() ? "auto" : request.launcher;
  if (launcher != "auto" && launcher != "slurm" && launcher != "torchrun" &&
      launcher != "none")
    throw RuntimeError("--launcher (or $DTORCH_LAUNCHER) must be auto, slurm, "
                       "torchrun or none, not '" +
                       launcher + "'");
  if (launcher == "none")
    return std::nullopt;
  bool haveSlurm = env("SLURM_PROCID").has_value();
  bool haveTorchrun = env("RANK").has_value() || env("WORLD_SIZE").has_value();
  if (launcher == "auto") {
    if (haveSlurm && haveTorchrun) {
      // Both sets present (torchrun inside srun, or a leftover export):
      // only a consistent pair may go unnamed.
      std::optional<std::string> procid = env("SLURM_PROCID"),
                                 rank = env("RANK"),
                                 ntasks = env("SLURM_NTASKS"),
                                 world = env("WORLD_SIZE");
      if (procid != rank || ntasks != world)
        throw RuntimeError(
            "both Slurm and torchrun variables are set and they disagree "
            "(SLURM_PROCID=" +
            procid.value_or("unset") + " vs RANK=" + rank.value_or("unset") +
            ", SLURM_NTASKS=" + ntasks.value_or("unset") +
            " vs WORLD_SIZE=" + world.value_or("unset") +
            "): choose one with --launcher slurm|torchrun");
      launcher = "torchrun";
    } else if (haveSlurm) {
      launcher = "slurm";
    } else if (haveTorchrun) {
      launcher = "torchrun";
    } else {
      return std::nullopt;
    }
  }

  Variables vars(env, launcher);
  LaunchPlacement placement;
  placement.launcher = launcher;
  int worker = 0, workers = 0, local = 0, tasksOnNode = 0;
  int basePort = request.basePort;
  std::string bind = request.bindAddress;
  if (launcher == "slurm") {
    worker = vars.requiredInt("SLURM_PROCID", "this worker's ranks", 0);
    workers = vars.requiredInt("SLURM_NTASKS", "the world size", 1);
    local = vars.requiredInt("SLURM_LOCALID", "this worker's port", 0);
    if (worker >= workers)
      throw RuntimeError(
          "SLURM_PROCID=" + std::to_string(worker) +
          " is not below SLURM_NTASKS=" + std::to_string(workers));
    // Node count: explicit variables first, else the node list.
    std::optional<std::string> nodeList = vars.optional("SLURM_JOB_NODELIST");
    if (!nodeList)
      nodeList = vars.optional("SLURM_NODELIST");
    if (std::optional<std::string> nodes = vars.optional("SLURM_NNODES"))
      placement.nodes = parseBounded(*nodes, "SLURM_NNODES", 1);
    else if (std::optional<std::string> jobNodes =
                 vars.optional("SLURM_JOB_NUM_NODES"))
      placement.nodes = parseBounded(*jobNodes, "SLURM_JOB_NUM_NODES", 1);
    else if (nodeList)
      placement.nodes = static_cast<int>(
          expandSlurmHostList(*nodeList, "SLURM_JOB_NODELIST").size());
    int node = 0;
    if (std::optional<std::string> nodeId = vars.optional("SLURM_NODEID")) {
      node = parseBounded(*nodeId, "SLURM_NODEID", 0);
      if (placement.nodes > 0 && node >= placement.nodes)
        throw RuntimeError("SLURM_NODEID=" + *nodeId +
                           " is not below the job's " +
                           std::to_string(placement.nodes) + " node(s)");
    }
    if (std::optional<std::string> perNode =
            vars.optional("SLURM_NTASKS_PER_NODE")) {
      tasksOnNode = parseBounded(*perNode, "SLURM_NTASKS_PER_NODE", 1);
    } else if (std::optional<std::string> tasks =
                   vars.optional("SLURM_TASKS_PER_NODE")) {
      std::vector<int> counts =
          expandSlurmTasksPerNode(*tasks, "SLURM_TASKS_PER_NODE");
      if (node >= static_cast<int>(counts.size()))
        throw RuntimeError(
            "SLURM_TASKS_PER_NODE='" + *tasks +
            "' names no count for SLURM_NODEID=" + std::to_string(node));
      tasksOnNode = counts[node];
    }
    if (tasksOnNode > 0 && local >= tasksOnNode)
      throw RuntimeError("SLURM_LOCALID=" + std::to_string(local) +
                         " is not below the " + std::to_string(tasksOnNode) +
                         " task(s) on this node");
    if (basePort == 0)
      basePort = kDefaultSlurmBasePort;
    if (bind.empty() && !request.listenGiven) {
      if (placement.nodes > 1)
        throw RuntimeError(
            "the Slurm job spans " + std::to_string(placement.nodes) +
            " nodes (SLURM_NNODES / SLURM_JOB_NODELIST), but the worker "
            "would listen on loopback: give --bind-address (or "
            "$DTORCH_BIND_ADDRESS) an address, 'hostname' or "
            "'interface:NAME'");
      bind = "127.0.0.1";
    }
  } else {
    worker = vars.requiredInt("RANK", "this worker's ranks", 0);
    workers = vars.requiredInt("WORLD_SIZE", "the world size", 1);
    local = vars.requiredInt("LOCAL_RANK", "this worker's port", 0);
    if (worker >= workers)
      throw RuntimeError("RANK=" + std::to_string(worker) +
                         " is not below WORLD_SIZE=" + std::to_string(workers));
    if (std::optional<std::string> localWorld =
            vars.optional("LOCAL_WORLD_SIZE")) {
      tasksOnNode = parseBounded(*localWorld, "LOCAL_WORLD_SIZE", 1);
      if (local >= tasksOnNode)
        throw RuntimeError("LOCAL_RANK=" + std::to_string(local) +
                           " is not below LOCAL_WORLD_SIZE=" + *localWorld);
      if (tasksOnNode > workers)
        throw RuntimeError("LOCAL_WORLD_SIZE=" + *localWorld +
                           " exceeds WORLD_SIZE=" + std::to_string(workers));
    }
    // MASTER_ADDR and MASTER_PORT are needed only for what the flags leave
    // open: the bind address and the base port.
    if (basePort == 0 && !request.listenGiven) {
      int masterPort = parseBounded(
          vars.required("MASTER_PORT", "the workers' ports (or give --port)"),
          "MASTER_PORT", 1, 65535);
      basePort = masterPort + 1;
    }
    if (bind.empty() && !request.listenGiven) {
      std::string masterAddress = vars.required(
          "MASTER_ADDR", "the address to bind (or give --bind-address)");
      bind = localAddressToward(masterAddress, "MASTER_ADDR");
      bool multiNode = tasksOnNode > 0 && tasksOnNode < workers;
      if (multiNode && isLoopbackAddress(bind))
        throw RuntimeError(
            "MASTER_ADDR=" + masterAddress +
            " is this host, but WORLD_SIZE=" + std::to_string(workers) +
            " spans more hosts than LOCAL_WORLD_SIZE=" +
            std::to_string(tasksOnNode) +
            ": workers on other hosts cannot reach loopback; give "
            "--bind-address (or $DTORCH_BIND_ADDRESS)");
    }
  }
  int perWorker = request.ranksPerWorker > 0 ? request.ranksPerWorker : 1;
  if (static_cast<long long>(workers) * perWorker > (1 << 20))
    throw RuntimeError("the world of " + std::to_string(workers) +
                       " workers of " + std::to_string(perWorker) +
                       " ranks is too large");
  int port = basePort + local;
  if (!request.listenGiven && port > 65535)
    throw RuntimeError("the listen port " + std::to_string(basePort) + " + " +
                       (launcher == "slurm" ? "SLURM_LOCALID" : "LOCAL_RANK") +
                       " " + std::to_string(local) + " exceeds 65535");
  placement.firstRank = worker * perWorker;
  placement.numRanks = perWorker;
  placement.worldSize = workers * perWorker;
  placement.ranksOnHost = tasksOnNode > 0 ? tasksOnNode * perWorker : 0;
  if (!request.listenGiven) {
    placement.bindAddress = bind;
    placement.listen = "tcp://" + bind + ":" + std::to_string(port);
  }
  placement.sources = std::move(vars.sources);
  return placement;
}

namespace {

// tcp://HOST:PORT from "HOST:PORT" or "tcp://HOST:PORT"; `what` names the
// source in errors.
std::string controllerEndpoint(const std::string &text,
                               const std::string &what) {
  const std::string scheme = "tcp://";
  std::string rest = text.compare(0, scheme.size(), scheme) == 0
                         ? text.substr(scheme.size())
                         : text;
  size_t colon = rest.rfind(':');
  std::string host = colon == std::string::npos ? "" : rest.substr(0, colon);
  std::string port = colon == std::string::npos ? "" : rest.substr(colon + 1);
  bool digits = !port.empty() && port.size() <= 5 &&
                port.find_first_not_of("0123456789") == std::string::npos;
  if (rest.find("://") != std::string::npos || host.empty() || !digits ||
      std::stoi(port) < 1 || std::stoi(port) > 65535)
    throw RuntimeError(what + "='" + text +
                       "' is not the controller's HOST:PORT (a TCP port "
                       "from 1 to 65535)");
  return scheme + host + ":" + port;
}

} // namespace

std::optional<std::string>
dialInControllerAddress(const std::string &controllerFlag, bool dialInFlag,
                        const EnvironmentLookup &env) {
  if (!controllerFlag.empty())
    return controllerEndpoint(controllerFlag, "--controller");
  std::optional<std::string> dialIn = env("DTORCH_DIAL_IN");
  std::optional<std::string> controller = env("DTORCH_CONTROLLER");
  bool envOff = dialIn && *dialIn == "0";
  if (!dialInFlag && (envOff || (!dialIn && !controller)))
    return std::nullopt;
  if (controller)
    return controllerEndpoint(*controller, "DTORCH_CONTROLLER");
  std::optional<std::string> address = env("MASTER_ADDR");
  std::optional<std::string> port = env("MASTER_PORT");
  if (!address || !port)
    throw RuntimeError(
        std::string(!address ? "MASTER_ADDR" : "MASTER_PORT") +
        " is not set: a dialing worker (--dial-in or DTORCH_DIAL_IN) "
        "connects to MASTER_ADDR:MASTER_PORT (or give --controller "
        "HOST:PORT or DTORCH_CONTROLLER)");
  return controllerEndpoint(*address + ":" + *port, "MASTER_ADDR:MASTER_PORT");
}

std::string controllerHostOf(const std::string &endpoint) {
  return endpointHost(endpoint);
}

std::string workerHostLabel(const std::string &reportedHost,
                            const std::string &dialedAddress) {
  std::string dialed = endpointHost(dialedAddress);
  if (dialed.empty() || isLoopbackAddress(dialed) || dialed == reportedHost ||
      dialed.compare(0, reportedHost.size() + 1, reportedHost + ".") == 0)
    return reportedHost;
  return reportedHost + "@" + dialed;
}

} // namespace dtorch::rt
