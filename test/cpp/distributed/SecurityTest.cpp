// Security of the transport (docs/guide/security.md): bounds on every size
// in a message, checked before allocating; secrets read from files and
// descriptors and never echoed; CURVE keys and a worker that accepts only
// the controller's key; Gloo pairs that refuse a process that is not a
// member of the mesh.
#include "DistributedTestSupport.h"
#include "TestSupport.h"

#include "dtorch/runtime/GlooCollectives.h"
#include "dtorch/runtime/InMemoryKeyValueStore.h"
#include "dtorch/runtime/ProgramValidator.h"
#include "dtorch/runtime/Security.h"
#include "dtorch/runtime/Transport.h"
#include "dtorch/runtime/WireLimits.h"
#include "dtorch/runtime/Worker.h"

#include <arpa/inet.h>
#include <condition_variable>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>

namespace dtorch::rt::test {
namespace {

namespace wire = ::dtorch::wire;
using namespace std::chrono_literals;

/// A file in this test program's own directory, made on first use and
/// removed with everything in it when the program ends.
std::string tempPath(const std::string &name) {
  struct Directory {
    std::string path;
    Directory() {
      char pattern[] = "/tmp/dtorch-security-XXXXXX";
      if (!mkdtemp(pattern))
        throw std::runtime_error("mkdtemp failed");
      path = pattern;
    }
    ~Directory() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const Directory dir;
  return dir.path + "/" + name;
}

void writeFile(const std::string &path, const std::string &content) {
  std::ofstream(path) << content;
}

// ---- bounds ---------------------------------------------------------------

TEST(SecurityBounds, TensorHeadersAreCheckedBeforeAllocating) {
  std::vector<int64_t> huge = {int64_t(1) << 62};
  expectRuntimeError([&] { checkTensorHeader(wire::F32, huge.data(), 1); },
                     {"exceeds the limit"});
  std::vector<int64_t> negative = {4, -1};
  expectRuntimeError([&] { checkTensorHeader(wire::F32, negative.data(), 2); },
                     {"negative"});
  std::vector<int64_t> deep(kMaxTensorRank + 1, 1);
  expectRuntimeError(
      [&] {
        checkTensorHeader(wire::F32, deep.data(),
                          static_cast<int>(deep.size()));
      },
      {"rank 17", "limit of 16"});
  std::vector<int64_t> overflowing = {int64_t(1) << 40, int64_t(1) << 40};
  expectRuntimeError(
      [&] { checkTensorHeader(wire::F64, overflowing.data(), 2); },
      {"overflows"});
  std::vector<int64_t> fine = {3, 4};
  checkTensorHeader(wire::F32, fine.data(), 2);
  expectRuntimeError(
      [&] { checkTensorHeader(wire::DTYPE_INVALID, fine.data(), 2); },
      {"no dtype"});

  // 2^61 + 1 float64 elements are 2^64 + 8 bytes: a size_t product wraps to
  // 8, which the 8 bytes of data would match. Refused by the bound.
  wire::TensorData data;
  data.set_dtype(wire::F64);
  data.add_shape((int64_t(1) << 61) + 1);
  data.set_data(std::string(8, '\0'));
  expectRuntimeError([&] { tensorFromWire(data); }, {"exceeds the limit"});
}

TEST(SecurityBounds, ValidatorRefusesAbsurdPrograms) {
  ProgramBuilder big;
  int in = big.input(wire::F32, {int64_t(1) << 40, int64_t(1) << 10});
  big.output(in);
  expectRuntimeError([&] { validateProgram(big.program(), -1); },
                     {"buffer 0", "too many elements"});

  ProgramBuilder deep;
  int x = deep.input(wire::F32, std::vector<int64_t>(kMaxTensorRank + 1, 1));
  deep.output(x);
  expectRuntimeError([&] { validateProgram(deep.program(), -1); },
                     {"buffer 0", "rank 17"});

  ProgramBuilder events;
  int y = events.input(wire::F32, {2});
  events.output(y);
  wire::Program program = events.program();
  program.set_num_events(kMaxProgramEvents + 1);
  expectRuntimeError([&] { validateProgram(program, -1); },
                     {"exceeds the limits"});

  ProgramBuilder arena;
  int z = arena.input(wire::F32, {2});
  arena.output(z);
  program = arena.program();
  program.set_arena_bytes(kMaxTensorBytes + 1);
  expectRuntimeError([&] { validateProgram(program, -1); }, {"arena"});
}

// ---- secrets --------------------------------------------------------------

TEST(SecuritySecrets, FilesAndDescriptorsAreReadAndNeverEchoed) {
  std::string path = tempPath("token");
  writeFile(path, "  s3cr3t-value\n\n");
  EXPECT_EQ(readSecretFile(path), "s3cr3t-value");

  std::string empty = tempPath("empty-token");
  writeFile(empty, "\n");
  expectRuntimeError([&] { readSecretFile(empty); }, {empty, "empty"});
  expectRuntimeError([&] { readSecretFile(tempPath("missing")); },
                     {"cannot open the token file"});

  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "from-a-pipe\n", 12), 12);
  close(fds[1]);
  EXPECT_EQ(readSecretDescriptor(fds[0]), "from-a-pipe");
  EXPECT_EQ(fcntl(fds[0], F_GETFD), -1) << "the descriptor is closed";

