//===- StreamLink.h - length-prefixed messages over a stream socket -----===//
//
// The link between the embedded cluster's controller and a worker process
// it started: one end of a Unix-domain socketpair each, the worker's
// inherited at spawn. Against libzmq's DEALER/ROUTER over loopback TCP it
// takes out the I/O thread libzmq puts between each application thread and
// the socket: a message wakes the thread that reads it and no other, so a
// round trip wakes two threads instead of six
// (bench/handoff_transport_bench.cpp; docs/architecture.md, "A cached step
// wakes few threads").
//
// A message travels as an 8-byte little-endian length and its bytes. Any
// thread may send; one thread (its owner's I/O thread) receives and
// flushes. A send never blocks: what the socket does not take at once
// waits, in order, until the I/O thread sees the socket writable (poll for
// POLLOUT while wantsWrite()) and calls flush(); the first byte to wait
// calls the owner's wake callback, so that an I/O thread blocked in poll
// adds POLLOUT. Neither side can then block the other: each one's I/O
// thread always reads.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace dtorch::rt {

class StreamLink {
public:
  /// Owns `fd` (a connected stream socket; made non-blocking here).
  /// Messages longer than `maxMessageBytes` close the link on receipt.
  /// `wake` is called (from a sending thread) when bytes start waiting.
  StreamLink(int fd, uint64_t maxMessageBytes, std::function<void()> wake);
  ~StreamLink();
  StreamLink(const StreamLink &) = delete;
  StreamLink &operator=(const StreamLink &) = delete;

  int fd() const { return fd_; }

  /// Sends `payload` as one message (thread-safe, never blocks). False
  /// when the link is closed (the message is dropped).
  bool send(std::string_view payload);

  /// True while bytes wait for the socket to take them.
  bool wantsWrite();
  /// Writes what waits, as much as the socket takes (the I/O thread, when
  /// poll reports the socket writable). False once the link is closed.
  bool flush();

  /// Reads what the socket holds and appends every complete message to
  /// `messages` (the I/O thread, when poll reports it readable). False at
  /// end of stream, on an error or on an oversized message: the link is
  /// closed and closeReason() says why; messages complete before that are
  /// still appended.
  bool receive(std::vector<std::string> &messages);

  bool closed();
  std::string closeReason();

  /// Bytes waiting to be written (for tests).
  size_t waitingBytes();

private:
  /// Caller holds writeMutex_. Writes from the waiting queue.
  void writeWaiting();
  void closeWith(const std::string &reason); // caller holds writeMutex_

  int fd_;
  uint64_t maxMessageBytes_;
  std::function<void()> wake_;

  std::mutex writeMutex_; // guards everything up to the reader's state
  std::deque<std::string> waiting_;
  size_t waitingOffset_ = 0; // bytes of waiting_.front() already written
  size_t waitingBytes_ = 0;
  bool closed_ = false;
  std::string closeReason_;

  // The reader's state (receive() only): the header bytes read so far,
  // then the message being filled.
  unsigned char header_[8];
  size_t headerBytes_ = 0;
  bool inMessage_ = false;
  std::string message_;
  size_t messageBytes_ = 0;
};

} // namespace dtorch::rt
