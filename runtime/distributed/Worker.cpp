#include "dtorch/runtime/Worker.h"

#include "dtorch/runtime/Device.h"
#include "dtorch/runtime/DevicePlacement.h"

#include "DialInReconnect.h"
#include "ReplaceableCommunicator.h"

#include "dtorch/runtime/Blas.h"
#include "dtorch/runtime/Checkpoint.h"
#include "dtorch/runtime/GlooCollectives.h"
#include "dtorch/runtime/HostSharedMemoryCollectives.h"
#include "dtorch/runtime/IpcDeviceCollectives.h"
#include "dtorch/runtime/PeerHealth.h"
#include "dtorch/runtime/RankCpuPlacement.h"
#include "dtorch/runtime/RankState.h"
#include "dtorch/runtime/Security.h"
#include "dtorch/runtime/SharedDeviceCollectives.h"
#include "dtorch/runtime/SharedHostArena.h"
#include "dtorch/runtime/SharedMemoryCollectives.h"
#include "dtorch/runtime/StreamLink.h"
#include "dtorch/runtime/WireLimits.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <poll.h>
#include <pthread.h>
#include <set>
#include <sys/eventfd.h>
#include <thread>
#include <unistd.h>

namespace dtorch::rt {

namespace wire = ::dtorch::wire;

namespace {

// Ranks on this host, all processes together (WorkerOptions::ranksOnHost,
// else this process's ranks).
int ranksOnHostOf(const WorkerOptions &options) {
  return options.ranksOnHost > 0 ? options.ranksOnHost : options.numRanks;
}

using Clock = std::chrono::steady_clock;

// $DTORCH_HOST_SHM=0 turns the shared-memory transport between the processes
// of one host off (Gloo carries those groups, as between hosts).
bool hostSharedMemoryEnabled() {
  const char *value = std::getenv("DTORCH_HOST_SHM");
  return !value || std::string(value) != "0";
}

// Messages for the controller, produced by any thread, sent by the I/O thread
// (which owns the socket) when the eventfd wakes it.
class Outbox {
public:
  Outbox() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0)
      throw RuntimeError("eventfd failed");
  }
  ~Outbox() { close(fd_); }
  /// Direct sends ($DTORCH_DIRECT_SEND): `send` sends a message on the
  /// socket from the pushing thread and returns true, or returns false
  /// (the I/O thread holds the socket) and the message is queued. Set
  /// before any other thread pushes.
  void setDirect(std::function<bool(const std::string &)> send) {
    direct_ = std::move(send);
  }
  void push(const wire::Envelope &envelope) {
    std::string bytes = encodeEnvelope(envelope);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // Nothing queued overtakes: a direct send only when the queue is
      // empty (the I/O thread drains it holding the socket).
      if (direct_ && queue_.empty() && direct_(bytes))
        return;
      queue_.push_back(std::move(bytes));
    }
    wake();
  }
  /// Wakes the I/O thread's poll.
  void wake() {
    uint64_t one = 1;
    ssize_t ignored = write(fd_, &one, sizeof(one));
    (void)ignored;
  }
  std::deque<std::string> drain() {
    uint64_t value;
    ssize_t ignored = read(fd_, &value, sizeof(value));
    (void)ignored;
    std::lock_guard<std::mutex> lock(mutex_);
    std::deque<std::string> out;
    out.swap(queue_);
    return out;
  }
  int fd() const { return fd_; }

private:
  int fd_;
  std::mutex mutex_;
  std::deque<std::string> queue_;
  std::function<bool(const std::string &)> direct_;
};

// The Gloo rendezvous store, served by the controller.
class ControllerStore final : public KeyValueStore {
public:
  explicit ControllerStore(Outbox &outbox) : outbox_(outbox) {}

  void set(const std::string &key, const std::string &value) override {
    wire::Envelope envelope;
    envelope.set_protocol_version(wire::PROTOCOL_VERSION);
    envelope.mutable_kv_set()->set_key(key);
    envelope.mutable_kv_set()->set_value(value);
    outbox_.push(envelope);
  }

  std::string get(const std::string &key,
                  std::chrono::milliseconds timeout) override {
    std::future<std::string> reply;
    uint64_t id;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      id = nextId_++;
      reply = pending_[id].get_future();
    }
    wire::Envelope envelope;
    envelope.set_protocol_version(wire::PROTOCOL_VERSION);
    envelope.set_request_id(id);
    envelope.mutable_kv_get()->set_key(key);
    outbox_.push(envelope);
    if (reply.wait_for(timeout) != std::future_status::ready) {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.erase(id);
      throw RuntimeError("timed out after " + std::to_string(timeout.count()) +
                         " ms waiting for key '" + key +
                         "' in the controller's store");
    }
    return reply.get();
  }

  void deliver(uint64_t id, const std::string &value) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pending_.find(id);
    if (it == pending_.end())
      return;
    it->second.set_value(value);
    pending_.erase(it);
  }

  // The controller answered that the key will never come (a peer is lost).
  void fail(uint64_t id, const std::string &key, const std::string &error) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pending_.find(id);
    if (it == pending_.end())
      return;
    it->second.set_exception(std::make_exception_ptr(
        RuntimeError("gave up waiting for key '" + key +
                     "' in the controller's store: " + error)));
    pending_.erase(it);
  }

private:
  Outbox &outbox_;
  std::mutex mutex_;
  uint64_t nextId_ = 1;
  std::map<uint64_t, std::promise<std::string>> pending_;
};

// The Gloo communicator of one rank, connected in the background.
struct GlooSlot {
  std::mutex mutex;
  std::condition_variable ready;
  bool done = false;
  std::unique_ptr<Communicator> comm;
  std::string error;
};

struct Rank {
  int rank = 0;
  // The CPUs its thread is pinned to (RankCpuPlacement.h); empty: not pinned.
  std::vector<int> cpus;
  std::thread thread;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  // Forwards to the transports of the current generation (Generation).
  std::unique_ptr<ReplaceableCommunicator> comm;
  std::unique_ptr<RankState> state; // owned by the rank thread
  // A RunProgram's lists, refilled by each run (the rank thread's).
  struct RunLists {
    std::vector<uint64_t> inputs, outputs, donated;
    std::vector<int64_t> seeds;
  } runLists;
};

// The transports of every hosted rank for one rendezvous generation: the
// worker starts with the generation it was given and builds a new one when
// the controller's restart resets it (ResetCommunicators). Members are
// destroyed in reverse order: the routing communicators before the host
// shared-memory ones and the hub they route to.
struct Generation {
  uint64_t number = 0;
  std::unique_ptr<SharedMemoryHub> hub;
  // Groups spanning processes of this host, by hosted rank.
  std::vector<std::unique_ptr<HostSharedMemoryCommunicator>> hostComms;
  std::vector<std::shared_ptr<GlooSlot>> glooSlots;
  std::vector<std::unique_ptr<Communicator>> routing;
  bool glooStarted = false;
};

