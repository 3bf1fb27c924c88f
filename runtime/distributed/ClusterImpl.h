//===- ClusterImpl.h - the controller-side state of a Cluster -----------===//
//
// Private to runtime/distributed: the state Cluster.cpp (messages, requests)
// and ClusterRecovery.cpp (health checks, restart) share.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch/runtime/Cluster.h"

#include "dtorch/runtime/DevicePlacement.h"
#include "dtorch/runtime/MeshContext.h"

#include "ClusterProcesses.h"
#include "RunDependencies.h"
#include "dtorch/runtime/DialInAdmission.h"
#include "dtorch/runtime/Security.h"
#include "dtorch/runtime/StreamLink.h"
#include "dtorch/runtime/Transport.h"
#include "dtorch/runtime/WireLimits.h"
#include "dtorch/runtime/WorkerLaunch.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace dtorch::rt {

namespace wire = ::dtorch::wire;
using Clock = std::chrono::steady_clock;

namespace cluster_detail {

struct WorkerInfo {
  std::string id;      // ZeroMQ routing id, or its link's (kLinkIdPrefix)
  std::string address; // manual mode
  int firstRank = -1;
  int numRanks = 0;
  std::string host = "?";
  int64_t pid = 0;
  int cudaDevices = 0;         // from its Hello
  std::string cudaUnavailable; // why cudaDevices is 0
  pid_t child = -1;            // embedded mode
  // Embedded mode with local links: the stream socket to the process (its
  // messages' routing id is `linkId`); null when it talks over ZeroMQ.
  std::shared_ptr<StreamLink> link;
  std::string linkId;
  bool authenticated = false;
  bool dead = false;
  std::string deathReason;
  Clock::time_point lastHeard;
};

/// Requests of one kind waiting for a worker's reply (fetches, memory
/// statistics), by request id: each promise is kept with the rank it asked.
template <class T> class PendingReplies {
public:
  /// `handle`: the tensor a fetch asks for.
  void add(uint64_t id, int rank, std::promise<T> promise,
           std::optional<uint64_t> handle = std::nullopt) {
    pending_.emplace(id, Entry{rank, handle, std::move(promise)});
  }
  /// The promise of request `id`, taken out; nullopt when none waits.
  std::optional<std::promise<T>> take(uint64_t id) {
    auto it = pending_.find(id);
    if (it == pending_.end())
      return std::nullopt;
    std::promise<T> promise = std::move(it->second.promise);
    pending_.erase(it);
    return promise;
  }
  /// Fails every request for which `blame(rank, handle)` returns an error.
  template <class Blame> void failWhere(const Blame &blame) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      std::optional<WorkerError> error =
          blame(it->second.rank, it->second.handle);
      if (error) {
        it->second.promise.set_exception(std::make_exception_ptr(*error));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }
  /// Fails every request for a rank in [firstRank, firstRank + numRanks).
  void failRanks(int firstRank, int numRanks, const std::string &host,
                 const std::string &reason) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      int rank = it->second.rank;
      if (rank >= firstRank && rank < firstRank + numRanks) {
        it->second.promise.set_exception(
            std::make_exception_ptr(WorkerError(rank, host, reason)));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }
  /// Fails every request; `hostOf(rank)` names the host in the error.
  template <class HostOf>
  void failAll(const HostOf &hostOf, const std::string &reason) {
    for (auto &[id, entry] : pending_)
      entry.promise.set_exception(std::make_exception_ptr(
          WorkerError(entry.rank, hostOf(entry.rank), reason)));
    pending_.clear();
  }

private:
  struct Entry {
    int rank;
    std::optional<uint64_t> handle;
    std::promise<T> promise;
  };
  std::map<uint64_t, Entry> pending_;
};

struct SyncWait {
  std::set<size_t> waiting; // worker indices
  bool failed = false;
  int rank = -1;
  std::string host, message;
};

struct AsyncError {
  int rank;
  std::string host, message;
};

inline wire::Envelope envelope() {
  wire::Envelope e;
  e.set_protocol_version(wire::PROTOCOL_VERSION);
  return e;
}

} // namespace cluster_detail
using namespace cluster_detail;

