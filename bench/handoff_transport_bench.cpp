// Round trip of one small message between 2 processes of this host, through
// the transports a controller and a local worker could talk over, after
// idle gaps of several lengths. It measures what issue 10's hand-off
// analysis names as the cost left in a 1-rank GEMM call: every thread
// wake-up on the way, each of which, on a VM whose idle CPUs halt, costs
// the wake of a halted CPU.
//
// Transports (each in a freshly forked child per round, rounds interleave
// the transports so that they see the same host):
//   zmq_tcp      a DEALER/ROUTER pair over loopback TCP, as dtorch's link
//                (libzmq's I/O thread on each side sits between the
//                application thread and the socket: 6 wake-ups a round
//                trip)
//   tcp          a plain loopback TCP socket (TCP_NODELAY), blocking reads
//                in the application threads (2 wake-ups)
//   unix         a Unix-domain socketpair, blocking reads (2 wake-ups)
//   futex_shm    a shared mapping with a futex word per direction (2
//                wake-ups, no socket)
// All of them block (no spinning), as dtorch's threads do. The child answers
// each message with its bytes plus one, and the parent checks the answer.
//
//   handoff_transport_bench [--bytes 64] [--rounds 3] [--gaps-ms 0,1,30]
//                           [--transports zmq_tcp,tcp,unix,futex_shm]
//                           [--out DIR]
//
// Prints a markdown table (median and 90th percentile round trip per
// transport and gap, and each transport's median over zmq_tcp's) and, with
// --out, writes DIR/table.md and DIR/results.json.
#include <zmq.hpp>

#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <linux/futex.h>
#include <map>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sstream>
#include <string>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  size_t bytes = 64;
  int rounds = 3;
  std::vector<int> gapsMs = {0, 1, 30};
  std::vector<std::string> transports = {"zmq_tcp", "tcp", "unix", "futex_shm"};
  std::string out;
};

/// Round trips measured at one gap: fewer after long gaps (each costs the
/// gap), enough for a median and a 90th percentile.
int repsFor(int gapMs) {
  if (gapMs <= 0)
    return 2000;
  if (gapMs <= 2)
    return 300;
  return 60;
}