// The rendezvous keys of generation `number` start with this prefix: the
// first generation's are those of a world that never restarted, and a later
// one's add a component that no key of the transports starts with.
std::string generationPrefix(const char *transport, uint64_t number) {
  std::string prefix = std::string(transport) + "/world";
  return number == 0 ? prefix : prefix + "/g" + std::to_string(number);
}

class Worker {
public:
  // rankCpus: the CPUs of each hosted rank's thread, in rank order (empty:
  // not pinned; RankCpuPlacement.h).
  Worker(const WorkerOptions &options,
         const std::vector<std::vector<int>> &rankCpus)
      : options_(options), host_(localHostName()),
        store_(std::make_shared<ControllerStore>(outbox_)),
        health_(std::make_shared<PeerHealth>()) {
    needsGloo_ = options.numRanks < options.worldSize;
    for (int r = options.firstRank; r < options.firstRank + options.numRanks;
         ++r) {
      auto rank = std::make_unique<Rank>();
      rank->rank = r;
      size_t index = static_cast<size_t>(r - options.firstRank);
      if (index < rankCpus.size())
        rank->cpus = rankCpus[index];
      rank->comm = std::make_unique<ReplaceableCommunicator>(r);
      rank->state = std::make_unique<RankState>(r, rank->comm.get());
      ranks_.push_back(std::move(rank));
    }
    buildGeneration(options.generation);
  }

  int run();

private:
  // ---- I/O thread ----
  void sendFrames(const std::string &peer, const std::string &payload) {
    if (link_) {
      link_->send(payload); // a closed link: the loop exits
      return;
    }
    if (routerMode_)
      socket_->send(zmq::buffer(peer), zmq::send_flags::sndmore);
    socket_->send(zmq::buffer(payload), zmq::send_flags::none);
  }
  void replyError(const std::string &peer, uint64_t requestId,
                  const std::string &message) {
    wire::Envelope envelope;
    envelope.set_protocol_version(wire::PROTOCOL_VERSION);
    envelope.set_request_id(requestId);
    auto *error = envelope.mutable_error();
    error->set_rank(-1);
    error->set_host(host_);
    error->set_message(message);
    error->set_instruction(-1);
    sendFrames(peer, encodeEnvelope(envelope));
  }
  // Bounds of a message's counts (WireLimits.h): false after an error
  // reply.
  bool withinHandleBound(int count, uint64_t requestId) {
    if (count <= kMaxHandlesPerMessage)
      return true;
    replyError(controller_, requestId,
               "message names " + std::to_string(count) +
                   " handles or seeds, more than the limit of " +
                   std::to_string(kMaxHandlesPerMessage));
    return false;
  }
  bool
  distinctHostedRanks(const google::protobuf::RepeatedField<int32_t> &ranks,
                      uint64_t requestId) {
    std::set<int> seen;
    for (int rank : ranks) {
      if (rank < options_.firstRank ||
          rank >= options_.firstRank + options_.numRanks ||
          !seen.insert(rank).second) {
        replyError(
            controller_, requestId,
            "rank " + std::to_string(rank) +
                " is repeated or not hosted by this worker (ranks " +
                std::to_string(options_.firstRank) + "-" +
                std::to_string(options_.firstRank + options_.numRanks - 1) +
                ")");
        return false;
      }
    }
    return true;
  }
  // Empty when the mesh of an upload is within bounds; else why not.
  static std::string checkMeshBounds(const wire::UploadProgram &upload,
                                     const std::vector<int64_t> &meshShape) {
    if (meshShape.size() > static_cast<size_t>(kMaxTensorRank))
      return "mesh of " + std::to_string(meshShape.size()) +
             " dims exceeds the limit of " + std::to_string(kMaxTensorRank);
    int64_t size = 1;
    for (int64_t extent : meshShape) {
      if (extent < 1 || extent > kMaxMeshPositions / size)
        return "mesh extent " + std::to_string(extent) +
               " is below 1 or makes the mesh larger than " +
               std::to_string(kMaxMeshPositions) + " positions";
      size *= extent;
    }
    if (upload.mesh_ranks_size() > kMaxMeshPositions)
      return "upload names more than " + std::to_string(kMaxMeshPositions) +
             " mesh ranks";
    if (upload.mesh_rank_start() < 0 ||
        upload.mesh_rank_start() > kMaxMeshPositions)
      return "mesh_rank_start " + std::to_string(upload.mesh_rank_start()) +
             " is out of range";
    return "";
  }
  /// A rank thread's direct send (Outbox::setDirect): false when the I/O
  /// thread holds the socket or no controller is known yet.
  bool sendDirect(const std::string &payload);
  /// run() with --link-fd: the controller's messages come and go over the
  /// inherited stream socket (StreamLink.h); no ZeroMQ socket exists.
  int runOnLink(std::unique_lock<std::mutex> &socketLock);
  /// One round's work after the messages were handled: the outbox, the
  /// heartbeat and the controller's silence. False: exit.
  bool afterMessages(Clock::time_point &lastBeat, uint64_t &beats);
  /// Starts the rank threads; the controller's silence counts from now.
  void startRanks() {
    for (auto &rank : ranks_) {
      Rank *r = rank.get();
      r->thread = std::thread([this, r] { rankLoop(*r); });
    }
    lastHeard_ = Clock::now();
  }
  /// Stops the rank threads and returns the exit code (the end of run()).
  int finish(std::unique_lock<std::mutex> &socketLock);
  void onFrames(std::vector<zmq::message_t> &frames);
  void onAuthenticated(const std::string &peer);
  void sendHello(const std::string &peer);
  void dispatch(std::shared_ptr<wire::Envelope> shared);
  void startGloo();
  /// Replaces every rank's transports by new ones of generation `number`
  /// (nothing may run on any rank meanwhile); the old ones are destroyed.
  void buildGeneration(uint64_t number);
  /// Handles ResetCommunicators: once every rank has finished the work
  /// queued before it, builds generation `number`, starts its Gloo mesh and
  /// answers ResetReply.
  void resetCommunicators(uint64_t requestId, uint64_t number);

  // ---- rank threads ----
  void enqueue(int rank, std::function<void()> task) {
    Rank &r = *ranks_[rank - options_.firstRank];
    {
      std::lock_guard<std::mutex> lock(r.mutex);
      r.queue.push_back(std::move(task));
    }
    r.wake.notify_one();
  }
  void rankLoop(Rank &r);
  void runProgram(Rank &r, const wire::RunProgram &run, int64_t receivedNs);
  void reportError(int rank, uint64_t programId, const std::string &message) {
    wire::Envelope envelope;
    envelope.set_protocol_version(wire::PROTOCOL_VERSION);
    auto *error = envelope.mutable_error();
    error->set_rank(rank);
    error->set_host(host_);
    error->set_message(message);
    error->set_instruction(failingInstructionOf(message));
    error->set_program_id(programId);
    outbox_.push(envelope);
  }
  void stopRanks();