struct Cluster::Impl {
  ClusterOptions options;
  std::string token;
  bool embedded = true;
  int worldSize = 0;

  std::mutex mutex; // guards everything below up to the I/O-only section
  std::condition_variable changed;
  std::vector<WorkerInfo> workers;
  std::vector<int> rankToWorker;
  PendingReplies<Tensor> fetches;
  PendingReplies<MemoryStats> statsRequests;
  PendingReplies<TraceChunk> traceRequests;
  PendingReplies<wire::CheckpointReply> checkpointRequests;
  std::map<uint64_t, std::shared_ptr<SyncWait>> syncs;
  std::vector<AsyncError> errors;
  // Fail-fast bookkeeping (RunDependencies.h): the ranks each value needs.
  // `storeLost` is set once a worker died: a rendezvous key that does not
  // exist yet then fails at once (the lost ranks may be the ones to set it).
  detail::RunDependencies deps;
  std::string storeLost;
  bool ready = false;
  std::string startupError;
  int startupErrorRank = -1;
  std::string startupErrorHost; // when no worker of that rank is known
  bool stopping = false;
  bool stopped = false;

  std::mutex outboxMutex;
  std::deque<std::pair<size_t, std::string>> outbox;
  // Messages by routing id that a thread other than the I/O thread makes
  // while it holds `mutex` (markDead during a restart: PeersLost and the
  // parked gets' replies); the I/O thread sends them (sendFromAnyThread).
  std::deque<std::pair<std::string, std::string>> outboxById;
  int wakeFd = -1;

  // Direct sends ($DTORCH_DIRECT_SEND=0 turns them off): a thread that
  // posts a message sends it on the socket itself when nothing waits in
  // the outbox and the I/O thread is not using the socket, instead of
  // waking the I/O thread to send it. `socketMutex` guards the socket: the
  // I/O thread holds it except while it waits in poll. `routes` (guarded by
  // socketMutex, refreshed by the I/O thread every round): by worker index,
  // the routing id of a live authenticated worker, else empty (its
  // messages go through the outbox, which drops those of a dead worker).
  const bool directSend = directSendFromEnvironment();
  std::mutex socketMutex;
  std::vector<std::string> routes;
  std::atomic<uint64_t> directSends{0};
  static bool directSendFromEnvironment() {
    const char *value = std::getenv("DTORCH_DIRECT_SEND");
    return !(value && std::string(value) == "0");
  }

  // Local links ($DTORCH_LOCAL_LINK=0 turns them off): each embedded
  // worker talks to the controller over a Unix-domain socketpair whose end
  // it inherits (StreamLink.h) instead of a ZeroMQ connection: no libzmq
  // I/O thread between the threads that send and the ones that read. Its
  // messages carry the routing id `kLinkIdPrefix` + a number, which
  // sendTo() maps to the link (`linksById`, guarded by `linksMutex`, so
  // that sendTo may run under any of the other locks).
  const bool localLink = localLinkFromEnvironment();
  static constexpr const char *kLinkIdPrefix = "link:";
  std::mutex linksMutex;
  std::map<std::string, std::shared_ptr<StreamLink>> linksById;
  uint64_t nextLinkId = 0; // guarded by `mutex` (spawnWorker)
  static bool localLinkFromEnvironment() {
    const char *value = std::getenv("DTORCH_LOCAL_LINK");
    return !(value && std::string(value) == "0");
  }
  static bool isLinkId(const std::string &id) {
    return id.rfind(kLinkIdPrefix, 0) == 0;
  }
  std::shared_ptr<StreamLink> linkOf(const std::string &id) {
    if (!isLinkId(id))
      return nullptr;
    std::lock_guard<std::mutex> lock(linksMutex);
    auto it = linksById.find(id);
    return it == linksById.end() ? nullptr : it->second;
  }