void sleepMs(int ms) {
  if (ms <= 0)
    return;
  timespec t{ms / 1000, static_cast<long>(ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0) {
  }
}

[[noreturn]] void fail(const std::string &what) {
  std::fprintf(stderr, "handoff_transport_bench: %s: %s\n", what.c_str(),
               std::strerror(errno));
  std::exit(2);
}

void writeAll(int fd, const char *data, size_t n) {
  while (n) {
    ssize_t k = write(fd, data, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      fail("write");
    data += k;
    n -= static_cast<size_t>(k);
  }
}

/// False at end of stream.
bool readAll(int fd, char *data, size_t n) {
  while (n) {
    ssize_t k = read(fd, data, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k == 0)
      return false;
    if (k < 0)
      fail("read");
    data += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

/// The answer to `data`: every byte plus one (so that an echo of the
/// request, or a stale buffer, fails the check).
void answer(char *data, size_t n) {
  for (size_t i = 0; i < n; ++i)
    data[i] = static_cast<char>(data[i] + 1);
}

/// Exits when `got` is not the answer to `sent`.
void checkAnswer(const std::string &sent, const char *got, size_t n) {
  bool ok = n == sent.size();
  for (size_t i = 0; ok && i < n; ++i)
    ok = got[i] == static_cast<char>(sent[i] + 1);
  if (!ok) {
    std::fprintf(stderr, "handoff_transport_bench: a wrong answer came back\n");
    std::exit(1);
  }
}

/// One transport's two ends: the parent's round trip and the child's answer
/// loop. The child answers every message until it gets an empty one (or its
/// stream ends).
struct Transport {
  std::function<void(const std::string &)> roundTrip; // parent
  std::function<void()> stop;                         // parent
};

// ---- stream sockets (tcp, unix): length-prefixed frames
// ----------------------

void echoStream(int fd) {
  std::string buffer;
  while (true) {
    uint32_t size = 0;
    if (!readAll(fd, reinterpret_cast<char *>(&size), sizeof(size)) ||
        size == 0)
      return;
    buffer.resize(size);
    if (!readAll(fd, buffer.data(), size))
      return;
    answer(buffer.data(), size);
    writeAll(fd, reinterpret_cast<const char *>(&size), sizeof(size));
    writeAll(fd, buffer.data(), size);
  }
}

Transport streamParent(int fd) {
  auto buffer = std::make_shared<std::string>();
  Transport t;
  t.roundTrip = [fd, buffer](const std::string &payload) {
    // One write for the frame, as a sender that encodes into one buffer.
    uint32_t size = static_cast<uint32_t>(payload.size());
    std::string frame(reinterpret_cast<const char *>(&size), sizeof(size));
    frame += payload;
    writeAll(fd, frame.data(), frame.size());
    uint32_t back = 0;
    if (!readAll(fd, reinterpret_cast<char *>(&back), sizeof(back)))
      fail("the answering child's stream ended");
    buffer->resize(back);
    if (!readAll(fd, buffer->data(), back))
      fail("the answering child's stream ended");
    checkAnswer(payload, buffer->data(), back);
  };
  t.stop = [fd] {
    uint32_t zero = 0;
    writeAll(fd, reinterpret_cast<const char *>(&zero), sizeof(zero));
    close(fd);
  };
  return t;
}

void noDelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
    fail("TCP_NODELAY");
}

/// A connected loopback TCP pair: {parent's end, child's end}.
std::pair<int, int> tcpPair() {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0)
    fail("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr *>(&addr), len) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr *>(&addr), &len) != 0)
    fail("listen");
  int client = socket(AF_INET, SOCK_STREAM, 0);
  if (client < 0 ||
      connect(client, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) != 0)
    fail("connect");
  int server = accept(listener, nullptr, nullptr);
  if (server < 0)
    fail("accept");
  close(listener);
  noDelay(client);
  noDelay(server);
  return {client, server};
}

// ---- futex over a shared mapping --------------------------------------------

struct SharedMailbox {
  std::atomic<uint32_t> request{0}; // sequence of the latest request
  std::atomic<uint32_t> reply{0};   // sequence of the latest reply
  uint32_t size = 0;                // 0: stop
  char data[1 << 16];
};

void futexWait(std::atomic<uint32_t> *word, uint32_t seen) {
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAIT, seen,
          nullptr, nullptr, 0);
}

void futexWake(std::atomic<uint32_t> *word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAKE, 1, nullptr,
          nullptr, 0);
}

/// Blocks until *word differs from `seen`; returns the new value.
uint32_t awaitChange(std::atomic<uint32_t> *word, uint32_t seen) {
  uint32_t now;
  while ((now = word->load(std::memory_order_acquire)) == seen)
    futexWait(word, seen);
  return now;
}

void echoMailbox(SharedMailbox *box) {
  uint32_t seen = 0;
  while (true) {
    seen = awaitChange(&box->request, seen);
    if (box->size == 0)
      return;
    answer(box->data, box->size); // in place
    box->reply.store(seen, std::memory_order_release);
    futexWake(&box->reply);
  }
}

Transport mailboxParent(SharedMailbox *box) {
  auto sequence = std::make_shared<uint32_t>(0);
  Transport t;
  t.roundTrip = [box, sequence](const std::string &payload) {
    std::memcpy(box->data, payload.data(), payload.size());
    box->size = static_cast<uint32_t>(payload.size());
    uint32_t mine = ++*sequence;
    box->request.store(mine, std::memory_order_release);
    futexWake(&box->request);
    uint32_t now;
    while ((now = box->reply.load(std::memory_order_acquire)) != mine)
      futexWait(&box->reply, now);
    checkAnswer(payload, box->data, box->size);
  };
  t.stop = [box, sequence] {
    box->size = 0;
    box->request.store(++*sequence, std::memory_order_release);
    futexWake(&box->request);
  };
  return t;
}

// ---- libzmq DEALER/ROUTER over loopback TCP
// ------------------------------------

void echoZmq(int portPipe) {
  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  writeAll(portPipe, endpoint.data(), endpoint.size());
  close(portPipe);
  while (true) {
    zmq::message_t id, payload;
    if (!router.recv(id) || !router.recv(payload))
      return;
    if (payload.size() == 0)
      return;
    answer(static_cast<char *>(payload.data()), payload.size());
    router.send(id, zmq::send_flags::sndmore);
    router.send(payload, zmq::send_flags::none);
  }
}

struct ZmqParent {
  zmq::context_t context{1};
  zmq::socket_t dealer{context, zmq::socket_type::dealer};
};

Transport zmqParent(const std::string &endpoint) {
  auto z = std::make_shared<ZmqParent>();
  z->dealer.set(zmq::sockopt::linger, 0);
  z->dealer.connect(endpoint);
  Transport t;
  t.roundTrip = [z](const std::string &payload) {
    z->dealer.send(zmq::buffer(payload), zmq::send_flags::none);
    zmq::message_t back;
    if (!z->dealer.recv(back))
      fail("zmq recv");
    checkAnswer(payload, static_cast<const char *>(back.data()), back.size());
  };
  t.stop = [z] { z->dealer.send(zmq::message_t(), zmq::send_flags::none); };
  return t;
}

// ---- one round of one transport
// ----------------------------------------------

/// Forks the echoing child, returns the parent's end and the child's pid.
std::pair<Transport, pid_t> start(const std::string &name) {
  if (name == "tcp") {
    auto [mine, theirs] = tcpPair();
    pid_t pid = fork();
    if (pid == 0) {
      close(mine);
      echoStream(theirs);
      _exit(0);
    }
    close(theirs);
    return {streamParent(mine), pid};
  }
  if (name == "unix") {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0)
      fail("socketpair");
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      echoStream(fds[1]);
      _exit(0);
    }
    close(fds[1]);
    return {streamParent(fds[0]), pid};
  }
  if (name == "futex_shm") {
    void *memory = mmap(nullptr, sizeof(SharedMailbox), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED)
      fail("mmap");
    auto *box = new (memory) SharedMailbox();
    pid_t pid = fork();
    if (pid == 0) {
      echoMailbox(box);
      _exit(0);
    }
    return {mailboxParent(box), pid};
  }
  if (name == "zmq_tcp") {
    int fds[2];
    if (pipe(fds) != 0)
      fail("pipe");
    pid_t pid = fork(); // before the parent's context: no threads forked
    if (pid == 0) {
      close(fds[0]);
      echoZmq(fds[1]);
      _exit(0);
    }
    close(fds[1]);
    std::string endpoint;
    char c;
    while (read(fds[0], &c, 1) == 1)
      endpoint.push_back(c);
    close(fds[0]);
    if (endpoint.empty())
      fail("the zmq child gave no endpoint");
    return {zmqParent(endpoint), pid};
  }
  std::fprintf(stderr, "handoff_transport_bench: unknown transport '%s'\n",
               name.c_str());
  std::exit(2);
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::vector<int> parseInts(const std::string &text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    out.push_back(std::stoi(item));
  return out;
}