  // A key file that holds something else: the error names the file, never
  // what is in it.
  std::string notKey = tempPath("not-a-key");
  writeFile(notKey, "my-password-123\n");
  try {
    readCurveKeyFile(notKey, "the controller's CURVE public key");
    FAIL() << "expected an error";
  } catch (const RuntimeError &e) {
    std::string message = e.what();
    EXPECT_NE(message.find(notKey), std::string::npos) << message;
    EXPECT_EQ(message.find("my-password-123"), std::string::npos) << message;
  }
}

std::vector<std::string> args(std::vector<std::string> list) {
  list.insert(list.begin(), "dtorch-worker");
  return list;
}

WorkerOptions parse(std::vector<std::string> list) {
  std::vector<std::string> all = args(std::move(list));
  std::vector<char *> argv;
  for (std::string &a : all)
    argv.push_back(a.data());
  return parseWorkerArgs(static_cast<int>(argv.size()), argv.data());
}

TEST(SecuritySecrets, WorkerTakesItsTokenFromAFileADescriptorOrTheEnvironment) {
  std::string path = tempPath("worker-token");
  writeFile(path, "file-token\n");
  std::vector<std::string> base = {"--listen", "tcp://127.0.0.1:0", "--ranks",
                                   "0-0",      "--world-size",      "1"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> all = base;
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  };
  unsetenv("DTORCH_TOKEN");
  WorkerOptions o = parse(with({"--token-file", path}));
  EXPECT_EQ(o.token, "file-token");
  EXPECT_FALSE(o.tokenOnCommandLine);

  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "fd-token", 8), 8);
  close(fds[1]);
  o = parse(with({"--token-fd", std::to_string(fds[0])}));
  EXPECT_EQ(o.token, "fd-token");

  setenv("DTORCH_TOKEN", "env-token", 1);
  o = parse(base);
  EXPECT_EQ(o.token, "env-token");
  o = parse(with({"--token-file", path})); // a flag wins over the environment
  EXPECT_EQ(o.token, "file-token");
  unsetenv("DTORCH_TOKEN");

  o = parse(with({"--token", "argv-token"}));
  EXPECT_TRUE(o.tokenOnCommandLine);
  expectRuntimeError([&] { parse(base); }, {"a token is required"});
  expectRuntimeError(
      [&] { parse(with({"--token-file", path, "--token", "x"})); },
      {"give the token once"});

  o = parse(with({"--token-file", path}));
  EXPECT_EQ(o.glooHost, "127.0.0.1") << "collective links on loopback";
  setenv("DTORCH_COLLECTIVE_ADDRESS", "10.1.2.3", 1);
  EXPECT_EQ(parse(with({"--token-file", path})).glooHost, "10.1.2.3");
  EXPECT_EQ(
      parse(with({"--token-file", path, "--collective-address", "127.0.0.5"}))
          .glooHost,
      "127.0.0.5");
  unsetenv("DTORCH_COLLECTIVE_ADDRESS");
}