  // Held messages ($DTORCH_HOLD_SENDS=0 turns it off): a small put and a
  // free need no answer and matter only to the messages after them, so
  // they wait, in order, and leave right before the next other message,
  // back to back with it (each I/O thread on the way wakes once for them
  // all). `postMutex` orders the posts; `held` and `heldBytes` are guarded
  // by it. restart() sends them before anything else (drainOutbox).
  const bool holdSends = holdSendsFromEnvironment();
  std::mutex postMutex;
  std::vector<std::pair<size_t, std::string>> held;
  size_t heldBytes = 0;
  static constexpr size_t kMaxHeldBytes = size_t(4) << 20;
  static bool holdSendsFromEnvironment() {
    const char *value = std::getenv("DTORCH_HOLD_SENDS");
    return !(value && std::string(value) == "0");
  }

  std::atomic<uint64_t> nextRequest{1};
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> trips{0};
  std::thread io;
  // Rounds of the I/O loop completed (restart waits for the outbox to drain).
  std::atomic<uint64_t> ioRounds{0};

  // Restart (guarded by `mutex`): the workers' rendezvous generation, the
  // survivors that have not answered the current ResetCommunicators, and
  // the request id of each one's reset. Set by the I/O thread before the
  // workers start: where embedded workers connect and what they run.
  uint64_t generation = 0;
  std::set<size_t> resetWaiting;
  std::map<uint64_t, size_t> resetRequests;
  // Workers marked dead and not yet replaced (read without the lock).
  std::atomic<int> deadWorkers{0};
  std::string endpoint, workerExe;

  // I/O thread only.
  std::unique_ptr<zmq::context_t> context;
  std::unique_ptr<zmq::socket_t> socket;
  std::map<std::string, std::string> store;
  std::map<std::string, std::vector<std::pair<std::string, uint64_t>>>
      parkedGets;
  size_t storeBytes = 0;
  std::unique_ptr<HandshakeMonitor> handshakes; // manual mode

  // Dial-in mode (ClusterDialIn.cpp): the admission of the workers that
  // connect, the descriptor of each one's connection (ZMQ_SRCFD; a closed
  // one is how its death is seen), the monitor of those connections and
  // the CURVE key check.
  bool dialIn = false;
  std::unique_ptr<DialInAdmission> admission;
  std::map<std::string, int> dialInFds; // routing id -> descriptor
  std::unique_ptr<HandshakeMonitor> dialInMonitor;
  std::unique_ptr<ZapAuthenticator> dialInZap;
  std::string dialInEndpoint; // the bound endpoint, for messages
  Clock::time_point dialInStarted;
  /// Binds the listening socket (before the I/O loop).
  void startDialIn();
  /// A Hello on a connection no worker owns yet.
  void onDialInHello(const std::string &id, const wire::Hello &hello,
                     const zmq::message_t &payload);
  /// Each I/O round: CURVE requests, closed connections, the admission
  /// deadline. Caller holds `mutex`; the I/O thread.
  void checkDialIn();
  /// Caller holds `mutex`; the I/O thread. The monitor's events in order:
  /// a closed connection withdraws (before the start) or kills (after) the
  /// worker whose Hello came through its descriptor. Libzmq's one I/O
  /// thread reports a connection's close before the descriptor can be
  /// accepted again, and the accept before the connection's first message,
  /// so draining before each Hello keeps a reused descriptor apart.
  void drainDialInEvents();
  /// Caller holds `mutex`. Fails the start: every admitted worker and the
  /// refused `peer` (when given) are told why and exit.
  void failDialInStart(const std::string &reason, const std::string &peer,
                       int rank, const std::string &host);
  void stopDialIn() {
    dialInMonitor.reset();
    dialInZap.reset();
    // What the workers were last told (why the start failed, Shutdown)
    // leaves before the socket closes, for at most half a second.
    if (dialIn && socket)
      socket->set(zmq::sockopt::linger, 500);
  }

  /// `holdable`: a message that may wait for the next other one (a small
  /// put, a free; see `held`).
  void post(size_t worker, const wire::Envelope &message,
            bool holdable = false) {
    postBytes(worker, encodeEnvelope(message), holdable);
  }