  WorkerOptions options_;
  std::string host_;
  Outbox outbox_;
  std::shared_ptr<ControllerStore> store_;
  // The GPU of each hosted rank, as the uploads of device meshes give it
  // (a rank's ordinal depends on its host alone, so every mesh agrees):
  // the routers of ranks that share a GPU (sharedGpuRouter) copy device to
  // device among the hosted ranks of one ordinal.
  struct HostedOrdinals {
    std::mutex mutex;
    std::map<int64_t, int32_t> byRank;
    // Every rank of the device meshes uploaded so far, hosted or not: the
    // routers copy through device ipc among processes of this host on one
    // GPU (IpcDeviceCollectives.h).
    std::map<int64_t, int32_t> allByRank;
  };
  std::shared_ptr<HostedOrdinals> hostedOrdinals_ =
      std::make_shared<HostedOrdinals>();
  std::unique_ptr<Communicator> sharedGpuRouter(int rank, Device &device,
                                                Communicator *host);
  // Whether every member of `group` runs on this host, as the host
  // shared-memory transport of hosted rank `rank` decides it.
  bool groupOnThisHost(int rank, const Group &group);
  // Ranks the controller declared lost (PeersLost); the communicators give
  // up waiting for them. Cleared by a reset (the lost workers were
  // replaced).
  std::shared_ptr<PeerHealth> health_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  // Guards the switch of generation_ against startGloo (I/O thread).
  std::mutex generationMutex_;
  std::unique_ptr<Generation> generation_;
  bool needsGloo_ = false;
  bool authenticatedOnce_ = false;

  std::unique_ptr<zmq::context_t> context_;
  std::unique_ptr<zmq::socket_t> socket_;
  std::unique_ptr<StreamLink> link_; // --link-fd: instead of socket_
  // Guards the socket and what the sends read ($DTORCH_DIRECT_SEND): the
  // I/O thread holds it except while it waits in poll; a rank thread sends
  // its reply itself when it gets it.
  std::mutex socketMutex_;
  bool directSend_ = false;
  // Dial-in: says when the Hello must go again (DialInReconnect.h).
  std::unique_ptr<DialInReconnectWatch> reconnectWatch_;
  bool routerMode_ = false;
  bool authenticated_ = false;
  bool helloSent_ = false;
  std::string controller_; // routing id of the controller (router mode)
  Clock::time_point lastHeard_;
  bool stop_ = false;
  int exitCode_ = 0;
  std::atomic<int> finishedRanks_{0};
  std::mutex finishedMutex_;
  std::condition_variable finishedCv_;
};

void Worker::buildGeneration(uint64_t number) {
  auto next = std::make_unique<Generation>();
  next->number = number;
  std::set<int64_t> local;
  for (auto &rank : ranks_)
    local.insert(rank->rank);
  next->hub = std::make_unique<SharedMemoryHub>(local, options_.worldSize,
                                                options_.collectiveTimeout);
  // Large tensors in memory that the other worker processes of this host
  // map: all_reduce between them reads and writes them in place
  // (SharedHostArena.h; $DTORCH_SHARED_ARENA=0 turns it off).
  if (hostSharedMemoryEnabled() && sharedHostArenaWanted())
    enableSharedHostArena();
  HostSharedMemoryOptions hostShm;
  hostShm.deadline = options_.collectiveTimeout;
  hostShm.prefix = generationPrefix("hostshm", number);
  hostShm.health = health_;
  if (!options_.hostId.empty())
    hostShm.hostIdentity = options_.hostId;
  if (!hostSharedMemoryEnabled())
    // A unique identity: no group with this process counts as one host,
    // and every member of such a group agrees on that.
    hostShm.hostIdentity =
        "no-shared-memory|" + host_ + "|" + std::to_string(getpid());
  for (auto &rank : ranks_) {
    int r = rank->rank;
    auto slot = std::make_shared<GlooSlot>();
    next->glooSlots.push_back(slot);
    auto timeout = options_.collectiveTimeout;
    auto routing = std::make_unique<RoutingCommunicator>(
        r, local, next->hub->communicator(r),
        [slot, timeout, r]() -> Communicator * {
          std::unique_lock<std::mutex> lock(slot->mutex);
          if (!slot->ready.wait_for(lock, timeout + std::chrono::seconds(1),
                                    [&] { return slot->done; }))
            throw RuntimeError("rank " + std::to_string(r) +
                               ": gloo mesh not connected in time");
          if (!slot->comm)
            throw RuntimeError("gloo mesh unavailable: " + slot->error);
          return slot->comm.get();
        });
    if (needsGloo_) {
      next->hostComms.push_back(
          makeHostSharedMemoryCommunicator(r, store_, hostShm));
      HostSharedMemoryCommunicator *hostComm = next->hostComms.back().get();
      routing->setHostTransport(hostComm, [hostComm](const Group &group) {
        return hostComm->sameHost(group);
      });
    }
    rank->comm->replace(routing.get());
    next->routing.push_back(std::move(routing));
  }
  std::unique_ptr<Generation> old;
  {
    std::lock_guard<std::mutex> lock(generationMutex_);
    old = std::move(generation_);
    generation_ = std::move(next);
  }
  // `old` goes here: a Gloo mesh of it still connecting in the background
  // keeps its slot alive until it gives up.
}

std::unique_ptr<Communicator> Worker::sharedGpuRouter(int rank, Device &device,
                                                      Communicator *host) {
  if (const char *v = std::getenv("DTORCH_SHARED_GPU_COPIES");
      v && std::string(v) == "0")
    return nullptr; // every collective of such meshes through the host
  // Device copies for a group of hosted ranks on one GPU; device ipc for a
  // group of ranks of several processes of this host on one GPU (unless
  // $DTORCH_GPU_IPC=0 or the backend has no DeviceIpc); the host for any
  // other group (a member elsewhere, or some members on their own GPUs).
  auto ordinals = hostedOrdinals_;
  int64_t first = options_.firstRank, end = first + options_.numRanks;
  DeviceIpc *ipc = ipcDeviceCollectivesWanted() ? deviceIpcOf(device) : nullptr;
  size_t ipcMembers = ipc ? ipc->maxPieces() : 0;
  auto pathOf = [this, rank, ordinals, first, end,
                 ipcMembers](const Group &group) {
    std::vector<MemberPlacement> placed;
    bool hosted = true;
    {
      std::lock_guard<std::mutex> lock(ordinals->mutex);
      for (int64_t member : group) {
        bool mine = member >= first && member < end;
        auto it = ordinals->allByRank.find(member);
        if (it == ordinals->allByRank.end())
          return CollectivePath::Host;
        hosted &= mine;
        // Processes are told apart by hosted or not: a group whose
        // members are all hosted is one process.
        placed.push_back({"", mine ? "this" : "other", it->second});
      }
    }
    CollectivePath path = collectivePathOf(group, [&](int64_t member) {
      return placed[groupIndexOf(group, member)];
    });
    if (path == CollectivePath::SharedDevice && hosted)
      return path;
    if (path == CollectivePath::CrossProcessDevice &&
        group.size() <= ipcMembers && groupOnThisHost(rank, group))
      return path;
    return CollectivePath::Host;
  };
  std::unique_ptr<Communicator> ipcComm;
  if (ipc) {
    IpcDeviceOptions options;
    options.deadline = options_.collectiveTimeout;
    options.health = health_;
    options.prefix = generationPrefix("gpuipc", 0);
    options.currentPrefix = [this] {
      std::lock_guard<std::mutex> lock(generationMutex_);
      return generationPrefix("gpuipc", generation_ ? generation_->number : 0);
    };
    ipcComm = makeIpcDeviceCommunicator(rank, *ipc, store_, options);
  }
  return std::make_unique<DeviceCollectiveRouter>(
      rank, pathOf, nullptr,
      makeSharedDeviceCommunicator(rank, device, options_.collectiveTimeout),
      host, std::move(ipcComm));
}