std::vector<std::string> parseNames(const std::string &text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    out.push_back(item);
  return out;
}

Config parse(int argc, char **argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "handoff_transport_bench: %s needs a value\n",
                     arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--bytes")
      c.bytes = static_cast<size_t>(std::stoul(value()));
    else if (arg == "--rounds")
      c.rounds = std::stoi(value());
    else if (arg == "--gaps-ms")
      c.gapsMs = parseInts(value());
    else if (arg == "--transports")
      c.transports = parseNames(value());
    else if (arg == "--out")
      c.out = value();
    else {
      std::fprintf(stderr,
                   "usage: handoff_transport_bench [--bytes N] [--rounds R] "
                   "[--gaps-ms 0,1,30] [--transports zmq_tcp,tcp,unix,"
                   "futex_shm] [--out DIR]\n");
      std::exit(arg == "--help" ? 0 : 2);
    }
  }
  for (const std::string &name : c.transports)
    if (name != "zmq_tcp" && name != "tcp" && name != "unix" &&
        name != "futex_shm") {
      std::fprintf(stderr,
                   "handoff_transport_bench: unknown transport '%s' (known: "
                   "zmq_tcp, tcp, unix, futex_shm)\n",
                   name.c_str());
      std::exit(2);
    }
  for (int gap : c.gapsMs)
    if (gap < 0) {
      std::fprintf(stderr, "handoff_transport_bench: a gap is negative\n");
      std::exit(2);
    }
  if (c.bytes == 0 || c.bytes > sizeof(SharedMailbox::data) || c.rounds < 1 ||
      c.gapsMs.empty() || c.transports.empty()) {
    std::fprintf(stderr,
                 "handoff_transport_bench: --bytes must be 1..%zu, "
                 "--rounds at least 1, and the lists non-empty\n",
                 sizeof(SharedMailbox::data));
    std::exit(2);
  }
  return c;
}

} // namespace