  /// Posts one message per worker process hosting any of `ranks`, in the
  /// order the processes are first met: `make(envelope)` fills it, and
  /// `addRank(envelope, rank)` names each of that process's ranks in it.
  template <class Make, class AddRank>
  void postPerProcess(const std::vector<int64_t> &ranks, const Make &make,
                      const AddRank &addRank, bool holdable = false) {
    std::vector<int> messageOf(workers.size(), -1);
    std::vector<std::pair<size_t, wire::Envelope>> messages;
    for (int64_t rank : ranks) {
      size_t worker = workerOfRank(static_cast<int>(rank));
      if (messageOf[worker] < 0) {
        messageOf[worker] = static_cast<int>(messages.size());
        wire::Envelope e = envelope();
        make(e);
        messages.emplace_back(worker, std::move(e));
      }
      addRank(messages[static_cast<size_t>(messageOf[worker])].second,
              static_cast<int32_t>(rank));
    }
    for (const auto &[worker, e] : messages) {
      post(worker, e, holdable);
      ++sent;
    }
  }

  /// Sends an encoded envelope (one encoding may go to several workers),
  /// after the held messages; a `holdable` one may be held itself.
  void postBytes(size_t worker, std::string bytes, bool holdable = false) {
    std::vector<std::pair<size_t, std::string>> messages;
    if (!holdSends) {
      messages.emplace_back(worker, std::move(bytes));
      return sendNow(messages);
    }
    std::lock_guard<std::mutex> lock(postMutex);
    if (holdable && heldBytes + bytes.size() <= kMaxHeldBytes) {
      heldBytes += bytes.size();
      held.emplace_back(worker, std::move(bytes));
      return;
    }
    messages.swap(held);
    heldBytes = 0;
    messages.emplace_back(worker, std::move(bytes));
    sendNow(messages);
  }

  /// Sends the held messages now.
  void flushHeld() {
    std::lock_guard<std::mutex> lock(postMutex);
    std::vector<std::pair<size_t, std::string>> messages;
    messages.swap(held);
    heldBytes = 0;
    if (!messages.empty())
      sendNow(messages);
  }

  /// Sends `messages` in order from this thread (sendDirect), or queues
  /// them for the I/O thread and wakes it once.
  void sendNow(std::vector<std::pair<size_t, std::string>> &messages) {
    if (directSend && sendDirect(messages))
      return;
    {
      std::lock_guard<std::mutex> lock(outboxMutex);
      for (auto &message : messages)
        outbox.push_back(std::move(message));
    }
    wakeIo();
  }

  /// Sends `messages` (worker, bytes) in order on the calling thread: true
  /// when sent. False (nothing sent) when a message waits in the outbox (it
  /// goes first), the I/O thread holds the socket, or a worker has no
  /// route. Never blocks on the I/O thread: callers may hold `mutex`.
  bool sendDirect(const std::vector<std::pair<size_t, std::string>> &messages) {
    std::unique_lock<std::mutex> queued(outboxMutex);
    if (!outbox.empty() || !outboxById.empty())
      return false;
    std::unique_lock<std::mutex> lock(socketMutex, std::try_to_lock);
    if (!lock.owns_lock())
      return false;
    queued.unlock();
    if (!socket)
      return false;
    for (const auto &[worker, bytes] : messages)
      if (worker >= routes.size() || routes[worker].empty())
        return false;
    for (const auto &[worker, bytes] : messages)
      sendTo(routes[worker], bytes);
    directSends += messages.size();
    // The socket's descriptor is edge-triggered: this send may have taken
    // the notice of a message that arrived meanwhile, which the I/O
    // thread's poll would then miss; it is woken to read it.
    if (socket->get(zmq::sockopt::events) & ZMQ_POLLIN) {
      wakeIo();
    }
    return true;
  }

  /// sendTo on the I/O thread (which owns the socket); from any other
  /// thread, queued for the I/O thread (a socket is never used by two
  /// threads at once, and the caller may hold `mutex`, which the I/O thread
  /// takes while it holds the socket).
  void sendFromAnyThread(const std::string &id, std::string payload) {
    if (std::this_thread::get_id() == io.get_id())
      return sendTo(id, payload);
    {
      std::lock_guard<std::mutex> lock(outboxMutex);
      outboxById.emplace_back(id, std::move(payload));
    }
    wakeIo();
  }

