// Workers that dial in to the controller: DialInAdmission's decisions, and a
// Cluster in dial-in mode driven by fake workers (ZeroMQ DEALER sockets of
// this test that speak the Hello handshake), so every refusal, the
// admission deadline and a connection closed after admission are seen
// without worker processes. test/python/test_dial_in.py runs real ones.
#include "dtorch/runtime/Cluster.h"
#include "dtorch/runtime/DialInAdmission.h"
#include "dtorch/runtime/Transport.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <future>
#include <netinet/in.h>
#include <optional>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace dtorch::rt::test {
namespace {

namespace wire = ::dtorch::wire;
using Ms = std::chrono::milliseconds;

const char *kToken = "dial-in-token";

wire::Hello workerHello(int first, int count, int world,
                        const std::string &token = kToken,
                        const std::string &host = "node-a", int64_t pid = 100) {
  wire::Hello hello = makeHello(wire::ROLE_WORKER, token);
  hello.set_first_rank(first);
  hello.set_num_ranks(count);
  hello.set_world_size(world);
  hello.set_host(host);
  hello.set_pid(pid);
  return hello;
}

// ---- DialInAdmission ----------------------------------------------------

TEST(DialInAdmission, AdmitsBlocksInAnyOrderUntilTheWorldIsComplete) {
  DialInAdmission admission(6, kToken);
  EXPECT_EQ(admission.missingRanks(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(admission.offer("p2", "10.0.0.3", workerHello(4, 2, 6)).admitted);
  EXPECT_TRUE(admission.offer("p0", "10.0.0.1", workerHello(0, 1, 6)).admitted);
  EXPECT_FALSE(admission.complete());
  EXPECT_EQ(admission.missingRanks(), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(admission.describeMissing().substr(0, 30),
            "ranks 1-3 of 6 never arrived (");
  EXPECT_NE(admission.describeMissing().find("host node-a pid 100 (ranks 4-5) "
                                             "from 10.0.0.3"),
            std::string::npos);
  EXPECT_TRUE(admission.offer("p1", "", workerHello(1, 3, 6)).admitted);
  EXPECT_TRUE(admission.complete());
  EXPECT_EQ(admission.admitted().size(), 3u);
}

TEST(DialInAdmission, NamesBothWorkersOfADuplicateRank) {
  DialInAdmission admission(4, kToken);
  ASSERT_TRUE(
      admission.offer("a", "10.0.0.1", workerHello(0, 2, 4, kToken, "a", 11))
          .admitted);
  auto decision =
      admission.offer("b", "10.0.0.2", workerHello(1, 2, 4, kToken, "b", 22));
  EXPECT_FALSE(decision.admitted);
  EXPECT_EQ(decision.reason,
            "the worker host b pid 22 (ranks 1-2) from 10.0.0.2 was refused: "
            "duplicate rank: rank 1 is already held by the worker host a pid "
            "11 (ranks 0-1) from 10.0.0.1");
  // The same block twice (a worker started twice) is refused too.
  decision = admission.offer("c", "", workerHello(0, 2, 4, kToken, "a", 33));
  EXPECT_NE(decision.reason.find("duplicate rank: ranks 0-1 is already held"),
            std::string::npos)
      << decision.reason;
  EXPECT_EQ(admission.admitted().size(), 1u);
}

TEST(DialInAdmission, RefusesAnotherWorldSizeOrRanksOutsideTheWorld) {
  DialInAdmission admission(4, kToken);
  auto decision = admission.offer("a", "", workerHello(0, 1, 8));
  EXPECT_NE(decision.reason.find("world size mismatch: it was started for a "
                                 "world of 8 ranks, the controller's world "
                                 "size is 4"),
            std::string::npos)
      << decision.reason;
  decision = admission.offer("a", "", workerHello(3, 2, 4));
  EXPECT_NE(decision.reason.find(
                "ranks 3-4 is not inside the world of 4 ranks (0-3)"),
            std::string::npos)
      << decision.reason;
  decision = admission.offer("a", "", workerHello(-1, 1, 4));
  EXPECT_NE(decision.reason.find("no valid block of ranks"), std::string::npos);
  decision = admission.offer("a", "", workerHello(0, 0, 4));
  EXPECT_NE(decision.reason.find("no valid block of ranks"), std::string::npos);
  EXPECT_TRUE(admission.admitted().empty());
}

TEST(DialInAdmission, LearnsTheWorldSizeFromTheFirstWorker) {
  DialInAdmission admission(0, kToken);
  EXPECT_EQ(admission.describeMissing(), "no worker arrived");
  EXPECT_FALSE(admission.complete());
  ASSERT_TRUE(admission.offer("a", "", workerHello(2, 2, 4)).admitted);
  EXPECT_EQ(admission.worldSize(), 4);
  auto decision =
      admission.offer("b", "", workerHello(0, 2, 3, kToken, "b", 7));
  EXPECT_NE(decision.reason.find("world size mismatch: it was started for a "
                                 "world of 3 ranks, the controller's world "
                                 "size is 4 (the world of host node-a pid 100 "
                                 "(ranks 2-3))"),
            std::string::npos)
      << decision.reason;
  EXPECT_TRUE(admission.offer("c", "", workerHello(0, 2, 4)).admitted);
  EXPECT_TRUE(admission.complete());
}

TEST(DialInAdmission, RefusesAWrongTokenProtocolOrRole) {
  DialInAdmission admission(2, kToken);
  auto decision =
      admission.offer("a", "", workerHello(0, 1, 2, "wrong", "h", 5));
  EXPECT_EQ(decision.reason, "the worker host h pid 5 (rank 0) was refused: "
                             "authentication failed: wrong token");
  wire::Hello old = workerHello(0, 1, 2);
  old.set_protocol_version(wire::PROTOCOL_VERSION - 1);
  decision = admission.offer("a", "", old);
  EXPECT_NE(decision.reason.find("protocol version mismatch: peer speaks "
                                 "version " +
                                 std::to_string(wire::PROTOCOL_VERSION - 1)),
            std::string::npos)
      << decision.reason;
  wire::Hello controller = workerHello(0, 1, 2);
  controller.set_role(wire::ROLE_CONTROLLER);
  decision = admission.offer("a", "", controller);
  EXPECT_NE(decision.reason.find("unexpected peer role"), std::string::npos);
  EXPECT_TRUE(admission.admitted().empty());
}

TEST(DialInAdmission, AWithdrawnWorkerFreesItsRanks) {
  DialInAdmission admission(2, kToken);
  ASSERT_TRUE(admission.offer("a", "", workerHello(0, 1, 2)).admitted);
  EXPECT_FALSE(admission.offer("b", "", workerHello(0, 1, 2)).admitted);
  EXPECT_TRUE(admission.holds("a"));
  EXPECT_TRUE(admission.withdraw("a"));
  EXPECT_FALSE(admission.withdraw("a"));
  EXPECT_FALSE(admission.holds("a"));
  EXPECT_TRUE(admission.offer("b", "", workerHello(0, 1, 2)).admitted);
  EXPECT_EQ(admission.missingRanks(), std::vector<int>{1});
}

TEST(DialInAdmission, FormatsRankLists) {
  EXPECT_EQ(formatRankList({}), "");
  EXPECT_EQ(formatRankList({3}), "3");
  EXPECT_EQ(formatRankList({0, 1, 2, 5, 7, 8}), "0-2, 5, 7-8");
}

// ---- a Cluster in dial-in mode, with fake workers -----------------------

int freePort() {
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::router);
  socket.set(zmq::sockopt::linger, 0);
  socket.bind("tcp://127.0.0.1:*");
  std::string endpoint = socket.get(zmq::sockopt::last_endpoint);
  return std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
}

// Connects a plain TCP socket to the controller's port once it listens,
// writes `bytes` (not ZMTP) and closes it: a stray connection.
void strayConnection(int port, const std::string &bytes) {
  auto deadline = std::chrono::steady_clock::now() + Ms(10000);
  while (std::chrono::steady_clock::now() < deadline) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr *>(&address),
                  sizeof(address)) == 0) {
      if (!bytes.empty())
        (void)!::write(fd, bytes.data(), bytes.size());
      ::close(fd);
      return;
    }
    ::close(fd);
    std::this_thread::sleep_for(Ms(10));
  }
  FAIL() << "the controller never listened on port " << port;
}

