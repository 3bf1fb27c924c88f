#include "ClusterImpl.h"

#include "dtorch/runtime/RankCpuPlacement.h"

#include <pthread.h>

namespace dtorch::rt {

WorkerError::WorkerError(int rank, std::string host, const std::string &what)
    : RuntimeError("rank " + std::to_string(rank) + " (host " + host +
                   "): " + what),
      rank_(rank), host_(std::move(host)) {}

void Cluster::Impl::onHello(const std::string &id, const wire::Hello &hello) {
  std::string reason = checkHello(hello, token, wire::ROLE_WORKER);
  std::unique_lock<std::mutex> lock(mutex);
  size_t index = workers.size();
  for (size_t i = 0; i < workers.size(); ++i) {
    const WorkerInfo &w = workers[i];
    if (w.authenticated)
      continue;
    bool match = embedded ? w.firstRank == hello.first_rank() : w.id == id;
    if (match)
      index = i;
  }
  if (reason.empty() && index == workers.size())
    reason = "unexpected worker";
  if (reason.empty() && embedded &&
      (hello.num_ranks() != workers[index].numRanks ||
       hello.world_size() != worldSize))
    reason = "worker reports ranks/world that this cluster did not start";
  if (!reason.empty()) {
    replyError(id, 0, "handshake refused: " + reason);
    if (index < workers.size() && startupError.empty()) {
      startupError = "handshake refused: " + reason;
      startupErrorRank = workers[index].firstRank;
    }
    changed.notify_all();
    return;
  }
  WorkerInfo &w = workers[index];
  w.id = id;
  w.authenticated = true;
  // A worker started by hand is named with the address it was dialed at
  // when that says more than its host name (hosts that share a name, as
  // network namespaces of one machine do).
  w.host = embedded ? hello.host() : workerHostLabel(hello.host(), w.address);
  w.pid = hello.pid();
  w.firstRank = hello.first_rank();
  w.numRanks = hello.num_ranks();
  w.cudaDevices = hello.cuda_devices();
  w.cudaUnavailable = hello.cuda_unavailable();
  w.lastHeard = Clock::now();
  if (embedded) {
    wire::Envelope reply = envelope();
    *reply.mutable_hello() = makeHello(wire::ROLE_CONTROLLER, token);
    sendTo(id, encodeEnvelope(reply));
  }
  bool all = true;
  for (auto &other : workers)
    all = all && other.authenticated;
  if (all && !embedded) {
    // Manual mode: the world is what the workers report, in address order.
    int next = 0;
    for (auto &other : workers) {
      if (other.firstRank != next && startupError.empty())
        startupError =
            "workers' rank blocks are not contiguous in address order";
      next = other.firstRank + other.numRanks;
    }
    worldSize = next;
    rankToWorker.assign(static_cast<size_t>(worldSize), 0);
    for (size_t i = 0; i < workers.size(); ++i)
      for (int r = 0; r < workers[i].numRanks; ++r)
        if (workers[i].firstRank + r < worldSize)
          rankToWorker[workers[i].firstRank + r] = static_cast<int>(i);
  }
  if (all)
    ready = true;
  changed.notify_all();
}

void Cluster::Impl::onWorkerMessage(size_t index, wire::Envelope &e) {
  uint64_t requestId = e.request_id();
  switch (e.body_case()) {
  case wire::Envelope::kFetchReply: {
    std::lock_guard<std::mutex> lock(mutex);
    const auto &reply = e.fetch_reply();
    int errRank = reply.rank();
    std::string errHost = workers[index].host,
                errMessage = reply.error().message();
    if (!reply.ok())
      blameDeadPeer(errRank, errHost,
                    errMessage); // before `it`: may fail fetches
    std::optional<std::promise<Tensor>> promise = fetches.take(requestId);
    if (!promise) {
      // Failed already with another piece of the same value: that error
      // reported this rank's failure too (its report came before this).
      if (!reply.ok())
        errors.clear();
      return;
    }
    try {
      if (!reply.ok()) {
        // The user learns of the failure here; the same failure queued by
        // the other ranks would only repeat it at the next synchronize.
        errors.clear();
        // The value is lost: its other pieces' fetches fail now too, so a
        // slow or stuck peer does not hold the error back.
        WorkerError error(errRank, errHost, errMessage);
        fetches.failWhere(
            [&](int,
                std::optional<uint64_t> handle) -> std::optional<WorkerError> {
              if (handle && *handle == reply.handle())
                return error;
              return std::nullopt;
            });
        throw error;
      }
      promise->set_value(tensorFromWire(reply.value()));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
    return;
  }
  case wire::Envelope::kMemoryStatsReply: {
    std::lock_guard<std::mutex> lock(mutex);
    if (std::optional<std::promise<MemoryStats>> promise =
            statsRequests.take(requestId))
      promise->set_value(memoryStatsFromWire(e.memory_stats_reply()));
    return;
  }
  case wire::Envelope::kTraceReply: {
    std::lock_guard<std::mutex> lock(mutex);
    if (std::optional<std::promise<TraceChunk>> promise =
            traceRequests.take(requestId))
      promise->set_value(traceChunkFromWire(e.trace_reply()));
    return;
  }
  case wire::Envelope::kResetReply: {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = resetRequests.find(requestId);
    if (it != resetRequests.end() && it->second == index &&
        e.reset_reply().generation() == generation) {
      resetWaiting.erase(index);
      resetRequests.erase(it);
    }
    changed.notify_all();
    return;
  }
  case wire::Envelope::kCheckpointReply: {
    std::lock_guard<std::mutex> lock(mutex);
    if (std::optional<std::promise<wire::CheckpointReply>> promise =
            checkpointRequests.take(requestId))
      promise->set_value(e.checkpoint_reply());
    return;
  }
  case wire::Envelope::kSyncReply: {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = syncs.find(requestId);
    if (it != syncs.end())
      it->second->waiting.erase(index);
    changed.notify_all();
    return;
  }
  case wire::Envelope::kError: {
    std::lock_guard<std::mutex> lock(mutex);
    const auto &error = e.error();
    int rank = error.rank() >= 0 ? error.rank() : workers[index].firstRank;
    std::string host =
        workers[index].host.empty() ? error.host() : workers[index].host;
    std::string message = error.message();
    blameDeadPeer(rank, host, message);
    if (requestId) {
      if (auto fetch = fetches.take(requestId)) {
        errors.clear(); // reported now, as above
        fetch->set_exception(
            std::make_exception_ptr(WorkerError(rank, host, message)));
        return;
      }
      if (auto stats = statsRequests.take(requestId)) {
        stats->set_exception(
            std::make_exception_ptr(WorkerError(rank, host, message)));
        return;
      }
      if (auto trace = traceRequests.take(requestId)) {
        trace->set_exception(
            std::make_exception_ptr(WorkerError(rank, host, message)));
        return;
      }
      if (auto checkpoint = checkpointRequests.take(requestId)) {
        checkpoint->set_exception(
            std::make_exception_ptr(WorkerError(rank, host, message)));
        return;
      }
    }
    errors.push_back(AsyncError{rank, host, message});
    changed.notify_all();
    return;
  }
  case wire::Envelope::kKvSet: {
    const std::string &key = e.kv_set().key();
    if (std::string refused = checkStoreSet(key, e.kv_set().value());
        !refused.empty()) {
      replyError(workers[index].id, requestId, refused);
      return;
    }
    std::string &slot = store[key];
    storeBytes += key.size() + e.kv_set().value().size() - slot.size();
    slot = e.kv_set().value();
    auto parked = parkedGets.find(key);
    if (parked == parkedGets.end())
      return;
    for (auto &[peer, request] : parked->second) {
      wire::Envelope reply = envelope();
      reply.set_request_id(request);
      reply.mutable_kv_reply()->set_key(key);
      reply.mutable_kv_reply()->set_value(store[key]);
      sendTo(peer, encodeEnvelope(reply));
    }
    parkedGets.erase(parked);
    return;
  }
  case wire::Envelope::kKvGet: {
    const std::string &key = e.kv_get().key();
    auto found = store.find(key);
    std::string peer = workers[index].id;
    if (key.size() > kMaxStoreKeyBytes ||
        (found == store.end() && parkedGets.size() >= kMaxStoreKeys)) {
      replyError(peer, requestId,
                 "store request refused: key too long or "
                 "too many waiting keys");
      return;
    }
    if (found == store.end()) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!storeLost.empty())
        replyLostKey(peer, requestId, key);
      else
        parkedGets[key].emplace_back(peer, requestId);
      return;
    }
    wire::Envelope reply = envelope();
    reply.set_request_id(requestId);
    reply.mutable_kv_reply()->set_key(key);
    reply.mutable_kv_reply()->set_value(found->second);
    sendTo(peer, encodeEnvelope(reply));
    return;
  }
  default:
    return; // heartbeats, repeated hellos
  }
}