bool Worker::groupOnThisHost(int rank, const Group &group) {
  HostSharedMemoryCommunicator *hostComm = nullptr;
  {
    std::lock_guard<std::mutex> lock(generationMutex_);
    if (!generation_)
      return false;
    for (size_t i = 0; i < ranks_.size(); ++i)
      if (ranks_[i]->rank == rank && i < generation_->hostComms.size())
        hostComm = generation_->hostComms[i].get();
  }
  return hostComm && hostComm->sameHost(group);
}

void Worker::startGloo() {
  std::lock_guard<std::mutex> lock(generationMutex_);
  Generation &g = *generation_;
  if (!needsGloo_ || g.glooStarted)
    return;
  g.glooStarted = true;
  // Before any collective can run: peers decide from these identities
  // whether a group shares this host.
  for (auto &hostComm : g.hostComms)
    hostComm->publishIdentity();
  for (size_t i = 0; i < ranks_.size(); ++i) {
    int rank = ranks_[i]->rank;
    auto slot = g.glooSlots[i];
    auto store = store_;
    GlooOptions gloo;
    gloo.hostname = options_.glooHost;
    gloo.deadline = options_.collectiveTimeout;
    gloo.prefix = generationPrefix("gloo", g.number);
    gloo.health = health_;
    int worldSize = options_.worldSize;
    std::thread([slot, store, gloo, rank, worldSize]() mutable {
      std::unique_ptr<Communicator> comm;
      std::string error;
      try {
        // The pairs prove membership with the controller's secret, which
        // only authenticated workers can read from its store.
        gloo.pairSecret = store->get(kCollectiveSecretKey, gloo.deadline);
        comm = connectGloo(rank, worldSize, store, gloo);
      } catch (const std::exception &e) {
        error = e.what();
      }
      std::lock_guard<std::mutex> lock(slot->mutex);
      slot->comm = std::move(comm);
      slot->error = error;
      slot->done = true;
      slot->ready.notify_all();
    }).detach();
  }
}

void Worker::resetCommunicators(uint64_t requestId, uint64_t number) {
  // Every rank thread takes the barrier below after the work queued before
  // it; the last one to arrive builds the new generation while the others
  // wait, so no rank runs anything on the transports being replaced.
  struct Barrier {
    std::mutex mutex;
    std::condition_variable done;
    size_t remaining;
    bool built = false;
  };
  auto barrier = std::make_shared<Barrier>();
  barrier->remaining = ranks_.size();
  for (auto &rank : ranks_)
    enqueue(rank->rank, [this, barrier, requestId, number, r = rank.get()] {
      // This rank's device communicators (NCCL) belong to the old world:
      // rebuilt for the new generation's keys; they connect at their first
      // collective, as at the start.
      r->state->replaceDeviceCommunicators([&](Device &device) {
        return makeDeviceCommunicator(r->rank, device, store_,
                                      options_.collectiveTimeout,
                                      generationPrefix("nccl", number));
      });
      std::unique_lock<std::mutex> lock(barrier->mutex);
      if (--barrier->remaining != 0) {
        barrier->done.wait(lock, [&] { return barrier->built; });
        return;
      }
      // The ranks the controller declared lost were replaced: the new
      // generation waits for them again.
      health_->clear();
      buildGeneration(number);
      if (authenticatedOnce_)
        startGloo();
      barrier->built = true;
      barrier->done.notify_all();
      wire::Envelope reply;
      reply.set_protocol_version(wire::PROTOCOL_VERSION);
      reply.set_request_id(requestId);
      reply.mutable_reset_reply()->set_generation(number);
      outbox_.push(reply);
    });
}

void Worker::sendHello(const std::string &peer) {
  wire::Envelope envelope;
  envelope.set_protocol_version(wire::PROTOCOL_VERSION);
  auto *hello = envelope.mutable_hello();
  *hello = makeHello(wire::ROLE_WORKER, options_.token);
  hello->set_first_rank(options_.firstRank);
  hello->set_num_ranks(options_.numRanks);
  hello->set_world_size(options_.worldSize);
  std::string whyNoCuda;
  hello->set_cuda_devices(deviceCount("cuda", &whyNoCuda));
  hello->set_cuda_unavailable(whyNoCuda);
  sendFrames(peer, encodeEnvelope(envelope));
  helloSent_ = true;
}

void Worker::onAuthenticated(const std::string &peer) {
  authenticated_ = true;
  authenticatedOnce_ = true;
  controller_ = peer;
  lastHeard_ = Clock::now();
  if (!helloSent_)
    sendHello(peer);
  startGloo();
}

void Worker::onFrames(std::vector<zmq::message_t> &frames) {
  if (frames.empty())
    return;
  std::string peer = routerMode_ ? frames.front().to_string() : std::string();
  const zmq::message_t &payload = frames.back();
  bool fromController = authenticated_ && (!routerMode_ || peer == controller_);
  if (static_cast<int64_t>(payload.size()) >
      options_.transport.maxMessageBytes) {
    replyError(peer, 0,
               "message of " + std::to_string(payload.size()) +
                   " bytes exceeds the limit of " +
                   std::to_string(options_.transport.maxMessageBytes) +
                   " bytes");
    return;
  }
  std::shared_ptr<wire::Envelope> parsed;
  if ((routerMode_ && frames.size() != 2) ||
      (!routerMode_ && frames.size() != 1) ||
      !(parsed = decodeEnvelopeInArena(payload.data(), payload.size()))) {
    replyError(peer, 0,
               "malformed message (" + std::to_string(payload.size()) +
                   " bytes)");
    return;
  }
  wire::Envelope &envelope = *parsed;
  if (!fromController) {
    if (envelope.body_case() != wire::Envelope::kHello) {
      if (envelope.body_case() == wire::Envelope::kError && !routerMode_) {
        // The controller refused our Hello: nothing can ever work.
        std::fprintf(stderr,
                     "dtorch-worker: controller refused the handshake: %s\n",
                     envelope.error().message().c_str());
        stop_ = true;
        exitCode_ = 2;
        return;
      }
      replyError(peer, envelope.request_id(),
                 "not authenticated: the first message must be a Hello with "
                 "the shared token");
      return;
    }
    std::string reason =
        checkHello(envelope.hello(), options_.token, wire::ROLE_CONTROLLER);
    if (reason.empty() && routerMode_ && authenticated_)
      reason = "this worker already serves another controller";
    if (!reason.empty()) {
      replyError(peer, envelope.request_id(), "handshake refused: " + reason);
      return;
    }
    onAuthenticated(peer);
    return;
  }
  lastHeard_ = Clock::now();
  dispatch(std::move(parsed));
}

