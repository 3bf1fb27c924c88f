// Where a dtorch-worker process sits in the world when a launcher started
// it: its ranks, the world size, the ranks on its host and the address it
// listens on, derived from the variables Slurm (`srun dtorch-worker`) or a
// torchrun-style launcher sets. Explicit command-line flags win over what
// the environment says (parseWorkerArgs applies that); a variable that is
// missing, malformed or contradicts another makes the worker fail at start
// with an error naming it. docs/guide/multi-host.md is the user's view.
//
// Slurm (--launcher slurm, or auto with SLURM_PROCID set):
//   SLURM_PROCID    this task's index among all tasks  -> worker index W
//   SLURM_NTASKS    number of tasks                    -> worker count N
//   SLURM_LOCALID   this task's index on its node      -> port offset L
//   SLURM_NODEID    this task's node index             (checked < nodes)
//   SLURM_NNODES / SLURM_JOB_NUM_NODES, else the hosts of
//   SLURM_JOB_NODELIST                                 -> node count
//   SLURM_NTASKS_PER_NODE, else SLURM_TASKS_PER_NODE at this node
//                                                      -> tasks on the node T
// torchrun (--launcher torchrun, or auto with RANK and WORLD_SIZE set):
//   RANK -> W, WORLD_SIZE -> N, LOCAL_RANK -> L, LOCAL_WORLD_SIZE -> T,
//   MASTER_ADDR: the controller's host; without an explicit bind address
//     the worker binds the local address its route to MASTER_ADDR leaves
//     from (loopback when MASTER_ADDR is this host; needed only then),
//   MASTER_PORT: the default base port is MASTER_PORT + 1 (needed only
//     without --port / $DTORCH_WORKER_PORT).
// Either way, with R = --ranks-per-worker (default 1): ranks
// [W*R, W*R+R), world size N*R, ranks on host T*R, and it listens on
// tcp://BIND:(BASE + L) (BASE: --port, $DTORCH_WORKER_PORT, else 29500 /
// MASTER_PORT + 1). A worker that dials in (dialInControllerAddress below)
// takes only its ranks, world size and ranks on host from a launcher: it
// listens nowhere, and with --dial-in MASTER_ADDR:MASTER_PORT is the
// controller it connects to (torchrun's meaning).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dtorch::rt {

/// Reads one environment variable; nullopt when it is not set.
using EnvironmentLookup =
    std::function<std::optional<std::string>(const std::string &name)>;

/// The process environment (getenv); empty values count as unset.
EnvironmentLookup processEnvironment();

/// What the command line said explicitly about the launch (empty / 0: not
/// given; parseWorkerArgs fills it, then its explicit flags win over the
/// result).
struct LaunchRequest {
  std::string launcher;    // --launcher: auto (default), slurm, torchrun, none
  int ranksPerWorker = 0;  // --ranks-per-worker
  int basePort = 0;        // --port
  std::string bindAddress; // --bind-address (already resolved or a spec)
  // --listen was given: no address or port is derived (nor MASTER_ADDR,
  // MASTER_PORT read).
  bool listenGiven = false;
};

/// A worker's place in the world as a launcher's variables give it.
struct LaunchPlacement {
  std::string launcher; // "slurm" or "torchrun"
  int firstRank = 0;
  int numRanks = 1;
  int worldSize = 1;
  int ranksOnHost = 0;
  int nodes = 0;           // hosts of the job (0: unknown)
  std::string listen;      // tcp://ADDRESS:PORT (empty with listenGiven)
  std::string bindAddress; // the numeric address of `listen`
  /// The variables it was derived from, "NAME=value" each, for the start-up
  /// line.
  std::vector<std::string> sources;
};

/// The placement the launcher's variables give, or nullopt when no
/// launcher is chosen (--launcher none, or auto without its variables).
/// Throws RuntimeError naming the variable on a missing, malformed or
/// contradicting value.
std::optional<LaunchPlacement>
placementFromLauncher(const LaunchRequest &request,
                      const EnvironmentLookup &env);

/// The numeric IPv4 address a bind address spec names: a literal address,
/// a name resolved by the resolver (first IPv4 address), `hostname` (this
/// host's name, resolved), or `interface:NAME` (that interface's IPv4
/// address). `what` names the setting in errors.
std::string resolveBindAddress(const std::string &spec,
                               const std::string &what);

/// The local IPv4 address this host would send from to reach `host`
/// (a UDP socket connected to it; nothing is sent).
std::string localAddressToward(const std::string &host,
                               const std::string &what);

/// Expands a Slurm host list ("node[01-03,7],gpu-a") into host names.
std::vector<std::string> expandSlurmHostList(const std::string &list,
                                             const std::string &what);

/// Tasks per node of a Slurm SLURM_TASKS_PER_NODE value ("2(x3),1"), one
/// entry per node.
std::vector<int> expandSlurmTasksPerNode(const std::string &value,
                                         const std::string &what);

/// The controller a dialing worker connects to (tcp://HOST:PORT), or nullopt
/// when the worker does not dial in. In order: `controllerFlag`
/// (--controller HOST:PORT); else, when `dialInFlag` (--dial-in),
/// $DTORCH_DIAL_IN is set and not "0", or $DTORCH_CONTROLLER is set (and
/// $DTORCH_DIAL_IN is not "0"): $DTORCH_CONTROLLER, else
/// MASTER_ADDR:MASTER_PORT (torchrun's meaning: the address every worker
/// connects to). Throws RuntimeError naming the flag or variable that is
/// missing or malformed.
std::optional<std::string>
dialInControllerAddress(const std::string &controllerFlag, bool dialInFlag,
                        const EnvironmentLookup &env);

/// The host of a tcp://HOST:PORT endpoint ("" for another form).
std::string controllerHostOf(const std::string &endpoint);

/// How the controller names a worker started by hand in errors: the host
/// name it reported, and the address the controller dialed when that says
/// more (not loopback, not the same name): "node-b" or "node-b@10.0.0.5".
std::string workerHostLabel(const std::string &reportedHost,
                            const std::string &dialedAddress);

} // namespace dtorch::rt