void Cluster::Impl::onMessage(const std::string &id,
                              const zmq::message_t &payload) {
  wire::Envelope e;
  if (!decodeEnvelope(payload.data(), payload.size(), e)) {
    replyError(id, 0, "malformed message");
    return;
  }
  size_t index = workers.size();
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (size_t i = 0; i < workers.size(); ++i)
      if (workers[i].authenticated && workers[i].id == id)
        index = i;
    if (index < workers.size())
      workers[index].lastHeard = Clock::now();
  }
  if (index == workers.size()) {
    if (e.body_case() == wire::Envelope::kHello)
      return dialIn ? onDialInHello(id, e.hello(), payload)
                    : onHello(id, e.hello());
    if (e.body_case() == wire::Envelope::kError) {
      // A worker refused our Hello (manual mode).
      std::lock_guard<std::mutex> lock(mutex);
      for (auto &w : workers)
        if (w.id == id && startupError.empty()) {
          startupError = e.error().message();
          startupErrorRank = std::max(0, w.firstRank);
        }
      changed.notify_all();
      return;
    }
    replyError(id, e.request_id(),
               "not authenticated: the first message must be a Hello");
    return;
  }
  onWorkerMessage(index, e);
}

void Cluster::Impl::checkHandshakes() {
  if (!handshakes)
    return;
  std::lock_guard<std::mutex> lock(mutex);
  drainHandshakeEvents();
}