void Worker::dispatch(std::shared_ptr<wire::Envelope> shared) {
  uint64_t requestId = shared->request_id();
  auto hosted = [&](int rank) {
    if (rank >= options_.firstRank &&
        rank < options_.firstRank + options_.numRanks)
      return true;
    replyError(controller_, requestId,
               "rank " + std::to_string(rank) +
                   " is not hosted by this worker (ranks " +
                   std::to_string(options_.firstRank) + "-" +
                   std::to_string(options_.firstRank + options_.numRanks - 1) +
                   ")");
    return false;
  };
  switch (shared->body_case()) {
  case wire::Envelope::kUpload: {
    // Every hosted rank of the mesh keeps the class program of its position.
    const wire::UploadProgram &upload = shared->upload();
    std::vector<int64_t> meshShape;
    if (upload.programs_size() > 0)
      meshShape.assign(upload.programs(0).mesh_shape().begin(),
                       upload.programs(0).mesh_shape().end());
    std::shared_ptr<const MeshRanks> mesh;
    std::string invalid = checkMeshBounds(upload, meshShape);
    std::vector<int64_t> meshRanks(upload.mesh_ranks().begin(),
                                   upload.mesh_ranks().end());
    if (invalid.empty()) {
      try {
        // Bounded (kMaxMeshPositions) before a rank list is made.
        if (meshRanks.empty())
          meshRanks = consecutiveMeshRanks(meshShape, upload.mesh_rank_start());
        mesh = std::make_shared<const MeshRanks>(meshShape, meshRanks);
      } catch (const std::exception &e) {
        invalid = e.what();
      }
    }
    // The mesh's device: each rank of it computes on the GPU the controller
    // gave its position (DevicePlacement.h).
    std::string deviceType = upload.device_type();
    bool onDevice = !deviceType.empty() && deviceType != "cpu";
    if (invalid.empty() && onDevice && mesh &&
        upload.device_ordinals_size() != static_cast<int>(meshRanks.size()))
      invalid = "upload for device '" + deviceType + "' has " +
                std::to_string(upload.device_ordinals_size()) +
                " device ordinals for a mesh of " +
                std::to_string(meshRanks.size()) + " positions";
    if (invalid.empty() && onDevice && mesh) {
      std::lock_guard<std::mutex> lock(hostedOrdinals_->mutex);
      for (size_t i = 0; i < meshRanks.size(); ++i) {
        if (meshRanks[i] >= options_.firstRank &&
            meshRanks[i] < options_.firstRank + options_.numRanks)
          hostedOrdinals_->byRank[meshRanks[i]] =
              upload.device_ordinals(static_cast<int>(i));
        hostedOrdinals_->allByRank[meshRanks[i]] =
            upload.device_ordinals(static_cast<int>(i));
      }
    }
    auto classes = std::make_shared<std::vector<const wire::Program *>>();
    for (const wire::Program &program : upload.programs())
      classes->push_back(&program);
    // The ranks of this process share what needs no rank to prepare.
    auto preparation = std::make_shared<SharedPreparation>(shared);
    for (int r = options_.firstRank; r < options_.firstRank + options_.numRanks;
         ++r) {
      // An upload refused before its ranks were read is refused on every
      // rank of this process, so a run of it reports why.
      bool inMesh = mesh ? mesh->positionOf(r) >= 0
                         : meshRanks.empty() ||
                               std::find(meshRanks.begin(), meshRanks.end(),
                                         r) != meshRanks.end();
      if (!inMesh)
        continue;
      int ordinal = onDevice && mesh && invalid.empty()
                        ? upload.device_ordinals(mesh->positionOf(r))
                        : 0;
      bool deviceCollectives = onDevice && upload.device_collectives();
      enqueue(r, [this, shared, classes, preparation, mesh, invalid, r,
                  onDevice, deviceType, ordinal, deviceCollectives] {
        Rank &state = *ranks_[r - options_.firstRank];
        uint64_t id = shared->upload().program_id();
        if (!mesh || !invalid.empty()) {
          state.state->reject(id, invalid);
          return;
        }
        Device *device = nullptr;
        if (onDevice) {
          try {
            device = &deviceOfType(deviceType, ordinal);
          } catch (const std::exception &e) {
            state.state->reject(
                id, "rank " + std::to_string(r) + " on host " + host_ +
                        " cannot compute on " + deviceType + ":" +
                        std::to_string(ordinal) + ": " + e.what());
            return;
          }
        }
        if (deviceCollectives && !state.state->hasDeviceCommunicator(*device)) {
          // Made once per rank and device; it connects each group at its
          // first collective (NCCL: the unique id through the store).
          uint64_t generation;
          {
            std::lock_guard<std::mutex> lock(generationMutex_);
            generation = generation_->number;
          }
          if (auto comm = makeDeviceCommunicator(
                  r, *device, store_, options_.collectiveTimeout,
                  generationPrefix("nccl", generation)))
            state.state->setDeviceCommunicator(*device, std::move(comm));
        }
        if (onDevice && !deviceCollectives &&
            !state.state->hasSharedDeviceCommunicator(*device))
          if (auto router = sharedGpuRouter(r, *device, state.comm.get()))
            state.state->setSharedDeviceCommunicator(*device,
                                                     std::move(router));
        state.state->upload(id, *classes, RankContext::of(mesh, r),
                            preparation.get(), device, deviceCollectives);
      });
    }
    return;
  }
  case wire::Envelope::kRun: {
    // One message for several ranks of this process: each rank's thread runs
    // its own program under the id. Checked as a whole before any rank runs,
    // so a bad rank list runs nothing.
    const auto &ranks = shared->run().ranks();
    if (ranks.empty()) {
      replyError(controller_, requestId, "run names no rank");
      return;
    }
    if (!withinHandleBound(shared->run().inputs_size(), requestId) ||
        !withinHandleBound(shared->run().outputs_size(), requestId) ||
        !withinHandleBound(shared->run().seeds_size(), requestId) ||
        !withinHandleBound(shared->run().donated_size(), requestId) ||
        !distinctHostedRanks(ranks, requestId))
      return;
    int64_t received = traceClockNs(); // where the run's setup begins
    for (int rank : ranks)
      enqueue(rank, [this, shared, rank, received] {
        runProgram(*ranks_[rank - options_.firstRank], shared->run(), received);
      });
    return;
  }
  case wire::Envelope::kSpeculate: {
    // Each rank named starts, extends or drops its paused speculative run
    // (RankState::speculate), in order with its other work.
    const wire::Speculate &speculate = shared->speculate();
    if (!withinHandleBound(speculate.inputs_size(), requestId) ||
        !distinctHostedRanks(speculate.ranks(), requestId))
      return;
    for (int rank : speculate.ranks())
      enqueue(rank, [this, shared, rank] {
        serveSpeculate(*ranks_[rank - options_.firstRank]->state,
                       shared->speculate());
      });
    return;
  }
  case wire::Envelope::kPut: {
    int rank = shared->put().rank();
    if (!hosted(rank))
      return;
    enqueue(rank, [this, shared, rank] {
      Rank &r = *ranks_[rank - options_.firstRank];
      uint64_t handle = shared->put().handle();
      try {
        r.state->put(handle, tensorFromWire(shared->put().value()));
      } catch (const std::exception &e) {
        std::string message =
            "put of tensor " + std::to_string(handle) + " failed: " + e.what();
        r.state->poison(handle, message);
        reportError(rank, 0, message);
      }
    });
    return;
  }
  case wire::Envelope::kFetch: {
    int rank = shared->fetch().rank();
    if (!hosted(rank))
      return;
    enqueue(rank, [this, shared, rank, requestId] {
      Rank &r = *ranks_[rank - options_.firstRank];
      uint64_t handle = shared->fetch().handle();
      wire::Envelope reply;
      reply.set_protocol_version(wire::PROTOCOL_VERSION);
      reply.set_request_id(requestId);
      auto *fetched = reply.mutable_fetch_reply();
      fetched->set_rank(rank);
      fetched->set_handle(handle);
      try {
        tensorToWire(r.state->fetchToHost(handle), fetched->mutable_value());
        fetched->set_ok(true);
      } catch (const std::exception &e) {
        std::string message = e.what();
        fetched->clear_value();
        fetched->set_ok(false);
        fetched->mutable_error()->set_rank(rank);
        fetched->mutable_error()->set_host(host_);
        fetched->mutable_error()->set_message(message);
        fetched->mutable_error()->set_instruction(
            failingInstructionOf(message));
      }
      outbox_.push(reply);
    });
    return;
  }
  case wire::Envelope::kMemoryStats: {
    // Queued behind the rank's earlier work, so the table it reads reflects
    // every put, run and free sent before it.
    int rank = shared->memory_stats().rank();
    if (!hosted(rank))
      return;
    enqueue(rank, [this, rank, requestId] {
      Rank &r = *ranks_[rank - options_.firstRank];
      wire::Envelope reply;
      reply.set_protocol_version(wire::PROTOCOL_VERSION);
      reply.set_request_id(requestId);
      memoryStatsToWire(r.state->memoryStats(),
                        reply.mutable_memory_stats_reply());
      outbox_.push(reply);
    });
    return;
  }
  case wire::Envelope::kTrace: {
    // Queued behind the rank's earlier work: a DRAIN holds every run sent
    // before it.
    int rank = shared->trace().rank();
    if (!hosted(rank))
      return;
    if (shared->trace().capacity() > kMaxTraceCapacity) {
      replyError(controller_, requestId,
                 "trace capacity " +
                     std::to_string(shared->trace().capacity()) +
                     " exceeds the limit of " +
                     std::to_string(kMaxTraceCapacity) + " events");
      return;
    }
    enqueue(rank, [this, shared, rank, requestId] {
      Rank &r = *ranks_[rank - options_.firstRank];
      const wire::TraceRequest &request = shared->trace();
      TraceChunk chunk = r.state->trace(
          request.action() == wire::TraceRequest::START ? TraceAction::Start
                                                        : TraceAction::Drain,
          request.capacity() ? request.capacity()
                             : TraceBuffer::kDefaultCapacity,
          request.max_events());
      chunk.host = host_;
      wire::Envelope reply;
      reply.set_protocol_version(wire::PROTOCOL_VERSION);
      reply.set_request_id(requestId);
      traceChunkToWire(chunk, reply.mutable_trace_reply());
      outbox_.push(reply);
    });
    return;
  }
  case wire::Envelope::kCheckpoint: {
    // Queued behind the rank's earlier work: a save writes the values of
    // every run sent before it, and a loaded tensor exists for every run
    // sent after it (runtime/lib/CheckpointIO.cpp).
    int rank = shared->checkpoint().rank();
    if (!hosted(rank))
      return;
    enqueue(rank, [this, shared, rank, requestId] {
      Rank &r = *ranks_[rank - options_.firstRank];
      wire::Envelope reply;
      reply.set_protocol_version(wire::PROTOCOL_VERSION);
      reply.set_request_id(requestId);
      *reply.mutable_checkpoint_reply() =
          serveCheckpointRequest(*r.state, shared->checkpoint());
      outbox_.push(reply);
    });
    return;
  }
  case wire::Envelope::kFree: {
    const auto &ranks = shared->free().ranks();
    if (!withinHandleBound(shared->free().handles_size(), requestId) ||
        !distinctHostedRanks(ranks, requestId))
      return;
    for (int rank : ranks)
      enqueue(rank, [this, shared, rank] {
        Rank &r = *ranks_[rank - options_.firstRank];
        const auto &handles = shared->free().handles();
        r.state->free(std::vector<uint64_t>(handles.begin(), handles.end()));
      });
    return;
  }
  case wire::Envelope::kSync: {
    auto remaining =
        std::make_shared<std::atomic<int>>(static_cast<int>(ranks_.size()));
    for (auto &rank : ranks_)
      enqueue(rank->rank, [this, remaining, requestId] {
        if (--*remaining != 0)
          return;
        wire::Envelope reply;
        reply.set_protocol_version(wire::PROTOCOL_VERSION);
        reply.set_request_id(requestId);
        reply.mutable_sync_reply();
        outbox_.push(reply);
      });
    return;
  }
  case wire::Envelope::kHeartbeat:
  case wire::Envelope::kHello:
    return;
  case wire::Envelope::kShutdown:
    stop_ = true;
    return;
  case wire::Envelope::kReset:
    resetCommunicators(requestId, shared->reset().generation());
    return;
  case wire::Envelope::kKvReply:
    if (!shared->kv_reply().error().empty())
      store_->fail(requestId, shared->kv_reply().key(),
                   shared->kv_reply().error());
    else
      store_->deliver(requestId, shared->kv_reply().value());
    return;
  case wire::Envelope::kPeersLost: {
    // Runs on this I/O thread: interrupts the rank threads' waits at once.
    const wire::PeersLost &lost = shared->peers_lost();
    health_->declareDead(
        std::vector<int64_t>(lost.ranks().begin(), lost.ranks().end()),
        lost.reason());
    return;
  }
  default:
    replyError(controller_, requestId,
               "unexpected message (body " +
                   std::to_string(shared->body_case()) + ")");
    return;
  }
}

