#include "HostSharedMemorySegment.h"

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <linux/futex.h>
#include <random>
#include <sched.h>
#include <sstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>

namespace dtorch::rt::hostshm {

namespace {

using Clock = std::chrono::steady_clock;

size_t roundUp(size_t value, size_t to) { return (value + to - 1) / to * to; }

void futexWait(std::atomic<uint32_t> *word, uint32_t expected,
               std::chrono::microseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1000000) * 1000);
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAIT, expected,
          &ts, nullptr, 0);
}

void futexWake(std::atomic<uint32_t> *word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAKE, INT_MAX,
          nullptr, nullptr, 0);
}

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

std::string sanitized(const std::string &key) {
  std::string name = "dtorch-hostshm:";
  for (char c : key)
    name += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' ||
             c == '.' || c == ',')
                ? c
                : '_';
  return name.substr(0, 240);
}

} // namespace

uint64_t processStartTime(int32_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)),
                   std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close == std::string::npos)
    return 0;
  std::istringstream fields(text.substr(close + 1));
  std::string field;
  // Fields after the command: state (3) ... starttime (22).
  for (int i = 3; i <= 22 && (fields >> field); ++i)
    if (i == 22)
      return std::strtoull(field.c_str(), nullptr, 10);
  return 0;
}

bool processAlive(int32_t pid, uint64_t startTime) {
  if (pid <= 0)
    return true; // not attached yet: the deadline decides
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat)
    return false;
  std::string text((std::istreambuf_iterator<char>(stat)),
                   std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size())
    return false;
  char state = text[close + 2];
  if (state == 'Z' || state == 'X' || state == 'x')
    return false;
  return startTime == 0 || processStartTime(pid) == startTime;
}

size_t groupSegmentBytes(size_t members, size_t chunkBytes) {
  size_t controls = roundUp(kPage + members * sizeof(MemberControl), kPage);
  return controls + members * kSlots * (kPage + 2 * chunkBytes);
}

void Segment::layout(SegmentKind kind, size_t members, size_t chunkBytes) {
  members_ = members;
  chunkBytes_ = chunkBytes;
  controlsOffset_ = kPage;
  dataOffset_ = roundUp(kPage + members * sizeof(MemberControl), kPage);
  slotStride_ = kPage + 2 * chunkBytes;
  bytes_ = kind == SegmentKind::Group
               ? dataOffset_ + members * kSlots * slotStride_
               : dataOffset_ + chunkBytes;
}

void Segment::map(int fd, size_t bytes) {
  void *address =
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED)
    throw RuntimeError(std::string("shared memory: mmap of ") +
                       std::to_string(bytes) +
                       " bytes failed: " + std::strerror(errno));
  base_ = static_cast<char *>(address);
  header_ = reinterpret_cast<SegmentHeader *>(base_);
}

void Segment::registerSelf(size_t index) {
  MemberControl &mine = control(index);
  mine.startTime = processStartTime(getpid());
  mine.pid.store(getpid(), std::memory_order_release);
  publish(mine.attached, 1);
}