void Cluster::Impl::drainHandshakeEvents() {
  std::vector<HandshakeMonitor::Failure> failures = handshakes->poll();
  if (failures.empty())
    return;
  for (const HandshakeMonitor::Failure &failure : failures) {
    if (failure.disconnected) {
      // A worker started by hand closed its connection: its process exited
      // (or the network failed). Without this, its death would be known
      // only after the peer timeout.
      for (size_t i = 0; i < workers.size(); ++i) {
        WorkerInfo &w = workers[i];
        if (w.authenticated && !w.dead && w.address == failure.endpoint)
          markDead(i, "closed its connection (the process exited or the "
                      "network failed)");
      }
      continue;
    }
    if (ready || !startupError.empty())
      continue;
    // The worker connected to at that endpoint; else the first one still
    // waiting (an endpoint may be spelled differently once resolved).
    const WorkerInfo *failed = nullptr;
    for (const WorkerInfo &w : workers)
      if (!w.authenticated && w.address == failure.endpoint)
        failed = &w;
    for (const WorkerInfo &w : workers)
      if (!failed && !w.authenticated)
        failed = &w;
    if (!failed)
      continue;
    startupError = "the connection to the worker at " + failed->address +
                   " failed its handshake: " + failure.reason;
    startupErrorRank = std::max(0, failed->firstRank);
  }
  changed.notify_all();
}

void Cluster::Impl::stopWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto &w : workers)
      if (w.authenticated && !w.dead)
        sendTo(w.id, encodeEnvelope([] {
                 auto e = envelope();
                 e.mutable_shutdown();
                 return e;
               }()));
  }
  // Give them up to 1 s to leave on their own, then SIGKILL.
  auto until = Clock::now() + std::chrono::milliseconds(embedded ? 1000 : 100);
  while (Clock::now() < until) {
    bool running = false;
    for (auto &w : workers)
      if (w.child > 0) {
        if (detail::pollExit(w.child).empty())
          running = true;
        else
          w.child = -1;
      }
    if (!running && embedded)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (auto &w : workers)
    if (w.child > 0) {
      detail::killAndReap(w.child);
      w.child = -1;
    }
}