void Worker::runProgram(Rank &r, const wire::RunProgram &run,
                        int64_t receivedNs) {
  // The message's lists: the rank's vectors, refilled in place, with the
  // fast setup (Executor::fastSetup); else the run's own.
  Rank::RunLists own;
  Rank::RunLists &lists = r.state->fastSetup() ? r.runLists : own;
  lists.inputs.assign(run.inputs().begin(), run.inputs().end());
  lists.outputs.assign(run.outputs().begin(), run.outputs().end());
  lists.seeds.assign(run.seeds().begin(), run.seeds().end());
  lists.donated.assign(run.donated().begin(), run.donated().end());
  if (std::optional<std::string> error = r.state->run(
          run.program_id(), lists.inputs, lists.outputs, lists.seeds,
          lists.donated, run.speculation_id(), receivedNs))
    reportError(r.rank, run.program_id(), *error);
}

bool Worker::sendDirect(const std::string &payload) {
  std::unique_lock<std::mutex> lock(socketMutex_, std::try_to_lock);
  if (!lock.owns_lock() || (!socket_ && !link_) || stop_ ||
      (routerMode_ && !authenticated_))
    return false;
  try {
    sendFrames(controller_, payload);
    // The socket's descriptor is edge-triggered: this send may have taken
    // the notice of a message that arrived meanwhile; the I/O thread is
    // woken to read it.
    if (socket_ && (socket_->get(zmq::sockopt::events) & ZMQ_POLLIN))
      outbox_.wake();
  } catch (const zmq::error_t &) {
    // As on the I/O thread: the controller's silence is seen elsewhere.
  }
  return true;
}