// A worker of this test: a DEALER that connects and says Hello.
class FakeWorker {
public:
  FakeWorker(zmq::context_t &context, const std::string &endpoint)
      : socket_(context, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(endpoint);
  }
  void send(const wire::Envelope &e) {
    socket_.send(zmq::buffer(encodeEnvelope(e)), zmq::send_flags::none);
  }
  void hello(const wire::Hello &hello) {
    wire::Envelope e;
    e.set_protocol_version(wire::PROTOCOL_VERSION);
    *e.mutable_hello() = hello;
    send(e);
  }
  /// The next message other than a heartbeat, within `timeout`.
  std::optional<wire::Envelope> receive(Ms timeout = Ms(5000)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, Ms(20));
      zmq::message_t message;
      if (!socket_.recv(message, zmq::recv_flags::dontwait))
        continue;
      wire::Envelope e;
      if (decodeEnvelope(message.data(), message.size(), e) &&
          e.body_case() != wire::Envelope::kHeartbeat)
        return e;
    }
    return std::nullopt;
  }
  void close() { socket_.close(); }

private:
  zmq::socket_t socket_;
};

ClusterOptions dialInOptions(int port, int world, Ms timeout = Ms(10000)) {
  ClusterOptions options;
  options.listenAddress = "127.0.0.1:" + std::to_string(port);
  options.worldSize = world;
  options.token = kToken;
  options.admissionTimeout = timeout;
  return options;
}