void Cluster::Impl::ioMain() {
  // Named for per-thread CPU accounting (bench/step_thread_cpu.py).
  pthread_setname_np(pthread_self(), "dtorch-io");
  auto started = Clock::now();
  // Held except while waiting in poll (direct sends, ClusterImpl.h).
  std::unique_lock<std::mutex> socketLock(socketMutex);
  try {
    context = std::make_unique<zmq::context_t>(1);
    socket =
        std::make_unique<zmq::socket_t>(*context, zmq::socket_type::router);
    TransportOptions transport;
    transport.heartbeatInterval = options.heartbeatInterval;
    transport.peerTimeout = options.peerTimeout;
    configureSocket(*socket, transport);
    {
      // The secret of the workers' collective data links: only workers that
      // authenticated can read it (GlooOptions::pairSecret).
      std::string secret = randomToken() + randomToken();
      storeBytes += secret.size();
      store[kCollectiveSecretKey] = std::move(secret);
    }
    if (dialIn) {
      startDialIn();
    } else if (embedded) {
      socket->bind("tcp://127.0.0.1:0");
      std::lock_guard<std::mutex> lock(mutex);
      endpoint = socket->get(zmq::sockopt::last_endpoint);
      workerExe = detail::findWorkerExecutable(options.workerExecutable);
      for (auto &w : workers)
        spawnWorker(w);
    } else {
      std::lock_guard<std::mutex> lock(mutex);
      handshakes =
          std::make_unique<HandshakeMonitor>(*context, *socket, "controller",
                                             /*watchDisconnects=*/true);
      const auto &keys = options.curveWorkerPublicKeys;
      if (!options.curveSecretKey.empty() && keys.size() != 1 &&
          keys.size() != workers.size())
        throw RuntimeError("CURVE needs one worker public key, or one per "
                           "worker address (" +
                           std::to_string(workers.size()) + "), got " +
                           std::to_string(keys.size()));
      for (size_t i = 0; i < workers.size(); ++i) {
        workers[i].id = "w" + std::to_string(i);
        socket->set(zmq::sockopt::connect_routing_id, workers[i].id);
        if (!options.curveSecretKey.empty())
          makeCurveClient(*socket, options.curveSecretKey,
                          keys.size() == 1 ? keys[0] : keys[i]);
        socket->connect(workers[i].address);
        wire::Envelope hello = envelope();
        *hello.mutable_hello() = makeHello(wire::ROLE_CONTROLLER, token);
        sendTo(workers[i].id, encodeEnvelope(hello));
      }
    }
  } catch (const std::exception &error) {
    std::lock_guard<std::mutex> lock(mutex);
    startupError = std::string("cluster setup failed: ") + error.what();
    startupErrorRank = 0;
    changed.notify_all();
  }

  auto lastBeat = Clock::now();
  uint64_t beats = 0;
  std::vector<std::pair<std::string, std::shared_ptr<StreamLink>>> links;
  std::vector<std::string> linkMessages;
  std::vector<zmq::pollitem_t> items; // reused every round
  while (socket) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (stopping)
        break;
    }
    // The workers' local links (each polled for reading, and for writing
    // while bytes wait), after the socket and the wake-up descriptor.
    links.clear();
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (const WorkerInfo &w : workers)
        if (w.link && !w.link->closed())
          links.emplace_back(w.linkId, w.link);
      if (directSend) {
        routes.resize(workers.size());
        for (size_t i = 0; i < workers.size(); ++i)
          routes[i] = workers[i].authenticated && !workers[i].dead
                          ? workers[i].id
                          : std::string();
      }
    }
    items.assign({{socket->handle(), 0, ZMQ_POLLIN, 0},
                  {nullptr, wakeFd, ZMQ_POLLIN, 0}});
    for (const auto &[id, link] : links)
      items.push_back({nullptr, link->fd(),
                       static_cast<short>(
                           ZMQ_POLLIN | (link->wantsWrite() ? ZMQ_POLLOUT : 0)),
                       0});
    if (directSend) {
      // Other threads send while this one waits: it polls the socket's
      // descriptor (edge-triggered, so only when nothing is ready to read)
      // without the socket, never the socket itself.
      if (!(socket->get(zmq::sockopt::events) & ZMQ_POLLIN)) {
        items[0].socket = nullptr;
        items[0].fd = socket->get(zmq::sockopt::fd);
        socketLock.unlock();
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(20));
        socketLock.lock();
      }
    } else {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(20));
    }
    for (size_t k = 0; k < links.size(); ++k) {
      const auto &[id, link] = links[k];
      if (items[2 + k].revents & ZMQ_POLLOUT)
        link->flush();
      linkMessages.clear();
      // A closed link (the process exited) is left to checkHealth, which
      // names how the process ended.
      link->receive(linkMessages);
      for (std::string &message : linkMessages)
        onMessage(id, owningMessage(std::move(message)));
    }
    while (true) {
      zmq::message_t idFrame;
      if (!socket->recv(idFrame, zmq::recv_flags::dontwait))
        break;
      std::vector<zmq::message_t> rest;
      bool more = idFrame.more();
      while (more) {
        zmq::message_t frame;
        if (!socket->recv(frame, zmq::recv_flags::none))
          break;
        more = frame.more();
        rest.push_back(std::move(frame));
      }
      std::string id = idFrame.to_string();
      if (isLinkId(id)) {
        // A connection that named itself like a local link (ZMQ_ROUTING_ID)
        // would speak as that worker: dropped unanswered (sendTo would
        // route an answer to the link).
        continue;
      }
      if (rest.size() != 1) {
        replyError(id, 0, "malformed message (expected one frame)");
        continue;
      }
      onMessage(id, rest[0]);
    }
    if (items[1].revents) {
      uint64_t value;
      ssize_t ignored = read(wakeFd, &value, sizeof(value));
      (void)ignored;
    }
    std::deque<std::pair<size_t, std::string>> pending;
    std::deque<std::pair<std::string, std::string>> pendingById;
    {
      std::lock_guard<std::mutex> lock(outboxMutex);
      pending.swap(outbox);
      pendingById.swap(outboxById);
    }
    for (auto &[id, payload] : pendingById)
      sendTo(id, payload);
    if (!pending.empty()) {
      std::lock_guard<std::mutex> lock(mutex);
      for (auto &[index, payload] : pending)
        if (!workers[index].dead)
          sendTo(workers[index].id, payload);
    }
    auto now = Clock::now();
    if (now - lastBeat >= options.heartbeatInterval) {
      lastBeat = now;
      wire::Envelope beat = envelope();
      beat.mutable_heartbeat()->set_sequence(++beats);
      std::string bytes = encodeEnvelope(beat);
      std::lock_guard<std::mutex> lock(mutex);
      for (auto &w : workers)
        if (w.authenticated && !w.dead)
          sendTo(w.id, bytes);
    }
    checkHealth(started);
    checkHandshakes();
    if (dialIn) {
      std::lock_guard<std::mutex> lock(mutex);
      checkDialIn();
    }
    ++ioRounds;
  }
  if (socket)
    stopWorkers();
  else {
    for (auto &w : workers)
      if (w.child > 0)
        detail::killAndReap(w.child);
  }
  links.clear();
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto &w : workers)
      dropLink(w);
  }
  handshakes.reset(); // before the context, which waits for its sockets
  stopDialIn();
  routes.clear();
  socket.reset();
  socketLock.unlock();
  context.reset();
}

