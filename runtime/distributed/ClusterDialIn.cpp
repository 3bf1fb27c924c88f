//===- ClusterDialIn.cpp - workers that dial in to the controller ---------===//
//
// Dial-in mode of Cluster (ClusterOptions::listenAddress): the controller's
// ROUTER socket is bound, each dtorch-worker connects (DEALER) and sends its
// Hello first; DialInAdmission decides. An admitted worker is answered only
// once the world is complete, with the controller's Hello, so that every
// worker starts its collectives' rendezvous with the whole world known.
// A refusal fails the start at once (the refused worker and the ones
// admitted so far are told why); so does the admission deadline, naming the
// ranks that never arrived. After the start, a worker whose connection
// closes is dead at once (the descriptor of its connection, ZMQ_SRCFD, is
// matched with the monitor's disconnect events), a silent one after the
// peer timeout, as for the other modes.
//
//===----------------------------------------------------------------------===//

#include "ClusterImpl.h"

namespace dtorch::rt {

namespace {

std::string normalizedEndpoint(const std::string &address) {
  if (address.find("://") != std::string::npos)
    return address;
  return "tcp://" + address;
}

} // namespace

void Cluster::Impl::startDialIn() {
  std::string address = normalizedEndpoint(options.listenAddress);
  if (!options.curveSecretKey.empty()) {
    if (options.curveWorkerPublicKeys.empty())
      throw RuntimeError("CURVE with workers that dial in needs the "
                         "workers' public keys");
    // Before the bind: the handler must exist when the first client comes.
    dialInZap = std::make_unique<ZapAuthenticator>(
        *context, options.curveWorkerPublicKeys);
    makeCurveServer(*socket, options.curveSecretKey);
  }
  dialInMonitor = std::make_unique<HandshakeMonitor>(
      *context, *socket, "dial-in", /*watchDisconnects=*/true);
  try {
    socket->bind(address);
  } catch (const zmq::error_t &error) {
    throw RuntimeError(
        "cannot listen for workers on " + address + ": " + error.what() +
        (error.num() == EADDRINUSE ? " (another process holds this port)"
                                   : ""));
  }
  std::lock_guard<std::mutex> lock(mutex);
  dialInEndpoint = socket->get(zmq::sockopt::last_endpoint);
  dialInStarted = Clock::now();
}

void Cluster::Impl::failDialInStart(const std::string &reason,
                                    const std::string &peer, int rank,
                                    const std::string &host) {
  if (!startupError.empty())
    return;
  startupError = reason;
  startupErrorRank = std::max(0, rank);
  startupErrorHost = host;
  if (!peer.empty())
    replyError(peer, 0, reason);
  for (const DialInWorker &worker : admission->admitted())
    if (worker.peer != peer)
      replyError(worker.peer, 0, "the controller's start failed: " + reason);
  changed.notify_all();
}

void Cluster::Impl::onDialInHello(const std::string &id,
                                  const wire::Hello &hello,
                                  const zmq::message_t &payload) {
  zmq_msg_t *message = const_cast<zmq_msg_t *>(payload.handle());
  const char *peerAddress = zmq_msg_gets(message, "Peer-Address");
  int fd = zmq_msg_get(message, ZMQ_SRCFD);
  std::lock_guard<std::mutex> lock(mutex);
  // The events of connections that closed before this one was accepted
  // come first: a descriptor they name may be this connection's now, and
  // must not be blamed on it.
  drainDialInEvents();
  if (ready || !startupError.empty()) {
    replyError(id, 0,
               "handshake refused: " +
                   std::string(ready ? "the world of " +
                                           std::to_string(worldSize) +
                                           " ranks is complete"
                                     : "the controller's start failed"));
    return;
  }
  // A worker says Hello again when its connection was made again
  // (DialInReconnect.h); on a connection that did not close, its Hello may
  // arrive twice: the second changes nothing.
  if (admission->holds(id))
    return;
  DialInAdmission::Decision decision =
      admission->offer(id, peerAddress ? peerAddress : "", hello);
  if (!decision.admitted) {
    failDialInStart(
        decision.reason, id, hello.first_rank(),
        workerHostLabel(hello.host(), peerAddress
                                          ? std::string("tcp://") + peerAddress
                                          : std::string()));
    return;
  }
  if (fd >= 0)
    dialInFds[id] = fd;
  if (!admission->complete())
    return;
  // The world is complete: the workers in rank order, each answered.
  std::vector<DialInWorker> arrived = admission->admitted();
  std::sort(arrived.begin(), arrived.end(),
            [](const DialInWorker &a, const DialInWorker &b) {
              return a.firstRank < b.firstRank;
            });
  worldSize = admission->worldSize();
  rankToWorker.assign(static_cast<size_t>(worldSize), 0);
  workers.clear();
  std::string reply = encodeEnvelope([&] {
    wire::Envelope e = envelope();
    *e.mutable_hello() = makeHello(wire::ROLE_CONTROLLER, token);
    return e;
  }());
  for (const DialInWorker &arrivedWorker : arrived) {
    WorkerInfo w;
    w.id = arrivedWorker.peer;
    w.address = arrivedWorker.peerAddress.empty()
                    ? "?"
                    : "tcp://" + arrivedWorker.peerAddress;
    w.host = workerHostLabel(arrivedWorker.host, w.address);
    w.pid = arrivedWorker.pid;
    w.firstRank = arrivedWorker.firstRank;
    w.numRanks = arrivedWorker.numRanks;
    w.cudaDevices = arrivedWorker.cudaDevices;
    w.cudaUnavailable = arrivedWorker.cudaUnavailable;
    w.authenticated = true;
    w.lastHeard = Clock::now();
    for (int r = 0; r < w.numRanks; ++r)
      rankToWorker[static_cast<size_t>(w.firstRank + r)] =
          static_cast<int>(workers.size());
    workers.push_back(std::move(w));
    sendTo(arrivedWorker.peer, reply);
  }
  ready = true;
  changed.notify_all();
}

void Cluster::Impl::drainDialInEvents() {
  if (!dialInMonitor)
    return;
  {
    for (const HandshakeMonitor::Failure &event : dialInMonitor->poll()) {
      if (!event.disconnected) {
        // A CURVE handshake failed (a worker key this controller does not
        // admit, or a mechanism mismatch): no Hello will come from it.
        // Anything else (a connection that closed or spoke garbage during
        // the handshake: a port scan, a health check) is not a worker.
        bool curveMistake =
            event.event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ||
            (event.event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
             (event.value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH ||
              event.value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC));
        if (!curveMistake)
          continue;
        // The monitor words authentication failures from the client's
        // side; here the ZAP handler of this (server) side refused.
        std::string why =
            event.reason.find("refused this side's CURVE key") !=
                    std::string::npos
                ? "its CURVE public key is not one of the workers' keys "
                  "this controller admits (" +
                      event.reason + ")"
                : event.reason;
        if (!ready)
          failDialInStart("a worker's connection to " + dialInEndpoint +
                              " failed its handshake: " + why,
                          "", 0, "?");
        continue;
      }
      int fd = static_cast<int>(event.value);
      std::string peer;
      for (auto it = dialInFds.begin(); it != dialInFds.end(); ++it)
        if (it->second == fd) {
          peer = it->first;
          dialInFds.erase(it);
          break;
        }
      if (peer.empty())
        continue;
      if (!ready) {
        // Before the start, a worker that left frees its ranks: a
        // restarted one may take them.
        admission->withdraw(peer);
        continue;
      }
      for (size_t i = 0; i < workers.size(); ++i)
        if (workers[i].id == peer && !workers[i].dead)
          markDead(i, "closed its connection (the process exited or the "
                      "network failed)");
    }
  }
}

void Cluster::Impl::checkDialIn() {
  if (dialInZap)
    dialInZap->handle();
  drainDialInEvents();
  if (!ready && startupError.empty() &&
      Clock::now() - dialInStarted > options.admissionTimeout) {
    std::vector<int> missing = admission->missingRanks();
    // Not "timed out": that names a collective's deadline (CollectiveTimeout
    // in Python).
    failDialInStart("the admission ended after " +
                        std::to_string(options.admissionTimeout.count()) +
                        " ms waiting for workers to dial in to " +
                        dialInEndpoint + ": " + admission->describeMissing(),
                    "", missing.empty() ? 0 : missing.front(), "?");
  }
}

} // namespace dtorch::rt
