#include "dtorch/runtime/Transport.h"

#include "dtorch/runtime/Shape.h"
#include "dtorch/runtime/WireLimits.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <unistd.h>

namespace dtorch::rt {

namespace wire = ::dtorch::wire;

int64_t zmqMessageSizeCap(const TransportOptions &options) {
  return options.maxMessageBytes * 2 + (int64_t(1) << 20);
}

void configureSocket(zmq::socket_t &socket, const TransportOptions &options) {
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::heartbeat_ivl,
             static_cast<int>(options.heartbeatInterval.count()));
  socket.set(zmq::sockopt::heartbeat_timeout,
             static_cast<int>(options.peerTimeout.count()));
  socket.set(zmq::sockopt::heartbeat_ttl,
             static_cast<int>(options.peerTimeout.count()));
  socket.set(zmq::sockopt::maxmsgsize, zmqMessageSizeCap(options));
  socket.set(zmq::sockopt::sndhwm, 0);
  socket.set(zmq::sockopt::rcvhwm, 0);
  socket.set(zmq::sockopt::ipv6, 0);
}

zmq::message_t owningMessage(std::string bytes) {
  auto *owned = new std::string(std::move(bytes));
  return zmq::message_t(
      owned->data(), owned->size(),
      [](void *, void *hint) { delete static_cast<std::string *>(hint); },
      owned);
}

std::string encodeEnvelope(const wire::Envelope &envelope) {
  std::string bytes;
  if (!envelope.SerializeToString(&bytes))
    throw RuntimeError("failed to serialize a message");
  return bytes;
}

bool decodeEnvelope(const void *data, size_t size, wire::Envelope &envelope) {
  if (size > static_cast<size_t>(INT32_MAX))
    return false;
  if (!envelope.ParseFromArray(data, static_cast<int>(size)))
    return false;
  return envelope.body_case() != wire::Envelope::BODY_NOT_SET;
}

namespace {

/// An Envelope and the arena it was parsed into.
class ArenaEnvelope {
public:
  explicit ArenaEnvelope(size_t bytes)
      : arena_(optionsFor(bytes)),
        envelope_(
            google::protobuf::Arena::CreateMessage<wire::Envelope>(&arena_)) {}
  wire::Envelope &envelope() { return *envelope_; }

private:
  // The first block holds a message a few times its encoded size (what a
  // parsed program takes), so a large upload grows the arena a few times.
  static google::protobuf::ArenaOptions optionsFor(size_t bytes) {
    constexpr size_t kMinBlock = 1024, kMaxBlock = size_t(4) << 20;
    google::protobuf::ArenaOptions options;
    options.start_block_size = std::clamp(bytes * 4, kMinBlock, kMaxBlock);
    options.max_block_size = kMaxBlock;
    return options;
  }
  google::protobuf::Arena arena_;
  wire::Envelope *envelope_; // owned by arena_
};

} // namespace

std::shared_ptr<wire::Envelope> decodeEnvelopeInArena(const void *data,
                                                      size_t size) {
  auto parsed = std::make_shared<ArenaEnvelope>(size);
  if (!decodeEnvelope(data, size, parsed->envelope()))
    return nullptr;
  return std::shared_ptr<wire::Envelope>(parsed, &parsed->envelope());
}

std::string randomToken() {
  std::random_device device;
  std::string token;
  static const char *digits = "0123456789abcdef";
  for (int i = 0; i < 32; ++i)
    token += digits[device() % 16];
  return token;
}

std::string localHostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0)
    return "localhost";
  return name;
}

bool tokensEqual(const std::string &a, const std::string &b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= a[i] ^ (i < b.size() ? b[i] : 0);
  return diff == 0;
}

wire::Hello makeHello(wire::PeerRole role, const std::string &token) {
  wire::Hello hello;
  hello.set_protocol_version(wire::PROTOCOL_VERSION);
  hello.set_token(token);
  hello.set_role(role);
  hello.set_host(localHostName());
  hello.set_pid(static_cast<int64_t>(getpid()));
  return hello;
}

std::string checkHello(const wire::Hello &hello, const std::string &token,
                       wire::PeerRole expectedRole) {
  if (hello.protocol_version() != static_cast<uint32_t>(wire::PROTOCOL_VERSION))
    return "protocol version mismatch: peer speaks version " +
           std::to_string(hello.protocol_version()) +
           ", this side speaks version " +
           std::to_string(static_cast<int>(wire::PROTOCOL_VERSION));
  if (!tokensEqual(hello.token(), token))
    return "authentication failed: wrong token";
  if (hello.role() != expectedRole)
    return "unexpected peer role";
  return "";
}

void tensorToWire(const Tensor &tensor, wire::TensorData *out) {
  out->set_dtype(tensor.dtype());
  out->clear_shape();
  for (int64_t extent : tensor.shape())
    out->add_shape(extent);
  out->set_data(static_cast<const char *>(tensor.data()), tensor.nbytes());
}

void memoryStatsToWire(const MemoryStats &stats, wire::MemoryStatsReply *out) {
  out->set_rank(stats.rank);
  out->set_tensors(stats.tensors);
  out->set_bytes(stats.bytes);
  out->set_arena_bytes(stats.arenaBytes);
  out->set_last_run_arena_bytes(stats.lastRunArenaBytes);
  out->set_last_run_peak_bytes(stats.lastRunPeakBytes);
  out->set_peak_bytes(stats.peakBytes);
  out->set_speculations_started(stats.speculationsStarted);
  out->set_speculations_confirmed(stats.speculationsConfirmed);
  out->set_speculations_dropped(stats.speculationsDropped);
  out->set_speculative_instructions(stats.speculativeInstructions);
  for (const auto &[dtype, bytes] : stats.bytesByDtype) {
    wire::DTypeBytes *entry = out->add_by_dtype();
    entry->set_dtype(dtype);
    entry->set_bytes(bytes);
  }
  for (const HeldTensor &t : stats.held) {
    wire::HeldTensor *entry = out->add_held();
    entry->set_handle(t.handle);
    entry->set_dtype(t.dtype);
    entry->set_bytes(t.bytes);
  }
}