void Worker::rankLoop(Rank &r) {
  // Named for per-thread CPU accounting (bench/step_thread_cpu.py).
  pthread_setname_np(pthread_self(), "dtorch-rank");
  // Before its first kernel: the BLAS and OpenMP threads it starts inherit
  // the CPUs.
  pinCurrentThread(r.cpus);
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(r.mutex);
      r.wake.wait(lock, [&] { return r.stopping || !r.queue.empty(); });
      if (r.stopping)
        break;
      task = std::move(r.queue.front());
      r.queue.pop_front();
    }
    try {
      task();
    } catch (const std::exception &e) {
      reportError(r.rank, 0, std::string("internal error: ") + e.what());
    }
  }
  ++finishedRanks_;
  std::lock_guard<std::mutex> lock(finishedMutex_);
  finishedCv_.notify_all();
}

void Worker::stopRanks() {
  for (auto &rank : ranks_) {
    std::lock_guard<std::mutex> lock(rank->mutex);
    rank->stopping = true;
    rank->wake.notify_all();
  }
  std::unique_lock<std::mutex> lock(finishedMutex_);
  bool all = finishedCv_.wait_for(lock, std::chrono::milliseconds(500), [&] {
    return finishedRanks_ == static_cast<int>(ranks_.size());
  });
  lock.unlock();
  // A rank stuck in a collective is left behind; the process exits anyway.
  for (auto &rank : ranks_) {
    if (all)
      rank->thread.join();
    else
      rank->thread.detach();
  }
}

int Worker::run() {
  // Held except while waiting in poll (direct sends).
  std::unique_lock<std::mutex> socketLock(socketMutex_);
  if (const char *v = std::getenv("DTORCH_DIRECT_SEND");
      !v || std::string(v) != "0") {
    directSend_ = true;
    outbox_.setDirect(
        [this](const std::string &payload) { return sendDirect(payload); });
  }
  routerMode_ = !options_.listen.empty();
  if (options_.linkFd >= 0)
    return runOnLink(socketLock);
  context_ = std::make_unique<zmq::context_t>(1);
  socket_ = std::make_unique<zmq::socket_t>(
      *context_,
      routerMode_ ? zmq::socket_type::router : zmq::socket_type::dealer);
  configureSocket(*socket_, options_.transport);
  // CURVE: the listening worker is the server and lets in only the
  // controller's key (ZAP); a connecting worker is the client.
  std::unique_ptr<ZapAuthenticator> zap;
  if (!options_.curveSecretKey.empty()) {
    if (routerMode_) {
      zap = std::make_unique<ZapAuthenticator>(
          *context_,
          std::vector<std::string>{options_.curveControllerPublicKey});
      makeCurveServer(*socket_, options_.curveSecretKey);
    } else {
      makeCurveClient(*socket_, options_.curveSecretKey,
                      options_.curveControllerPublicKey);
    }
  }
  if (routerMode_) {
    try {
      socket_->bind(options_.listen);
    } catch (const zmq::error_t &error) {
      throw RuntimeError("cannot listen on " + options_.listen + ": " +
                         error.what() +
                         (error.num() == EADDRINUSE
                              ? " (another process holds this port: choose "
                                "another --listen address)"
                              : ""));
    }
    std::printf("dtorch-worker listening on %s (ranks %d-%d of %d)\n",
                socket_->get(zmq::sockopt::last_endpoint).c_str(),
                options_.firstRank, options_.firstRank + options_.numRanks - 1,
                options_.worldSize);
    std::fflush(stdout);
  } else {
    if (options_.dialIn)
      reconnectWatch_ =
          std::make_unique<DialInReconnectWatch>(*context_, *socket_);
    socket_->connect(options_.connect);
    sendHello("");
  }
  startRanks();
  auto lastBeat = Clock::now();
  uint64_t beats = 0;
  while (!stop_) {
    zmq::pollitem_t items[3] = {
        {socket_->handle(), 0, ZMQ_POLLIN, 0},
        {nullptr, outbox_.fd(), ZMQ_POLLIN, 0},
        {zap ? zap->socket().handle() : nullptr, -1, ZMQ_POLLIN, 0}};
    if (directSend_) {
      // Rank threads send while this one waits: it polls the socket's
      // descriptor (edge-triggered, so only when nothing is ready to read),
      // never the socket itself.
      if (!(socket_->get(zmq::sockopt::events) & ZMQ_POLLIN)) {
        items[0].socket = nullptr;
        items[0].fd = socket_->get(zmq::sockopt::fd);
        socketLock.unlock();
        zmq::poll(items, zap ? 3 : 2, std::chrono::milliseconds(50));
        socketLock.lock();
      }
    } else {
      zmq::poll(items, zap ? 3 : 2, std::chrono::milliseconds(50));
    }
    // A refused client retries every 100 ms: say so once, then every 100th.
    if (zap && zap->handle() > 0 &&
        (zap->refusedCount() == 1 || zap->refusedCount() % 100 == 0))
      std::fprintf(stderr,
                   "dtorch-worker: refused %llu connection(s) whose CURVE key "
                   "is not the controller's\n",
                   static_cast<unsigned long long>(zap->refusedCount()));
    while (!stop_) {
      std::vector<zmq::message_t> frames;
      zmq::message_t frame;
      if (!socket_->recv(frame, zmq::recv_flags::dontwait))
        break;
      frames.push_back(std::move(frame));
      while (frames.back().more()) {
        zmq::message_t next;
        if (!socket_->recv(next, zmq::recv_flags::none))
          break;
        frames.push_back(std::move(next));
      }
      onFrames(frames);
    }
    // A dialing worker not admitted yet whose connection closed and was
    // made again says Hello again (the controller forgot the old one).
    if (reconnectWatch_ && reconnectWatch_->reconnected() &&
        !authenticatedOnce_)
      sendHello("");
    if (!afterMessages(lastBeat, beats))
      break;
  }
  return finish(socketLock);
}