// ---- Cluster
// -------------------------------------------------------------------

Cluster::Cluster(const ClusterOptions &options)
    : impl_(std::make_unique<Impl>()) {
  Impl &impl = *impl_;
  impl.options = options;
  impl.token = options.token.empty() ? randomToken() : options.token;
  impl.dialIn = !options.listenAddress.empty();
  impl.embedded = options.workerAddresses.empty() && !impl.dialIn;
  if (impl.dialIn) {
    if (!options.workerAddresses.empty())
      throw RuntimeError("ClusterOptions: give worker addresses or a listen "
                         "address, not both");
    if (options.token.empty())
      throw RuntimeError("ClusterOptions: workers that dial in need the "
                         "token they were given");
    if (options.worldSize < 0)
      throw RuntimeError("ClusterOptions: the world size must not be "
                         "negative");
    impl.admission =
        std::make_unique<DialInAdmission>(options.worldSize, options.token);
  } else if (impl.embedded) {
    if (options.worldSize < 1 || options.numProcesses < 1 ||
        options.numProcesses > options.worldSize)
      throw RuntimeError("ClusterOptions: need 1 <= numProcesses <= worldSize");
    // The workers it starts read the variable from this environment: a bad
    // value fails here, named, rather than as a worker's exit status.
    rankPinningEnabled();
    impl.worldSize = options.worldSize;
    impl.rankToWorker.assign(static_cast<size_t>(options.worldSize), 0);
    int first = 0;
    for (int p = 0; p < options.numProcesses; ++p) {
      WorkerInfo w;
      w.firstRank = first;
      w.numRanks = options.worldSize / options.numProcesses +
                   (p < options.worldSize % options.numProcesses);
      for (int r = 0; r < w.numRanks; ++r)
        impl.rankToWorker[first + r] = p;
      first += w.numRanks;
      impl.workers.push_back(w);
    }
  } else {
    for (const auto &address : options.workerAddresses) {
      WorkerInfo w;
      w.address = address;
      impl.workers.push_back(w);
    }
  }
  impl.wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl.wakeFd < 0)
    throw RuntimeError("eventfd failed");
  impl.io = std::thread([&impl] { impl.ioMain(); });
  std::unique_lock<std::mutex> lock(impl.mutex);
  impl.changed.wait(lock,
                    [&] { return impl.ready || !impl.startupError.empty(); });
  if (!impl.startupError.empty()) {
    int rank = impl.startupErrorRank;
    std::string host =
        impl.startupErrorHost.empty() ? "?" : impl.startupErrorHost;
    for (auto &w : impl.workers)
      if (w.firstRank == rank && !w.host.empty())
        host = w.host;
    std::string message = impl.startupError;
    lock.unlock();
    shutdown();
    throw WorkerError(rank, host, "cluster start failed: " + message);
  }
}

Cluster::~Cluster() {
  try {
    shutdown();
  } catch (...) {
  }
}

int Cluster::worldSize() const { return impl_->worldSize; }

std::string Cluster::hostOf(int rank) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->workers[impl_->workerOfRank(rank)].host;
}

int Cluster::cudaDevicesOf(int rank, std::string &whyNone) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const WorkerInfo &w = impl_->workers[impl_->workerOfRank(rank)];
  whyNone = w.cudaDevices > 0 ? std::string() : w.cudaUnavailable;
  return w.cudaDevices;
}

