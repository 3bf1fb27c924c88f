// The pieces of the controller/worker transport shared by both sides:
// ZeroMQ socket options, Envelope framing, the Hello handshake and tensor
// (de)serialization. See runtime/proto/dtorch_messages.proto.
#pragma once

#include "dtorch/runtime/MemoryStats.h"
#include "dtorch/runtime/Tensor.h"
#include "dtorch/runtime/Trace.h"
#include "dtorch_messages.pb.h"

#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace dtorch::rt {

struct TransportOptions {
  // ZeroMQ-level heartbeats (ZMQ_HEARTBEAT_IVL / _TIMEOUT / _TTL).
  std::chrono::milliseconds heartbeatInterval{500};
  std::chrono::milliseconds peerTimeout{5000};
  // Messages larger than this get an error reply; ZMQ_MAXMSGSIZE is set a bit
  // above it (2x + 1 MiB), and larger frames make ZeroMQ drop the connection.
  int64_t maxMessageBytes = int64_t(1) << 30;
};

// Sets linger 0, heartbeats, the message size cap and no-delay on `socket`.
void configureSocket(zmq::socket_t &socket, const TransportOptions &options);
int64_t zmqMessageSizeCap(const TransportOptions &options);

/// A ZeroMQ message that takes `bytes` over without copying them (a
/// message read from a StreamLink, handed to code that takes ZeroMQ's).
zmq::message_t owningMessage(std::string bytes);

std::string encodeEnvelope(const ::dtorch::wire::Envelope &envelope);
// False when the bytes are not a well-formed Envelope of this protocol.
bool decodeEnvelope(const void *data, size_t size,
                    ::dtorch::wire::Envelope &envelope);
// The same, parsed into a protobuf arena that the returned pointer owns
// (a program upload is thousands of small messages: one arena instead of
// a heap allocation each, freed at once with the last holder); nullptr
// when the bytes are not a well-formed Envelope.
std::shared_ptr<::dtorch::wire::Envelope>
decodeEnvelopeInArena(const void *data, size_t size);

// 32 random hex characters.
std::string randomToken();
std::string localHostName();
bool tokensEqual(const std::string &a, const std::string &b); // constant time

::dtorch::wire::Hello makeHello(::dtorch::wire::PeerRole role,
                                const std::string &token);
// Empty when `hello` is acceptable; otherwise the reason (a version mismatch
// names both versions).
std::string checkHello(const ::dtorch::wire::Hello &hello,
                       const std::string &token,
                       ::dtorch::wire::PeerRole expectedRole);

// Throws RuntimeError unless `rank` extents of `dtype` describe a tensor
// within WireLimits.h (rank, dtype, extents, bytes); allocates nothing.
void checkTensorHeader(DType dtype, const int64_t *extents, int rank);
void tensorToWire(const Tensor &tensor, ::dtorch::wire::TensorData *out);
// Throws RuntimeError when the dtype, shape or byte count is inconsistent.
Tensor tensorFromWire(const ::dtorch::wire::TensorData &data);

void memoryStatsToWire(const MemoryStats &stats,
                       ::dtorch::wire::MemoryStatsReply *out);
MemoryStats memoryStatsFromWire(const ::dtorch::wire::MemoryStatsReply &reply);

void traceChunkToWire(const TraceChunk &chunk, ::dtorch::wire::TraceReply *out);
TraceChunk traceChunkFromWire(const ::dtorch::wire::TraceReply &reply);

// "instruction 3 (...)" in an executor message -> 3; -1 when absent.
int failingInstructionOf(const std::string &message);

} // namespace dtorch::rt
