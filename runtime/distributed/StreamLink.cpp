#include "dtorch/runtime/StreamLink.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

namespace dtorch::rt {

namespace {

void encodeLength(uint64_t length, unsigned char out[8]) {
  for (int k = 0; k < 8; ++k)
    out[k] = static_cast<unsigned char>((length >> (8 * k)) & 0xff);
}

uint64_t decodeLength(const unsigned char in[8]) {
  uint64_t length = 0;
  for (int k = 0; k < 8; ++k)
    length |= static_cast<uint64_t>(in[k]) << (8 * k);
  return length;
}

} // namespace

StreamLink::StreamLink(int fd, uint64_t maxMessageBytes,
                       std::function<void()> wake)
    : fd_(fd), maxMessageBytes_(maxMessageBytes), wake_(std::move(wake)) {
  int flags = fcntl(fd_, F_GETFL, 0);
  if (flags >= 0)
    fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
}

StreamLink::~StreamLink() {
  if (fd_ >= 0)
    close(fd_);
}

bool StreamLink::send(std::string_view payload) {
  unsigned char header[8];
  encodeLength(payload.size(), header);
  bool startedWaiting = false;
  {
    std::lock_guard<std::mutex> lock(writeMutex_);
    if (closed_)
      return false;
    size_t written = 0;
    size_t total = sizeof(header) + payload.size();
    if (waiting_.empty()) {
      // Straight to the socket from this thread: the header and the
      // payload in one call.
      iovec parts[2] = {{header, sizeof(header)},
                        {const_cast<char *>(payload.data()), payload.size()}};
      while (written < total) {
        size_t skip = written;
        iovec rest[2];
        int count = 0;
        for (const iovec &part : parts) {
          if (skip >= part.iov_len) {
            skip -= part.iov_len;
            continue;
          }
          rest[count++] = {static_cast<char *>(part.iov_base) + skip,
                           part.iov_len - skip};
          skip = 0;
        }
        msghdr message{};
        message.msg_iov = rest;
        message.msg_iovlen = static_cast<size_t>(count);
        ssize_t n = sendmsg(fd_, &message, MSG_NOSIGNAL);
        if (n > 0) {
          written += static_cast<size_t>(n);
          continue;
        }
        if (n < 0 && errno == EINTR)
          continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
          break;
        closeWith(std::string("send failed: ") + std::strerror(errno));
        return false;
      }
      if (written == total)
        return true;
    }
    // The rest waits, in order, for the I/O thread.
    std::string rest;
    rest.reserve(total - written);
    if (written < sizeof(header))
      rest.append(reinterpret_cast<const char *>(header) + written,
                  sizeof(header) - written);
    size_t fromPayload =
        written > sizeof(header) ? written - sizeof(header) : 0;
    rest.append(payload.data() + fromPayload, payload.size() - fromPayload);
    startedWaiting = waiting_.empty();
    waitingBytes_ += rest.size();
    waiting_.push_back(std::move(rest));
  }
  if (startedWaiting && wake_)
    wake_();
  return true;
}

bool StreamLink::wantsWrite() {
  std::lock_guard<std::mutex> lock(writeMutex_);
  return !closed_ && !waiting_.empty();
}

bool StreamLink::flush() {
  std::lock_guard<std::mutex> lock(writeMutex_);
  if (!closed_)
    writeWaiting();
  return !closed_;
}

void StreamLink::writeWaiting() {
  while (!waiting_.empty()) {
    const std::string &front = waiting_.front();
    ssize_t n = ::send(fd_, front.data() + waitingOffset_,
                       front.size() - waitingOffset_, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    if (n <= 0) {
      closeWith(std::string("send failed: ") + std::strerror(errno));
      return;
    }
    waitingOffset_ += static_cast<size_t>(n);
    waitingBytes_ -= static_cast<size_t>(n);
    if (waitingOffset_ == front.size()) {
      waiting_.pop_front();
      waitingOffset_ = 0;
    }
  }
}

bool StreamLink::receive(std::vector<std::string> &messages) {
  while (true) {
    ssize_t n;
    if (!inMessage_) {
      n = read(fd_, header_ + headerBytes_, sizeof(header_) - headerBytes_);
    } else {
      n = read(fd_, message_.data() + messageBytes_,
               message_.size() - messageBytes_);
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return true;
    if (n <= 0) {
      std::lock_guard<std::mutex> lock(writeMutex_);
      closeWith(n == 0
                    ? "end of stream"
                    : std::string("receive failed: ") + std::strerror(errno));
      return false;
    }
    if (!inMessage_) {
      headerBytes_ += static_cast<size_t>(n);
      if (headerBytes_ < sizeof(header_))
        continue;
      uint64_t length = decodeLength(header_);
      headerBytes_ = 0;
      if (length > maxMessageBytes_) {
        std::lock_guard<std::mutex> lock(writeMutex_);
        closeWith("a message of " + std::to_string(length) +
                  " bytes exceeds the limit of " +
                  std::to_string(maxMessageBytes_) + " bytes");
        return false;
      }
      message_.assign(static_cast<size_t>(length), '\0');
      messageBytes_ = 0;
      inMessage_ = true;
    } else {
      messageBytes_ += static_cast<size_t>(n);
    }
    if (inMessage_ && messageBytes_ == message_.size()) {
      messages.push_back(std::move(message_));
      message_.clear();
      inMessage_ = false;
    }
  }
}

bool StreamLink::closed() {
  std::lock_guard<std::mutex> lock(writeMutex_);
  return closed_;
}

std::string StreamLink::closeReason() {
  std::lock_guard<std::mutex> lock(writeMutex_);
  return closeReason_;
}

size_t StreamLink::waitingBytes() {
  std::lock_guard<std::mutex> lock(writeMutex_);
  return waitingBytes_;
}

void StreamLink::closeWith(const std::string &reason) {
  if (closed_)
    return;
  closed_ = true;
  closeReason_ = reason;
  waiting_.clear();
  waitingOffset_ = 0;
  waitingBytes_ = 0;
  // The peer sees end of stream; the descriptor stays open (poll on it
  // keeps reporting) until the link is destroyed.
  shutdown(fd_, SHUT_RDWR);
}

} // namespace dtorch::rt