void Cluster::uploadPrograms(uint64_t programId,
                             const std::vector<const wire::Program *> &programs,
                             const std::vector<int64_t> &meshRanks,
                             const std::string &deviceType,
                             const std::vector<int32_t> &deviceOrdinals) {
  if (programs.empty())
    throw RuntimeError("uploadPrograms: no program");
  bool onDevice = deviceType != "cpu" && !deviceType.empty();
  if (onDevice && deviceOrdinals.size() != meshRanks.size())
    throw RuntimeError(
        "uploadPrograms: " + std::to_string(deviceOrdinals.size()) +
        " device ordinals for a mesh of " + std::to_string(meshRanks.size()) +
        " ranks");
  bool deviceCollectives =
      onDevice &&
      ranksHaveTheirOwnDevices(meshRanks, deviceOrdinals,
                               [&](int rank) { return hostOf(rank); });
  Impl &impl = *impl_;
  std::vector<int64_t> meshShape(programs[0]->mesh_shape().begin(),
                                 programs[0]->mesh_shape().end());
  // Per worker process, the class programs its ranks of the mesh run.
  std::map<size_t, std::vector<bool>> needed;
  for (size_t p = 0; p < meshRanks.size(); ++p) {
    size_t worker = impl.workerOfRank(static_cast<int>(meshRanks[p]));
    std::vector<bool> &uses = needed[worker];
    uses.resize(programs.size(), false);
    int index = programIndexAt(
        programs, positionCoords(meshShape, static_cast<int64_t>(p)));
    if (index >= 0)
      uses[index] = true;
  }
  // Processes that need the same classes get the same message: each
  // distinct one is built and encoded once (usually one for all processes).
  bool consecutive = true;
  for (size_t p = 1; p < meshRanks.size() && consecutive; ++p)
    consecutive = meshRanks[p] == meshRanks[0] + static_cast<int64_t>(p);
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    impl.deps.setProgramRanks(programId, programs, meshRanks);
  }
  std::map<std::vector<bool>, std::string> encoded;
  for (const auto &[worker, uses] : needed) {
    auto [it, added] = encoded.try_emplace(uses);
    if (added) {
      wire::Envelope e = envelope();
      auto *upload = e.mutable_upload();
      upload->set_program_id(programId);
      // The class programs are lent to the message while it is encoded,
      // not copied into it (a copy of a long program costs as much as
      // encoding it); they are taken back before the message is destroyed.
      auto *lent = upload->mutable_programs();
      struct TakeBack {
        google::protobuf::RepeatedPtrField<wire::Program> *field;
        ~TakeBack() {
          while (!field->empty())
            (void)field->ReleaseLast();
        }
      } takeBack{lent};
      for (size_t k = 0; k < programs.size(); ++k)
        if (uses[k])
          lent->AddAllocated(const_cast<wire::Program *>(programs[k]));
      if (consecutive)
        upload->set_mesh_rank_start(meshRanks[0]);
      else
        for (int64_t r : meshRanks)
          upload->add_mesh_ranks(r);
      if (onDevice) {
        upload->set_device_type(deviceType);
        for (int32_t ordinal : deviceOrdinals)
          upload->add_device_ordinals(ordinal);
        upload->set_device_collectives(deviceCollectives);
      }
      it->second = encodeEnvelope(e);
    }
    impl.postBytes(worker, it->second);
    ++impl.sent;
  }
}

void Cluster::run(int rank, uint64_t programId,
                  const std::vector<TensorHandle> &inputs,
                  const std::vector<TensorHandle> &outputs) {
  run(std::vector<int64_t>{rank}, programId, inputs, outputs);
}

void Cluster::run(const std::vector<int64_t> &ranks, uint64_t programId,
                  const std::vector<TensorHandle> &inputs,
                  const std::vector<TensorHandle> &outputs,
                  const std::vector<int64_t> &seeds,
                  const std::vector<TensorHandle> &donated,
                  uint64_t speculationId) {
  Impl &impl = *impl_;
  std::unique_lock<std::mutex> lock(impl.mutex);
  detail::RunDependencies::Ranks involved =
      impl.deps.involvedRanks(programId, ranks);
  // Work that needs a lost rank is not sent: its outputs are lost here, and
  // fetching one fails at once naming the lost worker.
  std::optional<detail::LostValue> lost;
  if (impl.anyDead()) {
    std::vector<bool> lostRanks = impl.lostRanks();
    for (int64_t rank : *involved)
      if (!lost && rank >= 0 && rank < impl.worldSize && lostRanks[rank])
        lost = impl.lostValue(rank);
  }
  for (TensorHandle input : inputs)
    if (const detail::LostValue *why = impl.deps.poisoned(input); !lost && why)
      lost = *why;
  if (lost) {
    for (TensorHandle output : outputs)
      impl.deps.poison(output, *lost);
    return;
  }
  impl.deps.recordRunShared(involved, inputs, outputs);
  // One RunProgram per worker process, naming its ranks.
  impl.postPerProcess(
      ranks,
      [&](wire::Envelope &e) {
        auto *run = e.mutable_run();
        run->set_program_id(programId);
        run->mutable_inputs()->Add(inputs.begin(), inputs.end());
        run->mutable_outputs()->Add(outputs.begin(), outputs.end());
        run->mutable_seeds()->Add(seeds.begin(), seeds.end());
        run->mutable_donated()->Add(donated.begin(), donated.end());
        run->set_speculation_id(speculationId);
      },
      [](wire::Envelope &e, int32_t rank) {
        e.mutable_run()->add_ranks(rank);
      });
}