// ---- CURVE ----------------------------------------------------------------

TEST(SecurityCurve, KeyPairsAndKeyFiles) {
  ASSERT_TRUE(curveAvailable()) << "Debian's libzmq5 is built with libsodium";
  CurveKeyPair pair = generateCurveKeyPair();
  EXPECT_TRUE(isCurveKey(pair.publicKey));
  EXPECT_TRUE(isCurveKey(pair.secretKey));
  EXPECT_NE(pair.publicKey, pair.secretKey);
  EXPECT_EQ(curvePublicKeyOf(pair.secretKey), pair.publicKey);
  EXPECT_FALSE(isCurveKey("too short"));

  std::string prefix = tempPath("node");
  CurveKeyPair written = writeCurveKeyPairFiles(prefix);
  struct stat info{};
  ASSERT_EQ(stat((prefix + ".key").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(readCurveKeyFile(prefix + ".key", "a secret key"),
            written.secretKey);
  EXPECT_EQ(readCurveKeyFile(prefix + ".pub", "a public key"),
            written.publicKey);
}

// A worker started by hand, listening on loopback, token from a file.
class HandStartedWorker : public ::testing::Test {
protected:
  void start(const std::vector<std::string> &extra = {}) {
    port_ = freePort();
    address_ = "tcp://127.0.0.1:" + std::to_string(port_);
    std::string tokenFile = tempPath("hand-token");
    writeFile(tokenFile, "tok-1234\n");
    std::vector<std::string> argv = {
        "--listen",     address_,  "--token-file",
        tokenFile,      "--ranks", "0-1",
        "--world-size", "2",       "--controller-timeout-ms",
        "20000"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    worker_.pid = detail::spawnProcess(DTORCH_WORKER_PATH, argv);
  }
  std::unique_ptr<zmq::socket_t> dealer() {
    auto socket =
        std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
    socket->set(zmq::sockopt::linger, 0);
    socket->set(zmq::sockopt::rcvtimeo, 5000);
    return socket;
  }
  static void send(zmq::socket_t &socket, const wire::Envelope &e) {
    socket.send(zmq::buffer(encodeEnvelope(e)), zmq::send_flags::none);
  }
  // The next message that is not a heartbeat.
  static wire::Envelope receive(zmq::socket_t &socket) {
    while (true) {
      zmq::message_t message;
      auto got = socket.recv(message, zmq::recv_flags::none);
      wire::Envelope e;
      if (!got) {
        ADD_FAILURE() << "no reply from the worker";
        return e;
      }
      EXPECT_TRUE(decodeEnvelope(message.data(), message.size(), e));
      if (e.body_case() != wire::Envelope::kHeartbeat)
        return e;
    }
  }
  static wire::Envelope envelope(uint64_t requestId = 0) {
    wire::Envelope e;
    e.set_protocol_version(wire::PROTOCOL_VERSION);
    e.set_request_id(requestId);
    return e;
  }
  static wire::Envelope hello(const std::string &token) {
    wire::Envelope e = envelope();
    *e.mutable_hello() = makeHello(wire::ROLE_CONTROLLER, token);
    return e;
  }

  int port_ = 0;
  std::string address_;
  ProcessGuard worker_;
  zmq::context_t context_;
};

TEST_F(HandStartedWorker, RefusesAbsurdSizesWithErrorRepliesAndStaysUp) {
  start();
  auto socket = dealer();
  socket->connect(address_);

  // Without the right token nothing runs, and the reply never shows the
  // token (the right one or the one offered).
  wire::Envelope put = envelope();
  put.mutable_put()->set_rank(0);
  put.mutable_put()->set_handle(1);
  tensorToWire(makeTensor<float>(wire::F32, {1}, {1.f}),
               put.mutable_put()->mutable_value());
  send(*socket, put);
  EXPECT_NE(receive(*socket).error().message().find("not authenticated"),
            std::string::npos);
  send(*socket, hello("guess-9876"));
  std::string refused = receive(*socket).error().message();
  EXPECT_NE(refused.find("wrong token"), std::string::npos) << refused;
  EXPECT_EQ(refused.find("guess-9876"), std::string::npos) << refused;
  EXPECT_EQ(refused.find("tok-1234"), std::string::npos) << refused;

  send(*socket, hello("tok-1234"));
  ASSERT_EQ(receive(*socket).body_case(), wire::Envelope::kHello);

  // A put of 2^62 elements with 8 bytes of data: refused, nothing allocated.
  wire::Envelope hugePut = envelope();
  hugePut.mutable_put()->set_rank(0);
  hugePut.mutable_put()->set_handle(2);
  auto *value = hugePut.mutable_put()->mutable_value();
  value->set_dtype(wire::F32);
  value->add_shape(int64_t(1) << 62);
  value->set_data(std::string(8, '\0'));
  send(*socket, hugePut);
  wire::Envelope reply = receive(*socket);
  ASSERT_EQ(reply.body_case(), wire::Envelope::kError);
  EXPECT_NE(reply.error().message().find("exceeds the limit"),
            std::string::npos)
      << reply.error().message();

  // 17 dims and a negative extent.
  wire::Envelope deepPut = envelope();
  deepPut.mutable_put()->set_rank(1);
  deepPut.mutable_put()->set_handle(3);
  deepPut.mutable_put()->mutable_value()->set_dtype(wire::F32);
  for (int d = 0; d < 17; ++d)
    deepPut.mutable_put()->mutable_value()->add_shape(1);
  deepPut.mutable_put()->mutable_value()->set_data(std::string(4, '\0'));
  send(*socket, deepPut);
  reply = receive(*socket);
  EXPECT_NE(reply.error().message().find("rank 17"), std::string::npos)
      << reply.error().message();

  // An upload over a mesh of 2^62 positions and no ranks listed: before the
  // bound, the worker listed every position. A run of it reports why.
  wire::Envelope upload = envelope();
  upload.mutable_upload()->set_program_id(7);
  ProgramBuilder builder;
  int in = builder.input(wire::F32, {2});
  builder.output(in);
  wire::Program program = onOneRankMesh(builder.program());
  program.clear_mesh_shape();
  program.add_mesh_shape(int64_t(1) << 31);
  program.add_mesh_shape(int64_t(1) << 31);
  *upload.mutable_upload()->add_programs() = program;
  send(*socket, upload);
  wire::Envelope run = envelope();
  run.mutable_run()->set_program_id(7);
  run.mutable_run()->add_ranks(0);
  run.mutable_run()->add_inputs(1);
  run.mutable_run()->add_outputs(4);
  send(*socket, run);
  reply = receive(*socket);
  EXPECT_NE(reply.error().message().find("larger than"), std::string::npos)
      << reply.error().message();

  // More handles than the bound, a repeated rank, a huge trace buffer.
  wire::Envelope many = envelope(11);
  many.mutable_free()->add_ranks(0);
  for (int h = 0; h <= kMaxHandlesPerMessage; ++h)
    many.mutable_free()->add_handles(1);
  send(*socket, many);
  reply = receive(*socket);
  EXPECT_EQ(reply.request_id(), 11u);
  EXPECT_NE(reply.error().message().find("more than the limit"),
            std::string::npos)
      << reply.error().message();
  wire::Envelope twice = envelope(12);
  twice.mutable_run()->set_program_id(7);
  twice.mutable_run()->add_ranks(0);
  twice.mutable_run()->add_ranks(0);
  send(*socket, twice);
  EXPECT_NE(receive(*socket).error().message().find("repeated"),
            std::string::npos);
  wire::Envelope trace = envelope(13);
  trace.mutable_trace()->set_rank(0);
  trace.mutable_trace()->set_action(wire::TraceRequest::START);
  trace.mutable_trace()->set_capacity(uint64_t(1) << 40);
  send(*socket, trace);
  EXPECT_NE(receive(*socket).error().message().find("trace capacity"),
            std::string::npos);

  // Still up and answering.
  wire::Envelope sync = envelope(14);
  sync.mutable_sync();
  send(*socket, sync);
  wire::Envelope synced = receive(*socket);
  EXPECT_EQ(synced.body_case(), wire::Envelope::kSyncReply);
  EXPECT_EQ(synced.request_id(), 14u);
  EXPECT_TRUE(processAlive(worker_.pid));
  // Nothing of those sizes was allocated: the worker's peak resident memory
  // stays far below them.
  std::ifstream status("/proc/" + std::to_string(worker_.pid) + "/status");
  std::string line;
  int64_t peakKiB = -1;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0)
      peakKiB = std::stoll(line.substr(6));
  EXPECT_GT(peakKiB, 0);
  EXPECT_LT(peakKiB, int64_t(2) << 20) << "peak resident KiB";
}

// Polls `monitor` until a handshake failure shows up (or `limit` passes).
std::string firstFailure(HandshakeMonitor &monitor,
                         std::chrono::milliseconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    std::vector<HandshakeMonitor::Failure> failures = monitor.poll();
    if (!failures.empty())
      return failures.front().reason;
    std::this_thread::sleep_for(20ms);
  }
  return "";
}

TEST_F(HandStartedWorker, CurveAcceptsOnlyTheControllersKey) {
  std::string workerPrefix = tempPath("worker"),
              controllerPrefix = tempPath("controller"),
              strangerPrefix = tempPath("stranger");
  CurveKeyPair workerKeys = writeCurveKeyPairFiles(workerPrefix);
  CurveKeyPair controllerKeys = writeCurveKeyPairFiles(controllerPrefix);
  CurveKeyPair strangerKeys = writeCurveKeyPairFiles(strangerPrefix);
  start({"--curve-secret-key-file", workerPrefix + ".key",
         "--curve-controller-public-key-file", controllerPrefix + ".pub"});

  // A client with another key: the worker's ZAP handler refuses it, and the
  // client's monitor reports it.
  auto stranger = dealer();
  HandshakeMonitor strangerMonitor(context_, *stranger, "stranger");
  makeCurveClient(*stranger, strangerKeys.secretKey, workerKeys.publicKey);
  stranger->connect(address_);
  send(*stranger, hello("tok-1234"));
  std::string why = firstFailure(strangerMonitor, 10s);
  EXPECT_NE(why.find("refused this side's CURVE key"), std::string::npos)
      << why;

  // A plain-text client: a mechanism mismatch.
  auto plain = dealer();
  HandshakeMonitor plainMonitor(context_, *plain, "plain");
  plain->connect(address_);
  send(*plain, hello("tok-1234"));
  why = firstFailure(plainMonitor, 10s);
  EXPECT_TRUE(why.find("mechanism mismatch") != std::string::npos ||
              why.find("do not match") != std::string::npos)
      << why;

  // Neither got anything through: the controller's key with the right token
  // is served, and the worker answers its first request.
  auto controller = dealer();
  makeCurveClient(*controller, controllerKeys.secretKey, workerKeys.publicKey);
  controller->connect(address_);
  send(*controller, hello("tok-1234"));
  wire::Envelope reply = receive(*controller);
  ASSERT_EQ(reply.body_case(), wire::Envelope::kHello);
  EXPECT_EQ(reply.hello().num_ranks(), 2);
  wire::Envelope sync = envelope(3);
  sync.mutable_sync();
  send(*controller, sync);
  EXPECT_EQ(receive(*controller).body_case(), wire::Envelope::kSyncReply);
  zmq::message_t nothing;
  stranger->set(zmq::sockopt::rcvtimeo, 100);
  EXPECT_FALSE(stranger->recv(nothing, zmq::recv_flags::none).has_value());

  // With CURVE on, the token still applies.
  auto wrongToken = dealer();
  makeCurveClient(*wrongToken, controllerKeys.secretKey, workerKeys.publicKey);
  wrongToken->connect(address_);
  send(*wrongToken, hello("not-the-token"));
  EXPECT_NE(receive(*wrongToken).error().message().find("wrong token"),
            std::string::npos);
}

// ---- Gloo pairs -----------------------------------------------------------

// TCP ports this process listens on at `ip` (dotted quad), from /proc.
std::set<int> listeningPorts(const std::string &ip) {
  std::set<std::string> inodes;
  if (DIR *dir = opendir("/proc/self/fd")) {
    while (dirent *entry = readdir(dir)) {
      char target[256] = {};
      std::string link = std::string("/proc/self/fd/") + entry->d_name;
      ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
      std::string text(target, n > 0 ? static_cast<size_t>(n) : 0);
      if (text.rfind("socket:[", 0) == 0)
        inodes.insert(text.substr(8, text.size() - 9));
    }
    closedir(dir);
  }
  in_addr address{};
  inet_pton(AF_INET, ip.c_str(), &address);
  char hex[16];
  std::snprintf(hex, sizeof(hex), "%08X", address.s_addr);
  std::set<int> ports;
  std::ifstream table("/proc/self/net/tcp");
  std::string line;
  std::getline(table, line);
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid,
        timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >>
        retransmits >> uid >> timeout >> inode;
    if (state == "0A" && local.substr(0, 8) == hex && inodes.count(inode))
      ports.insert(std::stoi(local.substr(9), nullptr, 16));
  }
  return ports;
}