std::unique_ptr<Segment> Segment::create(KeyValueStore &store,
                                         const std::string &key,
                                         SegmentKind kind,
                                         const std::vector<int64_t> &ranks,
                                         size_t chunkBytes, size_t index) {
  if (ranks.size() > kMaxMembers)
    throw RuntimeError("shared memory: a group of " +
                       std::to_string(ranks.size()) + " ranks exceeds " +
                       std::to_string(kMaxMembers));
  std::unique_ptr<Segment> segment(new Segment());
  segment->layout(kind, ranks.size(), chunkBytes);
  int fd = static_cast<int>(
      syscall(SYS_memfd_create, sanitized(key).c_str(), MFD_CLOEXEC));
  if (fd < 0)
    throw RuntimeError(std::string("shared memory: memfd_create failed: ") +
                       std::strerror(errno));
  segment->fd_ = fd;
  if (ftruncate(fd, static_cast<off_t>(segment->bytes_)) != 0)
    throw RuntimeError(std::string("shared memory: ftruncate failed: ") +
                       std::strerror(errno));
  segment->map(fd, segment->bytes_);
  // A fresh memfd is zero-filled: every counter starts at 0.
  SegmentHeader &h = *segment->header_;
  std::random_device random;
  h.nonce = (static_cast<uint64_t>(random()) << 32) ^ random() ^
            static_cast<uint64_t>(getpid());
  h.kind = static_cast<uint32_t>(kind);
  h.members = static_cast<uint32_t>(ranks.size());
  h.chunkBytes = chunkBytes;
  h.totalBytes = segment->bytes_;
  for (size_t j = 0; j < ranks.size(); ++j)
    h.ranks[j] = ranks[j];
  h.magic = kMagic;
  segment->registerSelf(index);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  store.set(key, std::to_string(getpid()) + " " + std::to_string(fd) + " " +
                     std::to_string(h.nonce) + " " +
                     std::to_string(segment->bytes_));
  return segment;
}

std::unique_ptr<Segment>
Segment::attach(KeyValueStore &store, const std::string &key, SegmentKind kind,
                const std::vector<int64_t> &ranks, size_t chunkBytes,
                size_t index, std::chrono::milliseconds deadline) {
  std::string value = store.get(key, deadline);
  long long pid = 0, fd = 0;
  unsigned long long nonce = 0, bytes = 0;
  if (std::sscanf(value.c_str(), "%lld %lld %llu %llu", &pid, &fd, &nonce,
                  &bytes) != 4)
    throw RuntimeError("shared memory: malformed segment record '" + value +
                       "' for " + key);
  std::unique_ptr<Segment> segment(new Segment());
  segment->layout(kind, ranks.size(), chunkBytes);
  if (bytes != segment->bytes_)
    throw RuntimeError("shared memory: segment " + key + " has " +
                       std::to_string(bytes) + " bytes, expected " +
                       std::to_string(segment->bytes_) +
                       " (members disagree on the chunk size)");
  std::string path =
      "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  int opened = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (opened < 0)
    throw RuntimeError("shared memory: cannot open " + path + " (segment " +
                       key + " of process " + std::to_string(pid) +
                       "): " + std::strerror(errno));
  struct stat info{};
  if (fstat(opened, &info) != 0 ||
      static_cast<unsigned long long>(info.st_size) != bytes) {
    close(opened);
    throw RuntimeError("shared memory: " + path + " is not segment " + key);
  }
  segment->map(opened, segment->bytes_);
  close(opened); // the mapping keeps the memory
  SegmentHeader &h = *segment->header_;
  bool same = h.magic == kMagic && h.nonce == nonce &&
              h.kind == static_cast<uint32_t>(kind) &&
              h.members == ranks.size() && h.chunkBytes == chunkBytes;
  for (size_t j = 0; same && j < ranks.size(); ++j)
    same = h.ranks[j] == ranks[j];
  if (!same)
    throw RuntimeError("shared memory: " + path +
                       " does not hold the segment of " + key);
  segment->registerSelf(index);
  return segment;
}

Segment::~Segment() {
  if (base_)
    munmap(base_, bytes_);
  if (fd_ >= 0)
    close(fd_);
}

MemberControl &Segment::control(size_t member) {
  return reinterpret_cast<MemberControl *>(base_ + controlsOffset_)[member];
}

RoundHeader &Segment::roundHeader(size_t member, size_t slot) {
  return *reinterpret_cast<RoundHeader *>(
      base_ + dataOffset_ + (member * kSlots + slot) * slotStride_);
}

char *Segment::input(size_t member, size_t slot) {
  return base_ + dataOffset_ + (member * kSlots + slot) * slotStride_ + kPage;
}

char *Segment::reduced(size_t member, size_t slot) {
  return input(member, slot) + chunkBytes_;
}