void Cluster::speculate(const std::vector<int64_t> &ranks,
                        uint64_t speculationId, uint64_t programId,
                        const std::vector<TensorHandle> &inputs, bool extend,
                        bool drop) {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->anyDead())
      return;
  }
  impl_->postPerProcess(
      ranks,
      [&](wire::Envelope &e) {
        auto *speculate = e.mutable_speculate();
        speculate->set_action(drop     ? wire::Speculate::DROP
                              : extend ? wire::Speculate::EXTEND
                                       : wire::Speculate::START);
        speculate->set_speculation_id(speculationId);
        speculate->set_program_id(programId);
        speculate->mutable_inputs()->Add(inputs.begin(), inputs.end());
      },
      [](wire::Envelope &e, int32_t rank) {
        e.mutable_speculate()->add_ranks(rank);
      });
}

void Cluster::put(int rank, TensorHandle handle, const Tensor &value) {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->deps.forget(handle);
  }
  wire::Envelope e = envelope();
  auto *put = e.mutable_put();
  put->set_rank(rank);
  put->set_handle(handle);
  tensorToWire(value, put->mutable_value());
  // A small put (a batch) waits for the next other message (`held`).
  impl_->post(impl_->workerOfRank(rank), e,
              /*holdable=*/value.nbytes() <= (size_t(1) << 20));
  ++impl_->sent;
}

namespace {

/// Sends one request that a worker answers (a fetch, memory statistics) and
/// registers its promise in `pending`; a dead worker or a stopped cluster
/// fails the future at once. `fill` writes the request into the envelope.
template <class T, class Impl, class Fill>
std::future<T> sendRequest(Impl &impl, int rank,
                           PendingReplies<T> Impl::*pending, const Fill &fill,
                           std::optional<TensorHandle> handle = std::nullopt) {
  size_t index = impl.workerOfRank(rank);
  std::promise<T> promise;
  std::future<T> result = promise.get_future();
  uint64_t id = impl.nextRequest++;
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    const WorkerInfo &w = impl.workers[index];
    if (w.dead || impl.stopped) {
      promise.set_exception(std::make_exception_ptr(WorkerError(
          rank, w.host, w.dead ? w.deathReason : "the cluster was shut down")));
      return result;
    }
    // A value that was never made, or one that needs a lost rank (marked
    // when the loss was seen): fail now rather than when (if ever) the
    // survivor gets to it.
    if (const detail::LostValue *why =
            handle ? impl.deps.poisoned(*handle) : nullptr) {
      std::string message = why->message;
      if (rank != why->rank)
        message += " (the value asked of rank " + std::to_string(rank) +
                   " needs rank " + std::to_string(why->rank) + ")";
      promise.set_exception(
          std::make_exception_ptr(WorkerError(why->rank, why->host, message)));
      return result;
    }
    (impl.*pending).add(id, rank, std::move(promise), handle);
  }
  wire::Envelope e = envelope();
  e.set_request_id(id);
  fill(e);
  impl.post(index, e);
  ++impl.sent;
  ++impl.trips;
  return result;
}

} // namespace

std::future<Tensor> Cluster::fetch(int rank, TensorHandle handle) {
  return sendRequest(
      *impl_, rank, &Impl::fetches,
      [&](wire::Envelope &e) {
        e.mutable_fetch()->set_rank(rank);
        e.mutable_fetch()->set_handle(handle);
      },
      handle);
}

std::future<MemoryStats> Cluster::memoryStats(int rank) {
  return sendRequest(
      *impl_, rank, &Impl::statsRequests,
      [&](wire::Envelope &e) { e.mutable_memory_stats()->set_rank(rank); });
}