int connectTo(const std::string &ip, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip.c_str(), &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) !=
      0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Each test uses its own loopback address, so the listening sockets of its
// Gloo pairs can be told apart from the others of this process. (The Gloo
// of Debian 12 listens on one port per pair until its peer connects, and
// takes the first connection that arrives.)
TEST(SecurityGloo, AuthenticatedPairsRunCollectivesAndLeaveNoPortOpen) {
  const std::string ip = "127.0.0.3";
  auto store = std::make_shared<InMemoryKeyValueStore>();
  GlooOptions options;
  options.hostname = ip;
  options.deadline = 10s;
  options.pairSecret = "mesh-secret";
  std::vector<std::unique_ptr<Communicator>> comms(3);
  runRanks(
      3, [&](int rank) { comms[rank] = connectGloo(rank, 3, store, options); });
  // Connected: nothing listens on the collective address any more, so a
  // stray process has nothing to connect to.
  EXPECT_TRUE(listeningPorts(ip).empty());
  std::vector<Tensor> out(3);
  runRanks(3, [&](int rank) {
    Tensor x =
        makeTensor<float>(wire::F32, {3}, {1.f + rank, 2.f * (rank + 1), 10.f});
    out[rank] = Tensor::empty(wire::F32, {3});
    comms[rank]->all_reduce(x, out[rank], {0, 1, 2}, ReduceOp::Sum);
  });
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_EQ(valuesOf<float>(out[rank]),
              (std::vector<float>{6.f, 12.f, 30.f}));
}

