// StreamLink (the embedded cluster's link to a worker process) over a
// socketpair: framing, sends that the socket cannot take at once, order
// across senders, end of stream and oversized messages.
#include "dtorch/runtime/StreamLink.h"

#include <gtest/gtest.h>

#include <atomic>
#include <poll.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <vector>

using dtorch::rt::StreamLink;

namespace {

struct Pair {
  std::unique_ptr<StreamLink> a, b;
  std::atomic<int> wakesA{0};
  explicit Pair(uint64_t maxBytes = uint64_t(1) << 30) {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    a = std::make_unique<StreamLink>(fds[0], maxBytes, [this] { ++wakesA; });
    b = std::make_unique<StreamLink>(fds[1], maxBytes, nullptr);
  }
};

/// Receives on `link` until `count` messages came (flushing `writer` as
/// the I/O thread would), or the link closed.
std::vector<std::string> receiveAll(StreamLink &link, size_t count,
                                    StreamLink *writer = nullptr) {
  std::vector<std::string> got;
  while (got.size() < count) {
    if (writer && writer->wantsWrite())
      writer->flush();
    pollfd item{link.fd(), POLLIN, 0};
    poll(&item, 1, 10);
    if (!link.receive(got))
      break;
  }
  return got;
}

std::string pattern(size_t bytes, int seed) {
  std::string s(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i)
    s[i] = static_cast<char>((i * 131 + static_cast<size_t>(seed)) & 0xff);
  return s;
}

} // namespace

TEST(StreamLink, MessagesArriveWholeAndInOrder) {
  Pair p;
  std::vector<std::string> sent = {"", "x", pattern(1000, 1),
                                   pattern(70000, 2)};
  for (const std::string &m : sent)
    ASSERT_TRUE(p.a->send(m));
  EXPECT_EQ(receiveAll(*p.b, sent.size(), p.a.get()), sent);
  // And back the other way.
  ASSERT_TRUE(p.b->send("reply"));
  EXPECT_EQ(receiveAll(*p.a, 1), std::vector<std::string>{"reply"});
}

TEST(StreamLink, WhatTheSocketCannotTakeWaitsAndLeavesOnFlush) {
  Pair p;
  // Far more than a socket buffer: the send returns at once, the rest
  // waits, and the owner was woken once to poll for POLLOUT.
  std::string big = pattern(size_t(8) << 20, 3);
  ASSERT_TRUE(p.a->send(big));
  ASSERT_TRUE(p.a->send("after"));
  EXPECT_TRUE(p.a->wantsWrite());
  EXPECT_GT(p.a->waitingBytes(), size_t(1) << 20);
  EXPECT_EQ(p.wakesA.load(), 1);
  std::vector<std::string> got = receiveAll(*p.b, 2, p.a.get());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0] == big);
  EXPECT_EQ(got[1], "after");
  EXPECT_FALSE(p.a->wantsWrite());
  EXPECT_EQ(p.a->waitingBytes(), 0u);
}

TEST(StreamLink, EachSendersMessagesKeepTheirOrder) {
  Pair p;
  constexpr int kThreads = 4, kEach = 300;
  std::vector<std::thread> senders;
  for (int t = 0; t < kThreads; ++t)
    senders.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i)
        // Some large enough to wait behind the socket.
        p.a->send(std::to_string(t) + ":" + std::to_string(i) + ":" +
                  std::string(i % 50 == 0 ? 100000 : 10, 'y'));
    });
  std::vector<std::string> got;
  std::thread reader([&] { got = receiveAll(*p.b, kThreads * kEach); });
  // This thread flushes, as the owner's I/O thread would.
  std::atomic<bool> sendersDone{false};
  std::thread flusher([&] {
    while (!sendersDone.load() || p.a->wantsWrite()) {
      p.a->flush();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  for (auto &s : senders)
    s.join();
  sendersDone = true;
  flusher.join();
  reader.join();
  ASSERT_EQ(got.size(), size_t(kThreads * kEach));
  std::vector<int> next(kThreads, 0);
  for (const std::string &m : got) {
    int t = std::stoi(m.substr(0, m.find(':')));
    int i = std::stoi(m.substr(m.find(':') + 1));
    EXPECT_EQ(i, next[t]) << "sender " << t;
    next[t] = i + 1;
  }
}

TEST(StreamLink, EndOfStreamClosesTheLink) {
  Pair p;
  ASSERT_TRUE(p.a->send("last words"));
  p.a.reset(); // closes its end
  std::vector<std::string> got;
  while (true) {
    pollfd item{p.b->fd(), POLLIN, 0};
    poll(&item, 1, 100);
    if (!p.b->receive(got))
      break;
  }
  EXPECT_EQ(got, std::vector<std::string>{"last words"});
  EXPECT_TRUE(p.b->closed());
  EXPECT_EQ(p.b->closeReason(), "end of stream");
  EXPECT_FALSE(p.b->send("anyone?"));
}

TEST(StreamLink, AnOversizedMessageClosesTheLinkNamingTheSizes) {
  Pair p(/*maxBytes=*/1000);
  ASSERT_TRUE(p.a->send(std::string(999, 'a')));
  ASSERT_TRUE(p.a->send(std::string(1001, 'b')));
  std::vector<std::string> got = receiveAll(*p.b, 2);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(p.b->closed());
  EXPECT_EQ(p.b->closeReason(),
            "a message of 1001 bytes exceeds the limit of 1000 bytes");
  // The sender sees the closed peer when it next sends or flushes.
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  bool failed = false;
  for (int i = 0; i < 100 && !failed; ++i)
    failed = !p.a->send(std::string(100000, 'c')) || !p.a->flush();
  EXPECT_TRUE(failed);
}