std::future<TraceChunk> Cluster::trace(int rank, TraceAction action,
                                       size_t capacity, size_t maxEvents) {
  return sendRequest(*impl_, rank, &Impl::traceRequests,
                     [&](wire::Envelope &e) {
                       wire::TraceRequest *request = e.mutable_trace();
                       request->set_rank(rank);
                       request->set_action(action == TraceAction::Start
                                               ? wire::TraceRequest::START
                                               : wire::TraceRequest::DRAIN);
                       request->set_capacity(capacity);
                       request->set_max_events(maxEvents);
                     });
}

std::future<wire::CheckpointReply>
Cluster::checkpoint(const wire::CheckpointRequest &request) {
  return sendRequest(
      *impl_, request.rank(), &Impl::checkpointRequests,
      [&](wire::Envelope &e) { *e.mutable_checkpoint() = request; });
}

void Cluster::free(int rank, const std::vector<TensorHandle> &handles) {
  free(std::vector<int64_t>{rank}, handles);
}

void Cluster::free(const std::vector<int64_t> &ranks,
                   const std::vector<TensorHandle> &handles) {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    for (TensorHandle handle : handles)
      impl_->deps.forget(handle);
  }
  impl_->postPerProcess(
      ranks,
      [&](wire::Envelope &e) {
        e.mutable_free()->mutable_handles()->Add(handles.begin(),
                                                 handles.end());
      },
      [](wire::Envelope &e, int32_t rank) {
        e.mutable_free()->add_ranks(rank);
      },
      /*holdable=*/true);
}

void Cluster::synchronize() {
  Impl &impl = *impl_;
  auto wait = std::make_shared<SyncWait>();
  std::vector<uint64_t> ids;
  std::unique_lock<std::mutex> lock(impl.mutex);
  for (size_t i = 0; i < impl.workers.size(); ++i) {
    const WorkerInfo &w = impl.workers[i];
    if (w.dead)
      throw WorkerError(w.firstRank, w.host, w.deathReason);
    if (impl.stopped)
      throw WorkerError(w.firstRank, w.host, "the cluster was shut down");
  }
  for (size_t i = 0; i < impl.workers.size(); ++i) {
    uint64_t id = impl.nextRequest++;
    ids.push_back(id);
    wait->waiting.insert(i);
    impl.syncs[id] = wait;
    wire::Envelope e = envelope();
    e.set_request_id(id);
    e.mutable_sync();
    impl.post(i, e);
    ++impl.sent;
    ++impl.trips;
  }
  impl.changed.wait(lock, [&] {
    return wait->waiting.empty() || wait->failed || impl.stopped;
  });
  for (uint64_t id : ids)
    impl.syncs.erase(id);
  if (wait->failed)
    throw WorkerError(wait->rank, wait->host, wait->message);
  if (!wait->waiting.empty())
    throw WorkerError(0, "?", "the cluster was shut down");
  if (!impl.errors.empty()) {
    AsyncError first = impl.errors.front();
    size_t more = impl.errors.size() - 1;
    impl.errors.clear();
    throw WorkerError(
        first.rank, first.host,
        first.message +
            (more ? " (and " + std::to_string(more) + " more error(s))" : ""));
  }
}

void Cluster::shutdown() {
  Impl &impl = *impl_;
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    if (impl.stopped)
      return;
    impl.stopping = true;
  }
  impl.wakeIo();
  if (impl.io.joinable())
    impl.io.join();
  std::lock_guard<std::mutex> lock(impl.mutex);
  impl.stopped = true;
  auto hostOf = [&](int rank) {
    size_t index = static_cast<size_t>(
        impl.rankToWorker.empty() ? 0 : impl.rankToWorker[rank]);
    return impl.workers[index].host;
  };
  impl.fetches.failAll(hostOf, "the cluster was shut down");
  impl.statsRequests.failAll(hostOf, "the cluster was shut down");
  impl.traceRequests.failAll(hostOf, "the cluster was shut down");
  impl.checkpointRequests.failAll(hostOf, "the cluster was shut down");
  impl.changed.notify_all();
  close(impl.wakeFd);
  impl.wakeFd = -1;
}

bool Cluster::hasDeadWorker() const { return impl_->deadWorkers.load() > 0; }

bool Cluster::anyRankLost(const std::vector<int64_t> &ranks) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (!impl_->anyDead())
    return false;
  std::vector<bool> lost = impl_->lostRanks();
  for (int64_t rank : ranks)
    if (rank >= 0 && rank < impl_->worldSize && lost[rank])
      return true;
  return false;
}

uint64_t Cluster::messagesSent() const { return impl_->sent; }
uint64_t Cluster::roundTrips() const { return impl_->trips; }

int64_t Cluster::pidOf(int rank) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->workers[impl_->workerOfRank(rank)].pid;
}

} // namespace dtorch::rt
