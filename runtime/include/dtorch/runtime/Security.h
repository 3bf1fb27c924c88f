// Secrets and CurveZMQ for the controller/worker transport.
//
// - Secrets (the shared token) come from a file, an inherited descriptor or
//   the environment, never from a command line that `ps` shows; errors about
//   them name the file or the variable, never the value.
// - CURVE (ZeroMQ's CurveZMQ: Curve25519 key exchange, every frame
//   encrypted and authenticated) between a controller and workers started
//   by hand. The listening side is the CURVE server; the server accepts
//   only the client keys it was given, through a ZAP handler (ZeroMQ RFC 27)
//   in its context. Keys are Z85 text (40 characters) in files.
// - A monitor of a socket's handshakes, so a refused key or a mechanism
//   mismatch is reported by endpoint instead of retried silently.
#pragma once

#include <zmq.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dtorch::rt {

// The key of the controller's store under which it hands its workers the
// secret of their collective data links (GlooOptions::pairSecret). Workers
// may read it, never set it.
inline constexpr const char *kCollectiveSecretKey = "dtorch/collective-secret";

// ---- secrets ------------------------------------------------------------

// The secret in `path`: its content without trailing whitespace. Throws
// RuntimeError naming the file (never its content) when it cannot be read
// or is empty.
std::string readSecretFile(const std::string &path);
// Reads descriptor `fd` to its end, closes it, and returns the content
// without trailing whitespace. Throws RuntimeError when it is empty.
std::string readSecretDescriptor(int fd);

// ---- CURVE keys ---------------------------------------------------------

// True when the linked libzmq was built with CURVE (libsodium).
bool curveAvailable();
// Throws RuntimeError with the reason when curveAvailable() is false.
void requireCurve();

struct CurveKeyPair {
  std::string publicKey; // Z85, 40 characters
  std::string secretKey; // Z85, 40 characters
};

CurveKeyPair generateCurveKeyPair();
// The public key of a Z85 secret key; throws RuntimeError when it is not one.
std::string curvePublicKeyOf(const std::string &secretKey);
// True for 40 characters of the Z85 alphabet that decode to 32 bytes.
bool isCurveKey(const std::string &key);
// The key in `path` (the first line that is not empty and does not start
// with '#', trimmed). Throws RuntimeError naming the file and `what` ("the
// controller's public key") when it holds no key; never prints the content.
std::string readCurveKeyFile(const std::string &path, const std::string &what);
// Writes PREFIX.key (the secret key, mode 0600) and PREFIX.pub. Returns the
// pair written.
CurveKeyPair writeCurveKeyPairFiles(const std::string &prefix);

// ---- CURVE on sockets ---------------------------------------------------

// This side listens (or is the server of the handshake): its secret key.
void makeCurveServer(zmq::socket_t &socket, const std::string &secretKey);
// This side connects: its key pair and the server's public key (for the
// connections made after this call).
void makeCurveClient(zmq::socket_t &socket, const std::string &secretKey,
                     const std::string &serverPublicKey);

// A ZAP handler that accepts CURVE clients whose public key is one of
// `allowedPublicKeys` (Z85) and refuses every other client (status 400, which
// the client's monitor reports as an authentication failure). Create it
// before binding the server socket of the same context; call handle() when
// its socket is readable (it never blocks).
class ZapAuthenticator {
public:
  ZapAuthenticator(zmq::context_t &context,
                   const std::vector<std::string> &allowedPublicKeys);
  zmq::socket_t &socket() { return socket_; }
  // Answers the pending requests; returns how many were refused.
  int handle();
  uint64_t refusedCount() const { return refused_; }

private:
  zmq::socket_t socket_;
  std::vector<std::string> allowed_; // 32-byte binary keys
  uint64_t refused_ = 0;
};

// Handshake outcomes of a socket, from zmq_socket_monitor.
class HandshakeMonitor {
public:
  struct Failure {
    std::string endpoint; // as given to connect/bind
    std::string reason;   // "the peer refused this side's CURVE key", ...
    // A connection to `endpoint` closed (watchDisconnects only); `reason`
    // is empty.
    bool disconnected = false;
    // The event's value: for a closed connection, its descriptor (matches
    // ZMQ_SRCFD of the messages that came through it).
    uint32_t value = 0;
    // The monitor event (ZMQ_EVENT_HANDSHAKE_FAILED_*, ZMQ_EVENT_DISCONNECTED).
    uint16_t event = 0;
  };
  // `watchDisconnects`: also report a closed connection (the controller
  // watches the workers it connected to: a worker that exits closes it).
  // `extraEvents`: more ZMQ_EVENT_* bits to report, with an empty reason
  // (a dialing worker watches ZMQ_EVENT_HANDSHAKE_SUCCEEDED).
  HandshakeMonitor(zmq::context_t &context, zmq::socket_t &monitored,
                   const std::string &name, bool watchDisconnects = false,
                   int extraEvents = 0);
  zmq::socket_t &socket() { return socket_; }
  // Drains the events without blocking; returns the handshake failures
  // (and disconnections and extra events when watched).
  std::vector<Failure> poll();

private:
  zmq::socket_t socket_;
};

// Why a handshake failed, in words, for a monitor event and its value.
std::string describeHandshakeFailure(uint16_t event, uint32_t value);

} // namespace dtorch::rt
