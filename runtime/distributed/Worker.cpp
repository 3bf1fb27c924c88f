#include "dtorch/runtime/Worker.h"

#include "dtorch/runtime/Device.h"
#include "dtorch/runtime/DevicePlacement.h"

#include "ReplaceableCommunicator.h"

#include "dtorch/runtime/Blas.h"
#include "dtorch/runtime/Checkpoint.h"
#include "dtorch/runtime/GlooCollectives.h"
#include "dtorch/runtime/HostSharedMemoryCollectives.h"
#include "dtorch/runtime/IpcDeviceCollectives.h"
#include "dtorch/runtime/PeerHealth.h"
#include "dtorch/runtime/RankState.h"
#include "dtorch/runtime/Security.h"
#include "dtorch/runtime/SharedDeviceCollectives.h"
#include "dtorch/runtime/SharedHostArena.h"
#include "dtorch/runtime/SharedMemoryCollectives.h"
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
#include <set>
#include <sys/eventfd.h>
#include <thread>
#include <unistd.h>

namespace dtorch::rt {

namespace wire = ::dtorch::wire;

namespace {

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
  void push(const wire::Envelope &envelope) {
    std::string bytes = encodeEnvelope(envelope);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(bytes));
    }
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
  std::thread thread;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  // Forwards to the transports of the current generation (Generation).
  std::unique_ptr<ReplaceableCommunicator> comm;
  std::unique_ptr<RankState> state; // owned by the rank thread
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
  explicit Worker(const WorkerOptions &options)
      : options_(options), host_(localHostName()),
        store_(std::make_shared<ControllerStore>(outbox_)),
        health_(std::make_shared<PeerHealth>()) {
    needsGloo_ = options.numRanks < options.worldSize;
    for (int r = options.firstRank; r < options.firstRank + options.numRanks;
         ++r) {
      auto rank = std::make_unique<Rank>();
      rank->rank = r;
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
  void runProgram(Rank &r, const wire::RunProgram &run);
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
    for (int rank : ranks)
      enqueue(rank, [this, shared, rank] {
        runProgram(*ranks_[rank - options_.firstRank], shared->run());
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

void Worker::runProgram(Rank &r, const wire::RunProgram &run) {
  std::vector<uint64_t> inputs(run.inputs().begin(), run.inputs().end());
  std::vector<uint64_t> outputs(run.outputs().begin(), run.outputs().end());
  std::vector<int64_t> seeds(run.seeds().begin(), run.seeds().end());
  std::vector<uint64_t> donated(run.donated().begin(), run.donated().end());
  if (std::optional<std::string> error =
          r.state->run(run.program_id(), inputs, outputs, seeds, donated,
                       run.speculation_id()))
    reportError(r.rank, run.program_id(), *error);
}

void Worker::rankLoop(Rank &r) {
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
  context_ = std::make_unique<zmq::context_t>(1);
  routerMode_ = !options_.listen.empty();
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
    socket_->connect(options_.connect);
    sendHello("");
  }
  for (auto &rank : ranks_) {
    Rank *r = rank.get();
    r->thread = std::thread([this, r] { rankLoop(*r); });
  }
  lastHeard_ = Clock::now();
  auto lastBeat = Clock::now();
  uint64_t beats = 0;
  while (!stop_) {
    zmq::pollitem_t items[3] = {
        {socket_->handle(), 0, ZMQ_POLLIN, 0},
        {nullptr, outbox_.fd(), ZMQ_POLLIN, 0},
        {zap ? zap->socket().handle() : nullptr, -1, ZMQ_POLLIN, 0}};
    zmq::poll(items, zap ? 3 : 2, std::chrono::milliseconds(50));
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
    if ((authenticated_ || !routerMode_) &&
        now - lastHeard_ > options_.controllerTimeout) {
      std::fprintf(stderr,
                   "dtorch-worker (ranks %d-%d): controller silent for %lld "
                   "ms, exiting\n",
                   options_.firstRank,
                   options_.firstRank + options_.numRanks - 1,
                   static_cast<long long>(options_.controllerTimeout.count()));
      exitCode_ = 3;
      break;
    }
  }
  stopRanks();
  socket_->close();
  // Not destroying context_ on purpose: detached threads may still hold
  // sockets-free references; the process exits right after.
  context_.release();
  return exitCode_;
}

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
      "[--max-message-bytes B] "
      "[--collective-address HOST] [--ranks-on-host N] [--generation G] "
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
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc)
      throw RuntimeError("missing value for " + flag + "\n" + usage);
    std::string value = argv[++i];
    if (flag == "--connect")
      options.connect = value;
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
  bool needsPlacement = options.connect.empty() &&
                        (options.listen.empty() || !haveRanks || !haveWorld);
  launch.listenGiven = !options.listen.empty();
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
    } else if (options.listen.empty() && launch.basePort > 0) {
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
  int ranksOnHost =
      options.ranksOnHost > 0 ? options.ranksOnHost : options.numRanks;
  blas::configureForHost(ranksOnHost);
  std::string blasLine;
  try {
    blas::load();
    blasLine = blas::describe();
  } catch (const std::exception &e) {
    blasLine = std::string("unavailable: ") + e.what();
  }
  const char *verbose = std::getenv("DTORCH_BLAS_VERBOSE");
  if (!options.listen.empty() || (verbose && *verbose && *verbose != '0'))
    std::fprintf(stderr, "dtorch-worker (ranks %d-%d, %d on this host): %s\n",
                 options.firstRank, options.firstRank + options.numRanks - 1,
                 ranksOnHost, blasLine.c_str());
  if (!options.launchDescription.empty())
    std::fprintf(stderr,
                 "dtorch-worker: placed by %s: ranks %d-%d of %d, listening "
                 "on %s, collectives on %s\n",
                 options.launchDescription.c_str(), options.firstRank,
                 options.firstRank + options.numRanks - 1, options.worldSize,
                 options.listen.c_str(), options.glooHost.c_str());
  // Deliberately leaked: a rank stuck in a collective may still use it, and
  // the process exits right after.
  auto *worker = new Worker(options);
  return worker->run();
}

} // namespace dtorch::rt