void traceChunkToWire(const TraceChunk &chunk, wire::TraceReply *out) {
  out->set_rank(chunk.rank);
  out->set_dropped(chunk.dropped);
  out->set_remaining(chunk.remaining);
  out->set_clock_ns(chunk.clockNs);
  out->set_host(chunk.host);
  out->mutable_events()->Reserve(static_cast<int>(chunk.events.size()));
  for (const TraceEvent &event : chunk.events) {
    wire::TraceEvent *e = out->add_events();
    e->set_name(event.name);
    e->set_category(event.category);
    e->set_location(event.location);
    e->set_detail(event.detail);
    e->set_start_ns(event.startNs);
    e->set_end_ns(event.endNs);
    e->set_bytes(event.bytes);
    e->set_lane(static_cast<int32_t>(event.lane));
  }
}

TraceChunk traceChunkFromWire(const wire::TraceReply &reply) {
  TraceChunk chunk;
  chunk.rank = reply.rank();
  chunk.dropped = reply.dropped();
  chunk.remaining = reply.remaining();
  chunk.clockNs = reply.clock_ns();
  chunk.host = reply.host();
  chunk.events.reserve(reply.events_size());
  for (const wire::TraceEvent &e : reply.events()) {
    TraceEvent event;
    event.name = e.name();
    event.category = e.category();
    event.location = e.location();
    event.detail = e.detail();
    event.startNs = e.start_ns();
    event.endNs = e.end_ns();
    event.bytes = e.bytes();
    event.lane = e.lane() == static_cast<int32_t>(TraceLane::Comm)
                     ? TraceLane::Comm
                     : TraceLane::Compute;
    chunk.events.push_back(std::move(event));
  }
  return chunk;
}

MemoryStats memoryStatsFromWire(const wire::MemoryStatsReply &reply) {
  MemoryStats stats;
  stats.rank = reply.rank();
  stats.tensors = reply.tensors();
  stats.bytes = reply.bytes();
  stats.arenaBytes = reply.arena_bytes();
  stats.lastRunArenaBytes = reply.last_run_arena_bytes();
  stats.lastRunPeakBytes = reply.last_run_peak_bytes();
  stats.peakBytes = reply.peak_bytes();
  stats.speculationsStarted = reply.speculations_started();
  stats.speculationsConfirmed = reply.speculations_confirmed();
  stats.speculationsDropped = reply.speculations_dropped();
  stats.speculativeInstructions = reply.speculative_instructions();
  for (const wire::DTypeBytes &entry : reply.by_dtype())
    stats.bytesByDtype[entry.dtype()] += entry.bytes();
  for (const wire::HeldTensor &entry : reply.held())
    stats.held.push_back({entry.handle(), entry.dtype(), entry.bytes()});
  return stats;
}

void checkTensorHeader(DType dtype, const int64_t *extents, int rank) {
  if (rank > kMaxTensorRank)
    throw RuntimeError("tensor of rank " + std::to_string(rank) +
                       " exceeds the limit of " +
                       std::to_string(kMaxTensorRank) + " dims");
  if (dtype == wire::DTYPE_INVALID)
    throw RuntimeError("tensor has no dtype");
  size_t elementSize = dtypeSize(dtype); // throws on an unknown dtype
  Shape shape(extents, extents + rank);
  int64_t numel = shapeNumel(shape); // rejects negative extents and overflow
  if (numel > kMaxTensorBytes / static_cast<int64_t>(elementSize))
    throw RuntimeError("tensor " + std::string(dtypeName(dtype)) +
                       shapeToString(shape) + " exceeds the limit of " +
                       std::to_string(kMaxTensorBytes) + " bytes");
}

Tensor tensorFromWire(const wire::TensorData &data) {
  // Checked before anything is allocated: a hostile shape (2^62 elements,
  // negative extents, 100 dims) costs nothing.
  checkTensorHeader(data.dtype(), data.shape().data(), data.shape_size());
  Shape shape(data.shape().begin(), data.shape().end());
  int64_t numel = shapeNumel(shape);
  size_t expected = static_cast<size_t>(numel) * dtypeSize(data.dtype());
  if (data.data().size() != expected)
    throw RuntimeError("tensor " + std::string(dtypeName(data.dtype())) +
                       shapeToString(shape) + " needs " +
                       std::to_string(expected) + " bytes, message has " +
                       std::to_string(data.data().size()));
  Tensor tensor = Tensor::empty(data.dtype(), shape);
  if (expected)
    std::memcpy(tensor.data(), data.data().data(), expected);
  return tensor;
}

int failingInstructionOf(const std::string &message) {
  size_t at = message.find("instruction ");
  if (at == std::string::npos)
    return -1;
  at += 12;
  size_t end = at;
  while (end < message.size() &&
         isdigit(static_cast<unsigned char>(message[end])))
    ++end;
  if (end == at || end - at > 9)
    return -1;
  return std::stoi(message.substr(at, end - at));
}

} // namespace dtorch::rt
