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

#include "dtorch/runtime/Security.h"

#include <zmq.hpp>

namespace dtorch::rt {

class DialInReconnectWatch {
public:
  DialInReconnectWatch(zmq::context_t &context, zmq::socket_t &watched)
      : monitor_(context, watched, "dial-in", /*watchDisconnects=*/true,
                 ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {}
  /// Drains the events; true when a connection completed its handshake
  /// after an earlier connection closed (the Hello must be sent again).
  bool reconnected() {
    bool again = false;
    for (const HandshakeMonitor::Failure &e : monitor_.poll()) {
      if (e.disconnected)
        closed_ = true;
      else if (e.event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED && closed_) {
        closed_ = false;
        again = true;
      }
    }
    return again;
  }

private:
  HandshakeMonitor monitor_;
  bool closed_ = false;
};

} // namespace dtorch::rt
