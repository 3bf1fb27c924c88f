#include "dtorch/runtime/Security.h"

#include "dtorch/runtime/Tensor.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace dtorch::rt {

namespace {

std::string trimmed(std::string text) {
  size_t end = text.find_last_not_of(" \t\r\n");
  text.erase(end == std::string::npos ? 0 : end + 1);
  size_t begin = text.find_first_not_of(" \t\r\n");
  return begin == std::string::npos ? std::string() : text.substr(begin);
}

// A secret is at most this long: a token file of gigabytes is a mistake.
constexpr size_t kMaxSecretBytes = 64 * 1024;

std::string readAll(int fd, const std::string &what) {
  std::string content;
  char buffer[4096];
  while (true) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw RuntimeError("cannot read " + what + ": " + std::strerror(errno));
    if (n == 0)
      break;
    content.append(buffer, static_cast<size_t>(n));
    if (content.size() > kMaxSecretBytes)
      throw RuntimeError(what + " is larger than " +
                         std::to_string(kMaxSecretBytes) + " bytes");
  }
  return content;
}

} // namespace

std::string readSecretFile(const std::string &path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw RuntimeError("cannot open the token file '" + path +
                       "': " + std::strerror(errno));
  std::string content;
  try {
    content = readAll(fd, "the token file '" + path + "'");
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  content = trimmed(std::move(content));
  if (content.empty())
    throw RuntimeError("the token file '" + path + "' is empty");
  return content;
}

std::string readSecretDescriptor(int fd) {
  std::string what = "the token descriptor " + std::to_string(fd);
  std::string content;
  try {
    content = readAll(fd, what);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  content = trimmed(std::move(content));
  if (content.empty())
    throw RuntimeError(what + " gave an empty token");
  return content;
}

bool curveAvailable() { return zmq_has("curve") != 0; }

void requireCurve() {
  if (!curveAvailable())
    throw RuntimeError(
        "CURVE encryption was asked for, but the installed libzmq was built "
        "without CURVE support (zmq_has(\"curve\") is false; Debian's "
        "libzmq5 has it, built with libsodium)");
}

CurveKeyPair generateCurveKeyPair() {
  requireCurve();
  char publicKey[41] = {}, secretKey[41] = {};
  if (zmq_curve_keypair(publicKey, secretKey) != 0)
    throw RuntimeError(std::string("zmq_curve_keypair failed: ") +
                       zmq_strerror(zmq_errno()));
  CurveKeyPair pair{publicKey, secretKey};
  std::memset(secretKey, 0, sizeof(secretKey));
  return pair;
}

bool isCurveKey(const std::string &key) {
  if (key.size() != 40)
    return false;
  uint8_t decoded[32];
  return zmq_z85_decode(decoded, key.c_str()) != nullptr;
}

std::string curvePublicKeyOf(const std::string &secretKey) {
  requireCurve();
  if (!isCurveKey(secretKey))
    throw RuntimeError("not a CURVE secret key (40 Z85 characters)");
  char publicKey[41] = {};
  if (zmq_curve_public(publicKey, secretKey.c_str()) != 0)
    throw RuntimeError(std::string("zmq_curve_public failed: ") +
                       zmq_strerror(zmq_errno()));
  return publicKey;
}

std::string readCurveKeyFile(const std::string &path, const std::string &what) {
  std::ifstream in(path);
  if (!in)
    throw RuntimeError("cannot open " + what + " file '" + path +
                       "': " + std::strerror(errno));
  std::string line;
  size_t bytes = 0;
  while (std::getline(in, line)) {
    bytes += line.size() + 1;
    if (bytes > kMaxSecretBytes)
      break;
    line = trimmed(line);
    if (line.empty() || line[0] == '#')
      continue;
    if (!isCurveKey(line))
      break;
    return line;
  }
  throw RuntimeError("the file '" + path + "' does not hold " + what +
                     " (a CURVE key: one line of 40 Z85 characters, as "
                     "`dtorch-worker --generate-curve-keypair` writes)");
}

CurveKeyPair writeCurveKeyPairFiles(const std::string &prefix) {
  CurveKeyPair pair = generateCurveKeyPair();
  auto write = [](const std::string &path, const std::string &text,
                  mode_t mode) {
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
      throw RuntimeError("cannot create '" + path +
                         "': " + std::strerror(errno));
    // An existing file keeps its mode through O_CREAT: set it.
    fchmod(fd, mode);
    std::string content = text + "\n";
    size_t done = 0;
    while (done < content.size()) {
      ssize_t n = ::write(fd, content.data() + done, content.size() - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0) {
        int saved = errno;
        close(fd);
        throw RuntimeError("cannot write '" + path +
                           "': " + std::strerror(saved));
      }
      done += static_cast<size_t>(n);
    }
    close(fd);
  };
  write(prefix + ".key", "# CURVE secret key (keep private)\n" + pair.secretKey,
        0600);
  write(prefix + ".pub", "# CURVE public key\n" + pair.publicKey, 0644);
  return pair;
}

void makeCurveServer(zmq::socket_t &socket, const std::string &secretKey) {
  requireCurve();
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, secretKey);
}

void makeCurveClient(zmq::socket_t &socket, const std::string &secretKey,
                     const std::string &serverPublicKey) {
  requireCurve();
  socket.set(zmq::sockopt::curve_server, 0);
  socket.set(zmq::sockopt::curve_publickey, curvePublicKeyOf(secretKey));
  socket.set(zmq::sockopt::curve_secretkey, secretKey);
  socket.set(zmq::sockopt::curve_serverkey, serverPublicKey);
}

ZapAuthenticator::ZapAuthenticator(
    zmq::context_t &context, const std::vector<std::string> &allowedPublicKeys)
    : socket_(context, zmq::socket_type::rep) {
  for (const std::string &key : allowedPublicKeys) {
    std::string binary(32, '\0');
    if (!isCurveKey(key) ||
        !zmq_z85_decode(reinterpret_cast<uint8_t *>(binary.data()),
                        key.c_str()))
      throw RuntimeError("not a CURVE public key (40 Z85 characters)");
    allowed_.push_back(binary);
  }
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind("inproc://zeromq.zap.01");
}

int ZapAuthenticator::handle() {
  int refusedNow = 0;
  while (true) {
    std::vector<zmq::message_t> frames;
    zmq::message_t frame;
    if (!socket_.recv(frame, zmq::recv_flags::dontwait))
      break;
    frames.push_back(std::move(frame));
    while (frames.back().more() && frames.size() < 16) {
      zmq::message_t next;
      if (!socket_.recv(next, zmq::recv_flags::none))
        break;
      frames.push_back(std::move(next));
    }
    // version, request id, domain, address, identity, mechanism, key.
    std::string requestId = frames.size() > 1 ? frames[1].to_string() : "";
    bool accepted = false;
    if (frames.size() == 7 && frames[0].to_string() == "1.0" &&
        frames[5].to_string() == "CURVE") {
      std::string key = frames[6].to_string();
      for (const std::string &allowed : allowed_)
        accepted |= key.size() == allowed.size() &&
                    std::memcmp(key.data(), allowed.data(), key.size()) == 0;
    }
    if (!accepted) {
      ++refused_;
      ++refusedNow;
    }
    const std::string status = accepted ? "200" : "400";
    const std::string text = accepted ? "OK" : "key not allowed";
    socket_.send(zmq::buffer(std::string("1.0")), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(requestId), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(status), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(text), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(std::string()), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(std::string()), zmq::send_flags::none);
  }
  return refusedNow;
}

std::string describeHandshakeFailure(uint16_t event, uint32_t value) {
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
    return "the peer refused this side's CURVE key (authentication status " +
           std::to_string(value) + ")";
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
    if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
      return "security mechanism mismatch: one side uses CURVE and the other "
             "does not";
    if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
      return "CURVE handshake failed: wrong server public key or secret key";
    return "handshake protocol error (code " + std::to_string(value) + ")";
  }
  return "the peer closed the connection during the handshake (" +
         std::string(zmq_strerror(static_cast<int>(value))) +
         "): its security settings do not match this side's (CURVE on one "
         "side only, or a wrong CURVE server key)";
}