char *Segment::ring() { return base_ + dataOffset_; }

void Segment::publish(std::atomic<uint32_t> &counter, uint32_t value) {
  counter.store(value, std::memory_order_seq_cst);
  if (header_->sleepers.load(std::memory_order_seq_cst) != 0)
    futexWake(&counter);
}

void Segment::advance(std::atomic<uint32_t> &counter) {
  counter.fetch_add(1, std::memory_order_seq_cst);
  if (header_->sleepers.load(std::memory_order_seq_cst) != 0)
    futexWake(&counter);
}

void Segment::wakeAll() {
  futexWake(&header_->completed);
  for (size_t j = 0; j < members_; ++j) {
    MemberControl &c = control(j);
    futexWake(&c.attached);
    futexWake(&c.posted);
    futexWake(&c.reduced);
    futexWake(&c.done);
  }
}

void Segment::abort(const std::string &reason) {
  uint32_t expected = 0;
  if (header_->aborted.compare_exchange_strong(expected, 1)) {
    std::snprintf(header_->abortReason, sizeof(header_->abortReason), "%s",
                  reason.c_str());
    header_->aborted.store(2, std::memory_order_seq_cst);
  }
  wakeAll();
}

void Segment::waitFor(
    std::atomic<uint32_t> &counter, const std::function<bool()> &done,
    std::chrono::milliseconds deadline,
    const std::function<std::string(const std::string &)> &describe,
    const std::function<std::string()> &missing) {
  if (done())
    return;
  // Spinning only pays when the peer runs on another core right now; on a
  // busy host it steals the peer's time, so it is short.
  constexpr int kSpins = 64, kYields = 0;
  auto abortedWhy = [&]() -> std::string {
    uint32_t state = header_->aborted.load(std::memory_order_acquire);
    if (state == 0)
      return "";
    if (state == 2)
      return std::string("aborted: ") + header_->abortReason;
    return "aborted by another member";
  };
  for (int i = 0; i < kSpins + kYields; ++i) {
    if (done())
      return;
    if (i < kSpins)
      cpuRelax();
    else
      sched_yield();
  }
  auto start = Clock::now();
  auto lastLiveness = start;
  while (true) {
    uint32_t observed = counter.load(std::memory_order_seq_cst);
    header_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    bool ready = done();
    std::string aborted = abortedWhy();
    auto now = Clock::now();
    if (!ready && aborted.empty() && now - start < deadline) {
      auto left = std::chrono::duration_cast<std::chrono::microseconds>(
          start + deadline - now);
      futexWait(&counter, observed,
                std::min<std::chrono::microseconds>(
                    left, std::chrono::milliseconds(10)));
    }
    header_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (ready || done())
      return;
    if (aborted.empty())
      aborted = abortedWhy();
    if (!aborted.empty())
      throw RuntimeError(describe(aborted));
    now = Clock::now();
    if (now - lastLiveness >= std::chrono::milliseconds(20) ||
        now - start >= deadline) {
      lastLiveness = now;
      if (health_ && health_->anyDead()) {
        std::string lost = health_->deadAmong(
            std::vector<int64_t>(header_->ranks, header_->ranks + members_));
        if (!lost.empty())
          throw RuntimeError(describe("gave up waiting: peer " + lost));
      }
      for (size_t j = 0; j < members_; ++j) {
        MemberControl &peer = control(j);
        int32_t pid = peer.pid.load(std::memory_order_acquire);
        if (!processAlive(pid, peer.startTime))
          throw RuntimeError(
              describe("rank " + std::to_string(header_->ranks[j]) +
                       " (process " + std::to_string(pid) + ") died"));
      }
    }
    if (now - start >= deadline)
      throw RuntimeError(describe("timed out after " +
                                  std::to_string(deadline.count()) +
                                  " ms waiting for rank(s) " + missing()));
  }
}

} // namespace dtorch::rt::hostshm