TEST(SecurityGloo, AProcessStandingInForAPeerIsRefused) {
  const std::string ip = "127.0.0.4";
  auto store = std::make_shared<InMemoryKeyValueStore>();
  GlooOptions options;
  options.hostname = ip;
  options.deadline = 3s;
  options.pairSecret = "mesh-secret";
  std::vector<std::string> errors(2);
  auto connectRank = [&](int rank) {
    try {
      connectGloo(rank, 2, store, options);
    } catch (const std::exception &e) {
      errors[rank] = e.what();
    }
  };
  std::thread first(connectRank, 0);
  // While rank 0 waits for its peer, an impostor connects to the port its
  // pair listens on, first: Gloo hands it the pair.
  std::set<int> ports;
  for (int i = 0; i < 500 && ports.empty(); ++i) {
    ports = listeningPorts(ip);
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(ports.size(), 1u);
  int impostor = connectTo(ip, *ports.begin());
  ASSERT_GE(impostor, 0);
  int64_t sequence = 0; // what a newer Gloo's listener expects first
  ASSERT_EQ(write(impostor, &sequence, sizeof(sequence)),
            static_cast<ssize_t>(sizeof(sequence)));
  std::this_thread::sleep_for(100ms);
  std::thread second(connectRank, 1);
  first.join();
  second.join();
  close(impostor);
  // Neither rank took the impostor for its peer: rank 0 found that the
  // other end cannot answer the challenge.
  EXPECT_FALSE(errors[1].empty());
  EXPECT_NE(errors[0].find("did not prove membership"), std::string::npos)
      << errors[0] << "\n"
      << errors[1];
}

} // namespace
} // namespace dtorch::rt::test
