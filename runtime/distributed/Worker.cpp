#include "dtorch/runtime/Worker.h"

#include "dtorch/runtime/Blas.h"
#include "dtorch/runtime/GlooCollectives.h"
#include "dtorch/runtime/HostSharedMemoryCollectives.h"
#include "dtorch/runtime/RankState.h"
#include "dtorch/runtime/SharedMemoryCollectives.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
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
  // Groups spanning processes of this host; declared before `comm`, which
  // routes to it, so that it outlives it.
  std::unique_ptr<HostSharedMemoryCommunicator> hostComm;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<RankState> state; // owned by the rank thread
};

class Worker {
public:
  explicit Worker(const WorkerOptions &options)
      : options_(options), host_(localHostName()),
        store_(std::make_shared<ControllerStore>(outbox_)) {
    std::set<int64_t> local;
    for (int r = options.firstRank; r < options.firstRank + options.numRanks;
         ++r)
      local.insert(r);
    hub_ = std::make_unique<SharedMemoryHub>(local, options.worldSize,
                                             options.collectiveTimeout);
    needsGloo_ = options.numRanks < options.worldSize;
    HostSharedMemoryOptions hostShm;
    hostShm.deadline = options.collectiveTimeout;
    hostShm.prefix = "hostshm/world";
    if (!hostSharedMemoryEnabled())
      // A unique identity: no group with this process counts as one host,
      // and every member of such a group agrees on that.
      hostShm.hostIdentity =
          "no-shared-memory|" + host_ + "|" + std::to_string(getpid());
    for (int r : local) {
      auto rank = std::make_unique<Rank>();
      rank->rank = r;
      auto slot = std::make_shared<GlooSlot>();
      glooSlots_.push_back(slot);
      auto timeout = options.collectiveTimeout;
      rank->comm = std::make_unique<RoutingCommunicator>(
          r, local, hub_->communicator(r),
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
        rank->hostComm = makeHostSharedMemoryCommunicator(r, store_, hostShm);
        HostSharedMemoryCommunicator *hostComm = rank->hostComm.get();
        static_cast<RoutingCommunicator &>(*rank->comm)
            .setHostTransport(hostComm, [hostComm](const Group &group) {
              return hostComm->sameHost(group);
            });
      }
      rank->state = std::make_unique<RankState>(r, rank->comm.get());
      ranks_.push_back(std::move(rank));
    }
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
  void onFrames(std::vector<zmq::message_t> &frames);
  void onAuthenticated(const std::string &peer);
  void sendHello(const std::string &peer);
  void dispatch(wire::Envelope &envelope);
  void startGloo();

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
  std::unique_ptr<SharedMemoryHub> hub_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<std::shared_ptr<GlooSlot>> glooSlots_;
  bool needsGloo_ = false;
  bool glooStarted_ = false;

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

void Worker::startGloo() {
  if (!needsGloo_ || glooStarted_)
    return;
  glooStarted_ = true;
  // Before any collective can run: peers decide from these identities
  // whether a group shares this host.
  for (auto &rank : ranks_)
    rank->hostComm->publishIdentity();
  for (size_t i = 0; i < ranks_.size(); ++i) {
    int rank = ranks_[i]->rank;
    auto slot = glooSlots_[i];
    auto store = store_;
    GlooOptions gloo;
    gloo.hostname = options_.glooHost;
    gloo.deadline = options_.collectiveTimeout;
    gloo.prefix = "gloo/world";
    int worldSize = options_.worldSize;
    std::thread([slot, store, gloo, rank, worldSize] {
      std::unique_ptr<Communicator> comm;
      std::string error;
      try {
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

void Worker::sendHello(const std::string &peer) {
  wire::Envelope envelope;
  envelope.set_protocol_version(wire::PROTOCOL_VERSION);
  auto *hello = envelope.mutable_hello();
  *hello = makeHello(wire::ROLE_WORKER, options_.token);
  hello->set_first_rank(options_.firstRank);
  hello->set_num_ranks(options_.numRanks);
  hello->set_world_size(options_.worldSize);
  sendFrames(peer, encodeEnvelope(envelope));
  helloSent_ = true;
}

void Worker::onAuthenticated(const std::string &peer) {
  authenticated_ = true;
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
  wire::Envelope envelope;
  if ((routerMode_ && frames.size() != 2) ||
      (!routerMode_ && frames.size() != 1) ||
      !decodeEnvelope(payload.data(), payload.size(), envelope)) {
    replyError(peer, 0,
               "malformed message (" + std::to_string(payload.size()) +
                   " bytes)");
    return;
  }
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
  dispatch(envelope);
}

void Worker::dispatch(wire::Envelope &envelope) {
  uint64_t requestId = envelope.request_id();
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
  auto shared = std::make_shared<wire::Envelope>();
  shared->Swap(&envelope);
  switch (shared->body_case()) {
  case wire::Envelope::kUpload: {
    // Every hosted rank of the mesh keeps the class program of its position.
    const wire::UploadProgram &upload = shared->upload();
    std::vector<int64_t> meshShape;
    if (upload.programs_size() > 0)
      meshShape.assign(upload.programs(0).mesh_shape().begin(),
                       upload.programs(0).mesh_shape().end());
    std::vector<int64_t> meshRanks(upload.mesh_ranks().begin(),
                                   upload.mesh_ranks().end());
    std::shared_ptr<const MeshRanks> mesh;
    std::string invalid;
    try {
      // Bounded (kMaxMeshPositions) before a rank list is made.
      if (meshRanks.empty())
        meshRanks = consecutiveMeshRanks(meshShape, upload.mesh_rank_start());
      mesh = std::make_shared<const MeshRanks>(meshShape, meshRanks);
    } catch (const std::exception &e) {
      invalid = e.what();
    }
    auto classes = std::make_shared<std::vector<const wire::Program *>>();
    for (const wire::Program &program : upload.programs())
      classes->push_back(&program);
    // The ranks of this process share what needs no rank to prepare.
    auto preparation = std::make_shared<SharedPreparation>();
    for (int r = options_.firstRank; r < options_.firstRank + options_.numRanks;
         ++r) {
      bool inMesh = mesh ? mesh->positionOf(r) >= 0
                         : std::find(meshRanks.begin(), meshRanks.end(), r) !=
                               meshRanks.end();
      if (!inMesh)
        continue;
      enqueue(r, [this, shared, classes, preparation, mesh, invalid, r] {
        Rank &state = *ranks_[r - options_.firstRank];
        uint64_t id = shared->upload().program_id();
        if (mesh)
          state.state->upload(id, *classes, RankContext::of(mesh, r),
                              preparation.get());
        else
          state.state->reject(id, invalid);
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
    for (int rank : ranks)
      if (!hosted(rank))
        return;
    for (int rank : ranks)
      enqueue(rank, [this, shared, rank] {
        runProgram(*ranks_[rank - options_.firstRank], shared->run());
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
        tensorToWire(r.state->fetch(handle), fetched->mutable_value());
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
  case wire::Envelope::kFree: {
    const auto &ranks = shared->free().ranks();
    for (int rank : ranks)
      if (!hosted(rank))
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
  case wire::Envelope::kKvReply:
    store_->deliver(requestId, shared->kv_reply().value());
    return;
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
  if (std::optional<std::string> error =
          r.state->run(run.program_id(), inputs, outputs, seeds))
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
  if (routerMode_) {
    socket_->bind(options_.listen);
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
    zmq::pollitem_t items[2] = {{socket_->handle(), 0, ZMQ_POLLIN, 0},
                                {nullptr, outbox_.fd(), ZMQ_POLLIN, 0}};
    zmq::poll(items, 2, std::chrono::milliseconds(50));
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
  static const char *usage = "usage: dtorch-worker (--connect ADDR | --listen "
                             "ADDR) --token T --ranks A-B "
                             "--world-size N [--collective-timeout-ms MS] "
                             "[--controller-timeout-ms MS] "
                             "[--max-message-bytes B] [--gloo-host HOST] "
                             "[--ranks-on-host N]";
  WorkerOptions options;
  bool haveRanks = false, haveWorld = false;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc)
      throw RuntimeError("missing value for " + flag + "\n" + usage);
    std::string value = argv[++i];
    if (flag == "--connect")
      options.connect = value;
    else if (flag == "--listen")
      options.listen = value;
    else if (flag == "--token")
      options.token = value;
    else if (flag == "--world-size") {
      options.worldSize = parseInt(value, "--world-size");
      haveWorld = true;
    } else if (flag == "--collective-timeout-ms")
      options.collectiveTimeout =
          std::chrono::milliseconds(parseInt(value, "--collective-timeout-ms"));
    else if (flag == "--controller-timeout-ms")
      options.controllerTimeout =
          std::chrono::milliseconds(parseInt(value, "--controller-timeout-ms"));
    else if (flag == "--max-message-bytes")
      options.transport.maxMessageBytes =
          parseInt(value, "--max-message-bytes");
    else if (flag == "--gloo-host")
      options.glooHost = value;
    else if (flag == "--ranks-on-host")
      options.ranksOnHost = parseInt(value, "--ranks-on-host");
    else if (flag == "--ranks") {
      size_t dash = value.find('-');
      int first = parseInt(value.substr(0, dash), "--ranks");
      int last = dash == std::string::npos
                     ? first
                     : parseInt(value.substr(dash + 1), "--ranks");
      options.firstRank = first;
      options.numRanks = last - first + 1;
      haveRanks = true;
    } else {
      throw RuntimeError("unknown option " + flag + "\n" + usage);
    }
  }
  if (options.connect.empty() == options.listen.empty())
    throw RuntimeError(
        std::string("give exactly one of --connect and --listen\n") + usage);
  if (options.token.empty())
    throw RuntimeError(std::string("--token is required\n") + usage);
  if (!haveRanks || !haveWorld)
    throw RuntimeError(std::string("--ranks and --world-size are required\n") +
                       usage);
  if (options.numRanks < 1 || options.firstRank < 0 ||
      options.firstRank + options.numRanks > options.worldSize)
    throw RuntimeError(
        "--ranks must be a non-empty range inside [0, world-size)");
  if (options.collectiveTimeout.count() <= 0 ||
      options.controllerTimeout.count() <= 0 ||
      options.transport.maxMessageBytes <= 0 || options.ranksOnHost < 0)
    throw RuntimeError("timeouts, --max-message-bytes and --ranks-on-host "
                       "must be positive");
  return options;
}

int runWorker(const WorkerOptions &options) {
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
  // Deliberately leaked: a rank stuck in a collective may still use it, and
  // the process exits right after.
  auto *worker = new Worker(options);
  return worker->run();
}

} // namespace dtorch::rt