/// Starts a Cluster on another thread (its constructor waits for the
/// world).
std::future<std::unique_ptr<Cluster>> startCluster(ClusterOptions options) {
  return std::async(std::launch::async,
                    [options] { return std::make_unique<Cluster>(options); });
}

TEST(DialInCluster, AdmitsTheWholeWorldAndAnswersOnlyThen) {
  int port = freePort();
  auto started = startCluster(dialInOptions(port, 3));
  zmq::context_t context(1);
  std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  FakeWorker second(context, endpoint), first(context, endpoint);
  second.hello(workerHello(1, 2, 3, kToken, "node-b", 2));
  // The same Hello again on the same connection changes nothing.
  second.hello(workerHello(1, 2, 3, kToken, "node-b", 2));
  // Not answered while rank 0 is missing.
  EXPECT_FALSE(second.receive(Ms(300)));
  first.hello(workerHello(0, 1, 3, kToken, "node-a", 1));
  for (FakeWorker *w : {&first, &second}) {
    std::optional<wire::Envelope> reply = w->receive();
    ASSERT_TRUE(reply);
    ASSERT_EQ(reply->body_case(), wire::Envelope::kHello);
    EXPECT_EQ(reply->hello().role(), wire::ROLE_CONTROLLER);
  }
  ASSERT_EQ(started.wait_for(Ms(5000)), std::future_status::ready);
  std::unique_ptr<Cluster> cluster = started.get();
  EXPECT_EQ(cluster->worldSize(), 3);
  EXPECT_EQ(cluster->hostOf(0), "node-a");
  EXPECT_EQ(cluster->hostOf(2), "node-b");
  EXPECT_EQ(cluster->pidOf(1), 2);
  // A worker that closes its connection after admission is dead at once,
  // and named.
  second.close();
  auto deadline = std::chrono::steady_clock::now() + Ms(3000);
  while (!cluster->hasDeadWorker() &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(Ms(10));
  EXPECT_TRUE(cluster->hasDeadWorker());
  try {
    cluster->synchronize();
    FAIL() << "synchronize succeeded with a dead worker";
  } catch (const WorkerError &error) {
    EXPECT_EQ(error.rank(), 1);
    EXPECT_EQ(error.host(), "node-b");
    EXPECT_NE(std::string(error.what()).find("closed its connection"),
              std::string::npos)
        << error.what();
  }
}

// A refused Hello fails the start: the worker is told why, so are the
// admitted ones, and the constructor's WorkerError names the refused one.
void expectRefusal(const wire::Hello &bad, const std::string &words) {
  int port = freePort();
  auto started = startCluster(dialInOptions(port, 2));
  zmq::context_t context(1);
  std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  // The good worker first, once the controller listens; then the bad one.
  strayConnection(port, "");
  FakeWorker good(context, endpoint);
  good.hello(workerHello(0, 1, 2));
  std::this_thread::sleep_for(Ms(300));
  FakeWorker refused(context, endpoint);
  refused.hello(bad);
  std::optional<wire::Envelope> reply = refused.receive();
  ASSERT_TRUE(reply);
  ASSERT_EQ(reply->body_case(), wire::Envelope::kError);
  EXPECT_NE(reply->error().message().find(words), std::string::npos)
      << reply->error().message();
  reply = good.receive();
  if (!reply) {
    try {
      started.get();
    } catch (const std::exception &e) {
      ADD_FAILURE()
          << "the admitted worker was not told; the start failed with: "
          << e.what();
    }
  }
  ASSERT_TRUE(reply);
  ASSERT_EQ(reply->body_case(), wire::Envelope::kError);
  EXPECT_NE(reply->error().message().find("the controller's start failed: "),
            std::string::npos);
  ASSERT_EQ(started.wait_for(Ms(5000)), std::future_status::ready);
  try {
    started.get();
    FAIL() << "the cluster started";
  } catch (const WorkerError &error) {
    EXPECT_NE(std::string(error.what())
                  .find("cluster start failed: the "
                        "worker host refused pid 9"),
              std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find(words), std::string::npos);
    EXPECT_EQ(error.host(), "refused");
  }
}

TEST(DialInCluster, AWrongProtocolVersionFailsTheStartNamingTheWorker) {
  wire::Hello old = workerHello(1, 1, 2, kToken, "refused", 9);
  old.set_protocol_version(wire::PROTOCOL_VERSION + 1);
  expectRefusal(old, "protocol version mismatch: peer speaks version " +
                         std::to_string(wire::PROTOCOL_VERSION + 1));
}

TEST(DialInCluster, AWrongTokenFailsTheStartNamingTheWorker) {
  expectRefusal(workerHello(1, 1, 2, "not-the-token", "refused", 9),
                "authentication failed: wrong token");
}

TEST(DialInCluster, ADuplicateRankFailsTheStartNamingBothWorkers) {
  expectRefusal(workerHello(0, 1, 2, kToken, "refused", 9),
                "duplicate rank: rank 0 is already held by the worker host "
                "node-a pid 100 (rank 0)");
}

TEST(DialInCluster, AWorldSizeMismatchFailsTheStart) {
  expectRefusal(workerHello(1, 1, 5, kToken, "refused", 9),
                "world size mismatch: it was started for a world of 5 ranks");
}

TEST(DialInCluster, TheDeadlineNamesTheRanksThatNeverArrived) {
  int port = freePort();
  auto begin = std::chrono::steady_clock::now();
  auto started = startCluster(dialInOptions(port, 4, Ms(600)));
  zmq::context_t context(1);
  FakeWorker only(context, "tcp://127.0.0.1:" + std::to_string(port));
  only.hello(workerHello(1, 1, 4, kToken, "node-a", 3));
  ASSERT_EQ(started.wait_for(Ms(5000)), std::future_status::ready);
  try {
    started.get();
    FAIL() << "the cluster started";
  } catch (const WorkerError &error) {
    EXPECT_GE(std::chrono::steady_clock::now() - begin, Ms(600));
    EXPECT_EQ(error.rank(), 0);
    EXPECT_NE(std::string(error.what())
                  .find("the admission ended after 600 ms waiting for workers "
                        "to dial "
                        "in to tcp://127.0.0.1:" +
                        std::to_string(port) +
                        ": ranks 0, 2-3 of 4 never arrived (1 worker(s) "
                        "admitted: host node-a pid 3 (rank 1) from 127.0.0.1)"),
              std::string::npos)
        << error.what();
  }
  std::optional<wire::Envelope> told = only.receive();
  ASSERT_TRUE(told);
  EXPECT_EQ(told->body_case(), wire::Envelope::kError);
}

TEST(DialInCluster, AWorkerThatLeavesBeforeTheStartFreesItsRanks) {
  int port = freePort();
  auto started = startCluster(dialInOptions(port, 2));
  zmq::context_t context(1);
  std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  {
    FakeWorker gone(context, endpoint);
    gone.hello(workerHello(0, 1, 2, kToken, "old", 1));
    std::this_thread::sleep_for(Ms(200));
    gone.close();
  }
  std::this_thread::sleep_for(Ms(300));
  FakeWorker again(context, endpoint), other(context, endpoint);
  again.hello(workerHello(0, 1, 2, kToken, "new", 2));
  other.hello(workerHello(1, 1, 2, kToken, "other", 3));
  ASSERT_EQ(started.wait_for(Ms(5000)), std::future_status::ready);
  std::unique_ptr<Cluster> cluster = started.get();
  EXPECT_EQ(cluster->hostOf(0), "new");
}

TEST(DialInCluster, StrayConnectionsDoNotStopTheAdmission) {
  int port = freePort();
  auto started = startCluster(dialInOptions(port, 2));
  // A port scan, a health check, someone speaking another protocol.
  strayConnection(port, "");
  strayConnection(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  strayConnection(port, std::string("\xff\0\0\0\0\0\0\0\x01\x7f", 10));
  std::this_thread::sleep_for(Ms(200));
  zmq::context_t context(1);
  std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  FakeWorker first(context, endpoint), second(context, endpoint);
  first.hello(workerHello(0, 1, 2));
  second.hello(workerHello(1, 1, 2));
  ASSERT_EQ(started.wait_for(Ms(5000)), std::future_status::ready);
  EXPECT_EQ(started.get()->worldSize(), 2);
}

TEST(DialInCluster, OptionsAreChecked) {
  ClusterOptions options = dialInOptions(freePort(), 2);
  options.token.clear();
  EXPECT_THROW(Cluster{options}, RuntimeError);
  options = dialInOptions(freePort(), 2);
  options.workerAddresses = {"tcp://127.0.0.1:1"};
  EXPECT_THROW(Cluster{options}, RuntimeError);
}

} // namespace
} // namespace dtorch::rt::test