bool Worker::afterMessages(Clock::time_point &lastBeat, uint64_t &beats) {
  for (auto &payload : outbox_.drain())
    if (authenticated_ || !routerMode_)
      sendFrames(controller_, payload);
  auto now = Clock::now();
  if (authenticated_ &&
      now - lastBeat >= options_.transport.heartbeatInterval) {
    wire::Envelope beat;
    beat.set_protocol_version(wire::PROTOCOL_VERSION);
    beat.mutable_heartbeat()->set_sequence(++beats);
    sendFrames(controller_, encodeEnvelope(beat));
    lastBeat = now;
  }
  // A dialing worker waits longer for the controller's first answer: the
  // controller may start later, and answers once the world is complete.
  std::chrono::milliseconds silence = options_.dialIn && !authenticatedOnce_
                                          ? options_.controllerWait
                                          : options_.controllerTimeout;
  if ((authenticated_ || !routerMode_) && now - lastHeard_ > silence) {
    std::fprintf(stderr,
                 "dtorch-worker (ranks %d-%d): controller %s for %lld "
                 "ms, exiting\n",
                 options_.firstRank, options_.firstRank + options_.numRanks - 1,
                 options_.dialIn && !authenticatedOnce_
                     ? ("at " + options_.connect + " did not answer").c_str()
                     : "silent",
                 static_cast<long long>(silence.count()));
    exitCode_ = 3;
    return false;
  }
  return true;
}

int Worker::finish(std::unique_lock<std::mutex> &socketLock) {
  stop_ = true;        // no direct send after this
  socketLock.unlock(); // a rank thread may be sending its last reply
  stopRanks();
  socketLock.lock();
  if (socket_)
    socket_->close();
  // Not destroying context_ on purpose: detached threads may still hold
  // sockets-free references; the process exits right after.
  context_.release();
  return exitCode_;
}

int Worker::runOnLink(std::unique_lock<std::mutex> &socketLock) {
  // What libzmq's maxmsgsize bounds on a ZeroMQ link (a larger message is
  // answered with an error in onFrames, a much larger one closes the link).
  link_ = std::make_unique<StreamLink>(
      options_.linkFd,
      static_cast<uint64_t>(zmqMessageSizeCap(options_.transport)),
      [this] { outbox_.wake(); });
  sendHello("");
  startRanks();
  auto lastBeat = Clock::now();
  uint64_t beats = 0;
  std::vector<std::string> messages;
  while (!stop_) {
    pollfd items[2] = {
        {link_->fd(),
         static_cast<short>(POLLIN | (link_->wantsWrite() ? POLLOUT : 0)), 0},
        {outbox_.fd(), POLLIN, 0}};
    // Rank threads send while this one waits (direct sends).
    socketLock.unlock();
    ::poll(items, 2, 50);
    socketLock.lock();
    if (items[0].revents & POLLOUT)
      link_->flush();
    messages.clear();
    bool open = link_->receive(messages);
    for (std::string &message : messages) {
      if (stop_)
        break;
      std::vector<zmq::message_t> frames;
      frames.push_back(owningMessage(std::move(message)));
      onFrames(frames);
    }
    if (!open && !stop_) {
      std::fprintf(stderr,
                   "dtorch-worker (ranks %d-%d): the link to the controller "
                   "closed (%s), exiting\n",
                   options_.firstRank,
                   options_.firstRank + options_.numRanks - 1,
                   link_->closeReason().c_str());
      exitCode_ = 3;
      break;
    }
    if (!afterMessages(lastBeat, beats))
      break;
  }
  return finish(socketLock);
}

} // namespace

int runWorker(const WorkerOptions &options) {
  if (!options.generateCurveKeyPairPrefix.empty()) {
    CurveKeyPair pair =
        writeCurveKeyPairFiles(options.generateCurveKeyPairPrefix);
    std::printf("wrote %s.key (secret, mode 0600) and %s.pub (public key %s)\n",
                options.generateCurveKeyPairPrefix.c_str(),
                options.generateCurveKeyPairPrefix.c_str(),
                pair.publicKey.c_str());
    return 0;
  }
  if (options.tokenOnCommandLine)
    std::fprintf(stderr,
                 "dtorch-worker: warning: --token puts the secret on the "
                 "command line, where `ps` shows it to every user; use "
                 "--token-file PATH or $DTORCH_TOKEN\n");
  // The BLAS is chosen and loaded before any rank thread exists (OpenBLAS's
  // core type goes through the environment), with this rank's core share.
  int ranksOnHost = ranksOnHostOf(options);
  blas::configureForHost(ranksOnHost);
  // With DTORCH_PIN_RANKS=1, each rank thread gets CPUs of its own when the
  // host's ranks do not outnumber its CPUs; the whole process (its message,
  // ZeroMQ and helper threads, started below) keeps to its ranks' CPUs, so that
  // handing a message to a rank thread wakes no other CPU.
  bool pinRanks = rankPinningEnabled(); // a bad value fails the start
  std::vector<int> hostCpus = affinityCpuList();
  std::vector<std::vector<int>> rankCpus;
  for (int r = options.firstRank; r < options.firstRank + options.numRanks; ++r)
    rankCpus.push_back(
        pinRanks ? rankCpuSlice(hostCpus, r, ranksOnHost, blas::threads())
                 : std::vector<int>());
  pinCurrentThread(unionOfCpus(rankCpus));
  std::string blasLine;
  try {
    blas::load();
    blasLine = blas::describe();
  } catch (const std::exception &e) {
    blasLine = std::string("unavailable: ") + e.what();
  }
  const char *verbose = std::getenv("DTORCH_BLAS_VERBOSE");
  if (!options.listen.empty() || (verbose && *verbose && *verbose != '0'))
    std::fprintf(
        stderr, "dtorch-worker (ranks %d-%d, %d on this host): %s; %s\n",
        options.firstRank, options.firstRank + options.numRanks - 1,
        ranksOnHost, blasLine.c_str(),
        describeRankPinning(pinRanks, hostCpus, options.firstRank,
                            options.numRanks, ranksOnHost, blas::threads())
            .c_str());
  if (options.dialIn)
    std::fprintf(stderr,
                 "dtorch-worker: ranks %d-%d of %d%s%s, dialing the controller "
                 "at %s (waiting up to %lld ms), collectives on %s\n",
                 options.firstRank, options.firstRank + options.numRanks - 1,
                 options.worldSize,
                 options.launchDescription.empty() ? "" : ", placed by ",
                 options.launchDescription.c_str(), options.connect.c_str(),
                 static_cast<long long>(options.controllerWait.count()),
                 options.glooHost.c_str());
  else if (!options.launchDescription.empty())
    std::fprintf(stderr,
                 "dtorch-worker: placed by %s: ranks %d-%d of %d, listening "
                 "on %s, collectives on %s\n",
                 options.launchDescription.c_str(), options.firstRank,
                 options.firstRank + options.numRanks - 1, options.worldSize,
                 options.listen.c_str(), options.glooHost.c_str());
  // Deliberately leaked: a rank stuck in a collective may still use it, and
  // the process exits right after.
  auto *worker = new Worker(options, rankCpus);
  return worker->run();
}

} // namespace dtorch::rt