int main(int argc, char **argv) {
  Config config;
  try {
    config = parse(argc, argv);
  } catch (const std::exception &) { // std::stoi and friends
    std::fprintf(stderr, "handoff_transport_bench: a number is malformed\n");
    return 2;
  }
  std::string payload(config.bytes, 'x');
  // times[transport][gap]: every round trip of every round, in seconds.
  std::map<std::string, std::map<int, std::vector<double>>> times;
  for (int round = 0; round < config.rounds; ++round)
    for (const std::string &name : config.transports) {
      auto [transport, pid] = start(name);
      for (int i = 0; i < 20; ++i) // connection set up, pages touched
        transport.roundTrip(payload);
      for (int gap : config.gapsMs)
        for (int i = 0; i < repsFor(gap); ++i) {
          sleepMs(gap);
          auto t0 = Clock::now();
          transport.roundTrip(payload);
          times[name][gap].push_back(
              std::chrono::duration<double>(Clock::now() - t0).count());
        }
      transport.stop();
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "handoff_transport_bench: the %s child failed\n",
                     name.c_str());
        return 1;
      }
    }

  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  std::ostringstream table, json;
  table << "# Round trip of a " << config.bytes
        << "-byte message between 2 processes (" << cpus << " CPUs)\n\n"
        << "Each cell: median (90th percentile) in microseconds over "
        << config.rounds
        << " interleaved rounds; each round trip follows an idle gap of the "
           "column's length. Ratio: the transport's median over zmq_tcp's.\n\n"
        << "| transport |";
  for (int gap : config.gapsMs)
    table << " after " << gap << " ms idle | ratio |";
  table << "\n|---|";
  for (size_t i = 0; i < config.gapsMs.size(); ++i)
    table << "---|---|";
  table << "\n";
  json << "{\"bytes\": " << config.bytes << ", \"rounds\": " << config.rounds
       << ", \"cpus\": " << cpus << ", \"transports\": {";
  bool firstTransport = true;
  for (const std::string &name : config.transports) {
    table << "| " << name << " |";
    json << (firstTransport ? "" : ", ") << "\"" << name << "\": {";
    firstTransport = false;
    bool firstGap = true;
    for (int gap : config.gapsMs) {
      const std::vector<double> &v = times[name][gap];
      double median = quantile(v, 0.5) * 1e6, p90 = quantile(v, 0.9) * 1e6;
      char cell[96];
      std::snprintf(cell, sizeof(cell), " %.1f (%.1f) |", median, p90);
      table << cell;
      if (times.count("zmq_tcp")) {
        double base = quantile(times["zmq_tcp"][gap], 0.5) * 1e6;
        std::snprintf(cell, sizeof(cell), " %.2f |", median / base);
        table << cell;
      } else {
        table << " - |";
      }
      json << (firstGap ? "" : ", ") << "\"" << gap
           << "\": {\"median_us\": " << median << ", \"p90_us\": " << p90
           << ", \"count\": " << v.size() << "}";
      firstGap = false;
    }
    table << "\n";
    json << "}";
  }
  json << "}}\n";
  std::fputs(table.str().c_str(), stdout);
  if (!config.out.empty()) {
    std::filesystem::create_directories(config.out);
    std::ofstream(config.out + "/table.md") << table.str();
    std::ofstream(config.out + "/results.json") << json.str();
    std::printf("\nwrote %s/table.md and results.json\n", config.out.c_str());
  }
  return 0;
}