  void sendTo(const std::string &id, const std::string &payload) {
    if (isLinkId(id)) {
      if (std::shared_ptr<StreamLink> link = linkOf(id))
        link->send(payload); // a closed link: its death is detected elsewhere
      return;
    }
    try {
      socket->send(zmq::buffer(id), zmq::send_flags::sndmore);
      socket->send(zmq::buffer(payload), zmq::send_flags::none);
    } catch (const zmq::error_t &) {
      // Unroutable peer: its death is detected elsewhere.
    }
  }

  void replyError(const std::string &id, uint64_t requestId,
                  const std::string &message) {
    wire::Envelope e = envelope();
    e.set_request_id(requestId);
    e.mutable_error()->set_rank(-1);
    e.mutable_error()->set_message(message);
    e.mutable_error()->set_instruction(-1);
    sendTo(id, encodeEnvelope(e));
  }

  std::string describe(const WorkerInfo &w) const {
    return "worker pid " + std::to_string(w.pid ? w.pid : w.child) +
           " (ranks " + std::to_string(w.firstRank) + "-" +
           std::to_string(w.firstRank + w.numRanks - 1) + ")";
  }

  /// Caller holds `mutex`.
  bool anyDead() const {
    for (const WorkerInfo &w : workers)
      if (w.dead)
        return true;
    return false;
  }

  /// Caller holds `mutex`. Indexed by rank: true for the ranks of dead
  /// workers.
  std::vector<bool> lostRanks() const {
    std::vector<bool> lost(static_cast<size_t>(worldSize), false);
    for (const WorkerInfo &w : workers)
      if (w.dead)
        for (int r = w.firstRank; r < w.firstRank + w.numRanks; ++r)
          if (r >= 0 && r < worldSize)
            lost[r] = true;
    return lost;
  }

  /// Caller holds `mutex`. What to report for a value that needs the lost
  /// rank `rank`: its worker's death, naming that rank.
  detail::LostValue lostValue(int64_t rank) const {
    const WorkerInfo &w = workers[workerOfRank(static_cast<int>(rank))];
    return detail::LostValue{static_cast<int>(rank), w.host, w.deathReason};
  }

  /// Caller holds `mutex`. Marks every value that needs a lost rank lost
  /// (for good: also once the lost workers are replaced) and fails the
  /// fetches waiting on surviving ranks for one of them.
  void failDependents() {
    deps.poisonNeeding(lostRanks(),
                       [&](int64_t rank) { return lostValue(rank); });
    fetches.failWhere([&](int rank, std::optional<uint64_t> handle)
                          -> std::optional<WorkerError> {
      const detail::LostValue *why = handle ? deps.poisoned(*handle) : nullptr;
      if (!why)
        return std::nullopt;
      std::string message = why->message;
      if (rank != why->rank)
        message += " (the value asked of rank " + std::to_string(rank) +
                   " needs rank " + std::to_string(why->rank) + ")";
      return WorkerError(why->rank, why->host, message);
    });
  }

  // Caller holds `mutex`; on the I/O thread, or on the thread of a restart
  // (its messages then go through the I/O thread: sendFromAnyThread).
  void markDead(size_t index, const std::string &reason) {
    WorkerInfo &w = workers[index];
    if (w.dead)
      return;
    w.dead = true;
    ++deadWorkers;
    w.deathReason = describe(w) + " " + reason;
    fetches.failRanks(w.firstRank, w.numRanks, w.host, w.deathReason);
    statsRequests.failRanks(w.firstRank, w.numRanks, w.host, w.deathReason);
    traceRequests.failRanks(w.firstRank, w.numRanks, w.host, w.deathReason);
    checkpointRequests.failRanks(w.firstRank, w.numRanks, w.host,
                                 w.deathReason);
    for (auto &[id, sync] : syncs) {
      if (sync->waiting.count(index) && !sync->failed) {
        sync->failed = true;
        sync->rank = w.firstRank;
        sync->host = w.host;
        sync->message = w.deathReason;
      }
    }
    if (ready) {
      failDependents();
      // The survivors stop waiting for the lost ranks: their rendezvous
      // fail (keys the lost ranks would set never come) and their
      // collectives and receives give up (PeersLost).
      storeLost = w.deathReason;
      for (auto &[key, waiters] : parkedGets)
        for (auto &[peer, request] : waiters)
          replyLostKey(peer, request, key);
      parkedGets.clear();
      wire::Envelope lost = envelope();
      for (int r = w.firstRank; r < w.firstRank + w.numRanks; ++r)
        lost.mutable_peers_lost()->add_ranks(r);
      lost.mutable_peers_lost()->set_reason(w.deathReason);
      std::string bytes = encodeEnvelope(lost);
      for (const WorkerInfo &other : workers)
        if (other.authenticated && !other.dead)
          sendFromAnyThread(other.id, bytes);
    }
    changed.notify_all();
  }