HandshakeMonitor::HandshakeMonitor(zmq::context_t &context,
                                   zmq::socket_t &monitored,
                                   const std::string &name,
                                   bool watchDisconnects, int extraEvents)
    : socket_(context, zmq::socket_type::pair) {
  static std::atomic<uint64_t> counter{0};
  std::string address = "inproc://dtorch-monitor-" + name + "-" +
                        std::to_string(getpid()) + "-" +
                        std::to_string(counter++);
  if (zmq_socket_monitor(monitored.handle(), address.c_str(),
                         ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                             (watchDisconnects ? ZMQ_EVENT_DISCONNECTED : 0) |
                             extraEvents) != 0)
    throw RuntimeError(std::string("zmq_socket_monitor failed: ") +
                       zmq_strerror(zmq_errno()));
  socket_.set(zmq::sockopt::linger, 0);
  socket_.connect(address);
}

std::vector<HandshakeMonitor::Failure> HandshakeMonitor::poll() {
  std::vector<Failure> failures;
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
    uint32_t value;
    std::memcpy(&event, header.data(), sizeof(event));
    std::memcpy(&value, static_cast<const char *>(header.data()) + 2,
                sizeof(value));
    if (event == ZMQ_EVENT_DISCONNECTED)
      failures.push_back({endpoint.to_string(), "", true, value, event});
    else if (event != ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL &&
             event != ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
             event != ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) // an extra event
      failures.push_back({endpoint.to_string(), "", false, value, event});
    else
      failures.push_back({endpoint.to_string(),
                          describeHandshakeFailure(event, value), false, value,
                          event});
  }
  return failures;
}

} // namespace dtorch::rt
