//===- DialInReconnect.h - a dialing worker says Hello again -------------===//
//
// Private to runtime/distributed. A worker that dials the controller sends
// its Hello once per connection. Before it is admitted, its connection may
// close (the controller process was stopped and started again, the network
// failed): ZeroMQ connects again by itself, but the Hello went with the old
// connection, and the controller forgot the worker when it closed. This
// watch of the worker's socket says when a connection completed its
// handshake after an earlier one closed, so the worker says Hello again.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch/runtime/Tensor.h"

#include <zmq.hpp>

#include <atomic>
#include <cstring>
#include <string>
#include <unistd.h>

namespace dtorch::rt {

class DialInReconnectWatch {
public:
  DialInReconnectWatch(zmq::context_t &context, zmq::socket_t &watched)
      : socket_(context, zmq::socket_type::pair) {
    static std::atomic<uint64_t> counter{0};
    std::string address = "inproc://dtorch-dial-in-" +
                          std::to_string(getpid()) + "-" +
                          std::to_string(counter++);
    if (zmq_socket_monitor(watched.handle(), address.c_str(),
                           ZMQ_EVENT_DISCONNECTED |
                               ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0)
      throw RuntimeError(std::string("zmq_socket_monitor failed: ") +
                         zmq_strerror(zmq_errno()));
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(address);
  }
  /// Drains the events; true when a connection completed its handshake
  /// after an earlier connection closed (the Hello must be sent again).
  bool reconnected() {
    bool again = false;
    while (true) {
      zmq::message_t header;
      if (!socket_.recv(header, zmq::recv_flags::dontwait))
        break;
      zmq::message_t endpoint;
      if (header.more() && !socket_.recv(endpoint, zmq::recv_flags::none))
        break;
      if (header.size() < 6)
        continue;
      uint16_t event;
      std::memcpy(&event, header.data(), sizeof(event));
      if (event == ZMQ_EVENT_DISCONNECTED)
        closed_ = true;
      else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED && closed_) {
        closed_ = false;
        again = true;
      }
    }
    return again;
  }

private:
  zmq::socket_t socket_;
  bool closed_ = false;
};

} // namespace dtorch::rt