  /// Starts the embedded worker process of `w`'s ranks (caller holds
  /// `mutex`; `endpoint` and `workerExe` are set).
  void spawnWorker(WorkerInfo &w) {
    int controllerTimeout =
        static_cast<int>(std::min<int64_t>(3000, options.peerTimeout.count()));
    dropLink(w); // a replaced worker's
    int linkFds[2] = {-1, -1};
    if (localLink) {
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, linkFds) != 0)
        throw RuntimeError(std::string("socketpair failed: ") +
                           std::strerror(errno));
      TransportOptions transport; // the ZeroMQ link's bound, the default
      w.link = std::make_shared<StreamLink>(
          linkFds[0], static_cast<uint64_t>(zmqMessageSizeCap(transport)),
          [this] { wakeIo(); });
      w.linkId = kLinkIdPrefix + std::to_string(nextLinkId++);
      std::lock_guard<std::mutex> lock(linksMutex);
      linksById[w.linkId] = w.link;
    }
    struct CloseChildEnd { // the child's end of the link, once spawned
      int fd;
      ~CloseChildEnd() {
        if (fd >= 0)
          close(fd);
      }
    } childEnd{linkFds[1]};
    // The token travels through a pipe on descriptor 3: the command line
    // is visible to every user (`ps`).
    std::vector<std::string> args = {
        "--connect", endpoint, "--token-fd", "3", "--ranks",
        std::to_string(w.firstRank) + "-" +
            std::to_string(w.firstRank + w.numRanks - 1),
        "--world-size", std::to_string(worldSize),
        // Every embedded worker runs on this host.
        "--ranks-on-host", std::to_string(worldSize), "--controller-timeout-ms",
        std::to_string(controllerTimeout), "--heartbeat-ms",
        std::to_string(options.heartbeatInterval.count()),
        "--collective-timeout-ms",
        std::to_string(options.collectiveTimeout.count()), "--generation",
        std::to_string(generation)};
    if (w.link) {
      args.push_back("--link-fd");
      args.push_back("4");
    }
    w.child = detail::spawnProcess(workerExe, args, token, linkFds[1]);
    if (w.link)
      wakeIo(); // a restart's new link joins the I/O thread's poll now
  }
  /// Forgets `w`'s link (caller holds `mutex`): its descriptor closes once
  /// the I/O thread's round lets go of it.
  void dropLink(WorkerInfo &w) {
    if (!w.link)
      return;
    {
      std::lock_guard<std::mutex> lock(linksMutex);
      linksById.erase(w.linkId);
    }
    w.link.reset();
    w.linkId.clear();
  }
  void wakeIo() {
    uint64_t one = 1;
    ssize_t ignored = write(wakeFd, &one, sizeof(one));
    (void)ignored;
  }
  /// Returns once every message posted before the call has been sent (or
  /// dropped, for a dead worker) by the I/O thread.
  void drainOutbox() {
    flushHeld();
    uint64_t target = ioRounds.load() + 2;
    auto deadline = Clock::now() + std::chrono::seconds(2);
    while (ioRounds.load() < target && Clock::now() < deadline) {
      wakeIo();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  /// Cluster::restart's steps.
  void resetSurvivors(std::chrono::milliseconds idleBound);
  std::vector<int> replaceDeadWorkers(std::vector<std::string> &reasons);

  /// Empty when a worker may set `key` to `value` in the store; else why
  /// not (the collective secret is the controller's, sizes are bounded).
  std::string checkStoreSet(const std::string &key,
                            const std::string &value) const {
    if (key == kCollectiveSecretKey)
      return "store key '" + key + "' is reserved for the controller";
    if (key.size() > kMaxStoreKeyBytes || value.size() > kMaxStoreValueBytes)
      return "store entry refused: key of " + std::to_string(key.size()) +
             " bytes or value of " + std::to_string(value.size()) +
             " bytes exceeds the limits (" + std::to_string(kMaxStoreKeyBytes) +
             ", " + std::to_string(kMaxStoreValueBytes) + ")";
    if (!store.count(key) &&
        (store.size() >= kMaxStoreKeys ||
         storeBytes + key.size() + value.size() > kMaxStoreTotalBytes))
      return "store entry refused: the store is full";
    return "";
  }
  /// Manual mode: a worker's refused handshake (wrong CURVE key, mechanism
  /// mismatch) fails the start, naming the worker's address.
  void checkHandshakes();
  /// Caller holds `mutex`; the I/O thread. Handles the monitor's events:
  /// handshake failures at start, and workers started by hand whose
  /// connection closed (marked dead).
  void drainHandshakeEvents();
  void replyLostKey(const std::string &peer, uint64_t request,
                    const std::string &key) {
    wire::Envelope reply = envelope();
    reply.set_request_id(request);
    reply.mutable_kv_reply()->set_key(key);
    reply.mutable_kv_reply()->set_error(storeLost);
    sendFromAnyThread(peer, encodeEnvelope(reply));
  }

  void ioMain();
  void onMessage(const std::string &id, const zmq::message_t &payload);
  void onHello(const std::string &id, const wire::Hello &hello);
  void onWorkerMessage(size_t index, wire::Envelope &e);
  void checkHealth(Clock::time_point started);
  /// Caller holds `mutex`. An error a survivor reports because a peer died
  /// (its collective lost a connection) names the dead worker instead: its
  /// exit is visible by the time the survivor notices the closed socket.
  Clock::time_point blameWaitStart{};
  void blameDeadPeer(int &rank, std::string &host, std::string &message) {
    // A survivor can see the closed socket a moment before the killed
    // process becomes waitable, so a lost-connection error waits briefly.
    bool lostPeer = message.find("closed by peer") != std::string::npos ||
                    message.find(") died") != std::string::npos ||
                    message.find("Connection reset") != std::string::npos ||
                    message.find("Broken pipe") != std::string::npos;
    // One wait window of at most 1 s serves every report of one failure
    // (each survivor rank reports it): the I/O thread waits here, and
    // heartbeats to the survivors must not stop for longer.
    auto now = Clock::now();
    if (lostPeer && now - blameWaitStart > std::chrono::seconds(5))
      blameWaitStart = now;
    auto deadline =
        lostPeer ? blameWaitStart + std::chrono::milliseconds(1000) : now;
    while (true) {
      bool anyDead = false;
      for (size_t i = 0; i < workers.size(); ++i) {
        WorkerInfo &w = workers[i];
        if (!w.dead && w.child > 0) {
          std::string how = detail::pollExit(w.child);
          if (!how.empty()) {
            w.child = -1;
            markDead(i, how);
          }
        }
        anyDead |= w.dead;
      }
      // Workers started by hand: their closed connection is the sign.
      if (!anyDead && handshakes) {
        drainHandshakeEvents();
        anyDead = this->anyDead();
      }
      if (!anyDead && dialIn) {
        checkDialIn();
        anyDead = this->anyDead();
      }
      if (anyDead || Clock::now() >= deadline)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (const WorkerInfo &w : workers) {
      if (!w.dead)
        continue;
      message = w.deathReason + " (seen by rank " + std::to_string(rank) +
                ": " + message + ")";
      rank = w.firstRank;
      host = w.host;
      return;
    }
  }
  void stopWorkers();
  size_t workerOfRank(int rank) const {
    if (rank < 0 || rank >= worldSize)
      throw RuntimeError("rank " + std::to_string(rank) +
                         " is outside the world of " +
                         std::to_string(worldSize));
    return static_cast<size_t>(rankToWorker[rank]);
  }
};

} // namespace dtorch::rt
