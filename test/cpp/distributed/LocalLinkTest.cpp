// The embedded cluster's local links (StreamLink.h) from the outside: a
// process of the same host that connects to the controller's loopback
// socket and names itself like a local link ("link:0") cannot speak for
// that worker.
#include "DistributedTestSupport.h"

#include "dtorch/runtime/Cluster.h"
#include "dtorch/runtime/Transport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace dtorch::rt::test {
namespace {

namespace wire = ::dtorch::wire;

/// The TCP ports this process listens on at 127.0.0.1: the rows of
/// /proc/self/net/tcp (which lists the whole network namespace, so other
/// tests' processes too) whose socket is one of this process's descriptors.
std::vector<int> loopbackListeners() {
  std::set<std::string> mine;
  for (const auto &entry :
       std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    std::string target =
        std::filesystem::read_symlink(entry.path(), error).string();
    if (!error && target.rfind("socket:[", 0) == 0)
      mine.insert(target.substr(8, target.size() - 9));
  }
  std::ifstream table("/proc/self/net/tcp");
  std::string line;
  std::getline(table, line); // header
  std::vector<int> ports;
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid,
        timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >>
        retransmits >> uid >> timeout >> inode;
    if (state == "0A" && local.rfind("0100007F:", 0) == 0 && mine.count(inode))
      ports.push_back(std::stoi(local.substr(9), nullptr, 16));
  }
  return ports;
}

TEST(LocalLink, AConnectionNamedLikeALinkCannotSpeakForItsWorker) {
  Cluster cluster(embeddedClusterOptions(2, 2));
  std::vector<int> ports = loopbackListeners();
  ASSERT_FALSE(ports.empty());
  // What a worker reports when a run failed: were it taken as worker 0's,
  // the next synchronize would raise it.
  wire::Envelope error;
  error.set_protocol_version(wire::PROTOCOL_VERSION);
  error.mutable_error()->set_rank(0);
  error.mutable_error()->set_message("spoofed failure");
  error.mutable_error()->set_instruction(-1);
  std::string bytes = encodeEnvelope(error);
  zmq::context_t context(1);
  std::vector<zmq::socket_t> sockets;
  for (int port : ports)
    for (const char *name : {"link:0", "link:1"}) {
      zmq::socket_t &s =
          sockets.emplace_back(context, zmq::socket_type::dealer);
      s.set(zmq::sockopt::linger, 0);
      s.set(zmq::sockopt::routing_id, std::string(name));
      s.connect("tcp://127.0.0.1:" + std::to_string(port));
      s.send(zmq::buffer(bytes), zmq::send_flags::none);
    }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_NO_THROW(cluster.synchronize());
  // Nothing came back to the impostors either.
  for (zmq::socket_t &s : sockets) {
    zmq::message_t reply;
    EXPECT_FALSE(s.recv(reply, zmq::recv_flags::dontwait).has_value());
  }
  cluster.shutdown();
}

} // namespace
} // namespace dtorch::rt::test
