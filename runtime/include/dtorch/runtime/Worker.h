// The dtorch-worker process: one process hosting a block of ranks, each a
// thread with its RankState (RankState.h: tensors, uploaded programs,
// poisoned handles), running what the controller sends in arrival order.
// Collectives among the ranks of this process go through shared memory
// (SharedMemoryHub); groups whose members all run on this host (same host
// identity, published in the controller's store) through shared memory
// between processes (HostSharedMemoryCollectives.h; $DTORCH_HOST_SHM=0 turns
// it off); the others through Gloo (whose rendezvous also goes through the
// controller).
#pragma once

#include "dtorch/runtime/Transport.h"
#include "dtorch/runtime/WorkerLaunch.h"

#include <chrono>
#include <string>

namespace dtorch::rt {

struct WorkerOptions {
  // Exactly one of: connect to a controller (embedded mode, DEALER) or listen
  // for one (manual mode, ROUTER bound; the first peer that authenticates
  // becomes the controller).
  std::string connect;
  std::string listen;
  // --link-fd N (with --connect; the embedded cluster passes it): every
  // message to and from the controller goes over this inherited stream
  // socket (StreamLink.h) instead of a ZeroMQ connection to `connect`.
  int linkFd = -1;
  // Dial-in (--controller HOST:PORT, --dial-in with MASTER_ADDR and
  // MASTER_PORT, or $DTORCH_CONTROLLER): `connect` is the controller a user
  // started with dtorch.init(listen=...); a launcher's variables may place
  // the worker, and before the controller answers the worker waits up to
  // `controllerWait` (it may start before the controller, or wait for the
  // rest of the world to dial in).
  bool dialIn = false;
  std::chrono::milliseconds controllerWait{600000};
  // The shared secret; read from --token-file, --token-fd or $DTORCH_TOKEN
  // (--token on the command line still works, with a warning: `ps` shows
  // it).
  std::string token;
  bool tokenOnCommandLine = false;
  // CURVE (Security.h): this worker's secret key and the controller's public
  // key (Z85). When set, the worker is the CURVE server of its --listen
  // socket and accepts only that controller key (the client of --connect).
  std::string curveSecretKey;
  std::string curveControllerPublicKey;
  // --generate-curve-keypair PREFIX: write PREFIX.key and PREFIX.pub, exit.
  std::string generateCurveKeyPairPrefix;
  int firstRank = 0;
  int numRanks = 1;
  int worldSize = 1;
  // Ranks on this host, all processes together (the embedded cluster passes
  // its world size); 0: this process's ranks. Each rank's BLAS gets
  // max(1, cores / ranksOnHost) threads (Blas.h).
  int ranksOnHost = 0;
  // Address the Gloo TCP device binds (--collective-address, alias
  // --gloo-host, else $DTORCH_COLLECTIVE_ADDRESS, else the bind address
  // (--bind-address, $DTORCH_BIND_ADDRESS, a launcher's) or the specific
  // IPv4 address of --listen): loopback unless one of them is set.
  std::string glooHost = "127.0.0.1";
  // The host identity that groups ranks for shared memory between
  // processes (--host-id, else $DTORCH_HOST_ID; empty: localHostIdentity(),
  // which network namespaces also tell apart).
  std::string hostId;
  // How a launcher's variables placed this worker (WorkerLaunch.h), for the
  // start-up line; empty when started by hand.
  std::string launchDescription;
  std::chrono::milliseconds collectiveTimeout{30000};
  // Exit when no message arrived from the controller for this long (after a
  // controller authenticated; in connect mode also before).
  std::chrono::milliseconds controllerTimeout{3000};
  // The rendezvous generation of its communicators: every key of the Gloo
  // and host shared-memory rendezvous carries it. A process started by a
  // restart of the cluster gets the survivors' new generation.
  uint64_t generation = 0;
  TransportOptions transport;
};

// Parses dtorch-worker's command line (--connect ADDR | --listen ADDR,
// --token-file PATH | --token-fd N | $DTORCH_TOKEN | --token T, --ranks a-b,
// --world-size N, --collective-timeout-ms MS, --controller-timeout-ms MS,
// --heartbeat-ms MS (the interval of its heartbeats to the controller),
// --max-message-bytes B, --collective-address H (alias --gloo-host),
// --ranks-on-host N, --curve-secret-key-file F,
// --curve-controller-public-key-file F; or only
// --generate-curve-keypair PREFIX). A listening worker may instead take its
// ranks, world size and address from a launcher (WorkerLaunch.h:
// --launcher auto|slurm|torchrun|none, --ranks-per-worker N, --port P,
// --bind-address A, and $DTORCH_LAUNCHER, $DTORCH_RANKS_PER_WORKER,
// $DTORCH_WORKER_PORT, $DTORCH_BIND_ADDRESS); explicit flags win.
// --host-id ID (else $DTORCH_HOST_ID) sets the shared-memory host identity.
// A dialing worker (--controller HOST:PORT, else --dial-in or
// $DTORCH_DIAL_IN=1 with $DTORCH_CONTROLLER or MASTER_ADDR:MASTER_PORT;
// $DTORCH_CONTROLLER alone also selects it) connects to the controller and
// takes its ranks from the flags or a launcher; --controller-wait-ms MS
// (else $DTORCH_CONTROLLER_WAIT_MS, default 600000) bounds its wait for the
// controller's answer.
// Throws RuntimeError with a usage message on errors.
WorkerOptions parseWorkerArgs(int argc, char **argv);
// The same, reading the environment through `env` (tests).
WorkerOptions parseWorkerArgs(int argc, char **argv,
                              const EnvironmentLookup &env);

// Runs the worker until the controller sends Shutdown or goes silent.
// Returns the process exit code.
int runWorker(const WorkerOptions &options);

} // namespace dtorch::rt
