#include "HostSharedMemoryPeerAccess.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <thread>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace dtorch::rt::hostshm {

namespace {

using Clock = std::chrono::steady_clock;

// Moves `bytes` with process_vm_readv (write = false) or process_vm_writev,
// looping over partial transfers.
void transfer(int32_t pid, uint64_t remote, char *local, size_t bytes,
              bool write) {
  while (bytes > 0) {
    iovec mine{local, bytes};
    iovec theirs{reinterpret_cast<void *>(remote), bytes};
    ssize_t moved = write ? process_vm_writev(pid, &mine, 1, &theirs, 1, 0)
                          : process_vm_readv(pid, &mine, 1, &theirs, 1, 0);
    if (moved < 0 && errno == EINTR)
      continue;
    if (moved <= 0)
      throw RuntimeError(std::string("shared memory: ") +
                         (write ? "process_vm_writev to"
                                : "process_vm_readv "
                                  "from") +
                         " process " + std::to_string(pid) + " failed: " +
                         (moved < 0 ? std::strerror(errno) : "no progress"));
    local += moved;
    remote += static_cast<uint64_t>(moved);
    bytes -= static_cast<size_t>(moved);
  }
}

// Two members, sum or average of float32 or float64, both outputs in reach:
// one pass writes both outputs (the same bits as reducePieces: p0 + p1, then
// the division by 2 for the average).
#if defined(__SSE2__)
// The same with non-temporal stores (outputs 16-byte aligned): no output
// line is read before it is written. The caller fences.
inline __m128 addPair(__m128 a, __m128 b) { return _mm_add_ps(a, b); }
inline __m128d addPair(__m128d a, __m128d b) { return _mm_add_pd(a, b); }
inline __m128 halve(__m128 v) { return _mm_div_ps(v, _mm_set1_ps(2.0f)); }
inline __m128d halve(__m128d v) { return _mm_div_pd(v, _mm_set1_pd(2.0)); }
inline __m128 load(const float *p) { return _mm_loadu_ps(p); }
inline __m128d load(const double *p) { return _mm_loadu_pd(p); }
inline void stream(float *p, __m128 v) { _mm_stream_ps(p, v); }
inline void stream(double *p, __m128d v) { _mm_stream_pd(p, v); }

template <class T>
uint64_t streamSumTwo(const T *p0, const T *p1, T *mine, T *theirs,
                      uint64_t count, bool average) {
  constexpr uint64_t lanes = 16 / sizeof(T);
  if ((reinterpret_cast<uintptr_t>(mine) |
       reinterpret_cast<uintptr_t>(theirs)) %
      16)
    return 0;
  uint64_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    auto v = addPair(load(p0 + i), load(p1 + i));
    if (average)
      v = halve(v);
    stream(mine + i, v);
    stream(theirs + i, v);
  }
  return i;
}
#endif

template <class T>
void sumTwoIntoBoth(const T *p0, const T *p1, T *mine, T *theirs,
                    uint64_t count, bool average, bool streaming) {
#if defined(__SSE2__)
  if (streaming) {
    uint64_t done = streamSumTwo(p0, p1, mine, theirs, count, average);
    p0 += done, p1 += done, mine += done, theirs += done;
    count -= done;
  }
#endif
  if (average) {
    for (uint64_t i = 0; i < count; ++i) {
      T v = (p0[i] + p1[i]) / T(2);
      mine[i] = v;
      theirs[i] = v;
    }
    return;
  }
  for (uint64_t i = 0; i < count; ++i) {
    T v = p0[i] + p1[i];
    mine[i] = v;
    theirs[i] = v;
  }
}

// Runs write(member j's output as mapped here, or null) announced in this
// member's control block, once member j's output accepts this call's
// writes; returns what write returns.
template <class Write>
bool withWriteTo(const PeerAllReduce &call, size_t j, Write write) {
  Segment &seg = *call.segment;
  MemberControl &mine = seg.control(call.me), &theirs = seg.control(j);
  mine.writingTo.store(static_cast<uint32_t>(j + 1), std::memory_order_seq_cst);
  if (theirs.writable.load(std::memory_order_seq_cst) != call.token) {
    mine.writingTo.store(0, std::memory_order_seq_cst);
    throw RuntimeError("rank " + std::to_string(seg.header().ranks[j]) +
                       " left the call before its output was written");
  }
  bool done = false;
  try {
    done = write(call.outputViews[j]);
  } catch (...) {
    mine.writingTo.store(0, std::memory_order_seq_cst);
    throw;
  }
  mine.writingTo.store(0, std::memory_order_seq_cst);
  return done;
}

// True when the chunk was done by sumTwoIntoBoth.
bool reduceTwoIntoBoth(const PeerAllReduce &call, const void *p0,
                       const void *p1, char *mine, char *theirs,
                       uint64_t count) {
  bool average = call.op == ReduceOp::Avg;
  if (call.op != ReduceOp::Sum && !average)
    return false;
  if (call.dtype == ::dtorch::wire::F32)
    sumTwoIntoBoth(
        static_cast<const float *>(p0), static_cast<const float *>(p1),
        reinterpret_cast<float *>(mine), reinterpret_cast<float *>(theirs),
        count, average, call.streaming);
  else if (call.dtype == ::dtorch::wire::F64)
    sumTwoIntoBoth(
        static_cast<const double *>(p0), static_cast<const double *>(p1),
        reinterpret_cast<double *>(mine), reinterpret_cast<double *>(theirs),
        count, average, call.streaming);
  else
    return false;
  return true;
}

} // namespace

// memcpy into memory that will not be read again soon (the output of a
// large all_reduce): non-temporal stores, so the destination is not read
// into the cache first. The caller ends with streamFence().
void streamCopy(char *dst, const char *src, size_t bytes) {
#if defined(__SSE2__)
  size_t head = (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16;
  if (bytes < 256 || head >= bytes) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  size_t blocks = bytes / 64;
  for (size_t i = 0; i < blocks; ++i, dst += 64, src += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + 32));
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i *>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i *>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i *>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i *>(dst + 48), d);
  }
  std::memcpy(dst, src, bytes % 64);
#else
  std::memcpy(dst, src, bytes);
#endif
}

// Orders the non-temporal stores before anything that follows.
void streamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

bool peerAccessWanted() {
  const char *value = std::getenv("DTORCH_HOSTSHM_PEER_ACCESS");
  return !(value && std::string(value) == "0");
}

void readFromProcess(int32_t pid, uint64_t remote, void *local, size_t bytes) {
  if (pid == getpid()) {
    std::memcpy(local, reinterpret_cast<const void *>(remote), bytes);
    return;
  }
  transfer(pid, remote, static_cast<char *>(local), bytes, false);
}

void writeToProcess(int32_t pid, uint64_t remote, const void *local,
                    size_t bytes) {
  if (pid == getpid()) {
    std::memcpy(reinterpret_cast<void *>(remote), local, bytes);
    return;
  }
  // process_vm_writev only reads the local buffer.
  transfer(pid, remote, const_cast<char *>(static_cast<const char *>(local)),
           bytes, true);
}

void PeerProbe::fill(uint64_t nonce) {
  for (size_t i = 0; i < 8; ++i)
    pattern[i] = nonce * (i + 1) + 0x9e3779b97f4a7c15ull;
}

bool probePeer(int32_t pid, uint64_t address, uint64_t nonce) {
  PeerProbe expected;
  expected.fill(nonce);
  uint64_t seen[8] = {};
  try {
    readFromProcess(pid, address + offsetof(PeerProbe, pattern), seen,
                    sizeof(seen));
    uint64_t mark = static_cast<uint64_t>(getpid());
    writeToProcess(pid, address + offsetof(PeerProbe, scratch), &mark,
                   sizeof(mark));
  } catch (const RuntimeError &) {
    return false;
  }
  return std::memcmp(seen, expected.pattern, sizeof(seen)) == 0;
}

uint64_t peerChunkBytes(uint64_t bytes, size_t members, uint64_t maxChunk) {
  constexpr uint64_t kMinChunk = 16 << 10;
  uint64_t chunk = bytes / (4 * std::max<size_t>(members, 1));
  chunk = std::clamp<uint64_t>(chunk, kMinChunk, std::max(maxChunk, kMinChunk));
  return std::max<uint64_t>(kPage, chunk / kPage * kPage);
}

void reduceClaimedChunks(PeerAllReduce &call, std::vector<char> &scratch,
                         const std::function<void()> &beforeFirstChunk) {
  Segment &seg = *call.segment;
  size_t n = call.pids.size();
  size_t esize = dtypeSize(call.dtype);
  uint64_t chunkBytes = call.chunkElements * esize;
  // One chunk per other member read by system calls.
  if (scratch.size() < (n - 1) * chunkBytes)
    scratch.resize((n - 1) * chunkBytes);
  std::atomic<uint32_t> &claimed = seg.header().claimed;
  const uint32_t end = call.endChunk();
  std::vector<const void *> pieces(n);
  char *myOutput = reinterpret_cast<char *>(call.outputs[call.me]);
  const char *myInput = reinterpret_cast<const char *>(call.inputs[call.me]);
  bool resolved = false;
  uint32_t next = claimed.load(std::memory_order_acquire);
  while (static_cast<int32_t>(next - end) < 0) {
    // A claim never passes the call's last chunk: a member still in this
    // call must not take a chunk of the next one.
    if (!claimed.compare_exchange_weak(next, next + 1,
                                       std::memory_order_acq_rel))
      continue;
    if (!resolved) {
      beforeFirstChunk();
      resolved = true;
    }
    uint64_t index = next - call.firstChunk;
    uint64_t begin = index * call.chunkElements;
    uint64_t length = std::min(call.chunkElements, call.count - begin);
    uint64_t offset = begin * esize, bytes = length * esize;
    for (size_t j = 0, s = 0; j < n; ++j) {
      if (j == call.me) {
        pieces[j] = myInput + offset;
        continue;
      }
      if (call.inputViews[j]) {
        pieces[j] = call.inputViews[j] + offset;
        continue;
      }
      char *into = scratch.data() + (s++) * chunkBytes;
      readFromProcess(call.pids[j], call.inputs[j] + offset, into, bytes);
      pieces[j] = into;
    }
    char *result = myOutput + offset;
    size_t other = 1 - call.me;
    if (n == 2 && call.outputViews[other] &&
        withWriteTo(call, other, [&](char *theirs) {
          bool done = reduceTwoIntoBoth(call, pieces[0], pieces[1], result,
                                        theirs + offset, length);
          if (done && call.streaming)
            streamFence(); // before announcing the end of the write
          return done;
        })) {
      seg.advance(seg.header().completed);
      next = claimed.load(std::memory_order_acquire);
      continue;
    }
    reducePieces(result, pieces, static_cast<int64_t>(length), call.dtype,
                 call.op);
    for (size_t j = 0; j < n; ++j)
      if (j != call.me)
        withWriteTo(call, j, [&](char *view) {
          if (view)
            std::memcpy(view + offset, result, bytes);
          else
            writeToProcess(call.pids[j], call.outputs[j] + offset, result,
                           bytes);
          return true;
        });
    seg.advance(seg.header().completed);
    next = claimed.load(std::memory_order_acquire);
  }
}

MappedArena::MappedArena(int32_t pid, int32_t fd, uint64_t bytes)
    : bytes_(bytes) {
  std::string path =
      "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  int opened = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (opened < 0)
    throw RuntimeError("shared memory: cannot open the arena " + path + ": " +
                       std::strerror(errno));
  struct stat info{};
  if (fstat(opened, &info) != 0 ||
      static_cast<uint64_t>(info.st_size) != bytes) {
    close(opened);
    throw RuntimeError("shared memory: " + path + " is not an arena of " +
                       std::to_string(bytes) + " bytes");
  }
  void *base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_NORESERVE, opened, 0);
  close(opened);
  if (base == MAP_FAILED)
    throw RuntimeError("shared memory: mapping the arena " + path +
                       " failed: " + std::strerror(errno));
  base_ = static_cast<char *>(base);
}

MappedArena::~MappedArena() {
  if (base_)
    munmap(base_, bytes_);
}

void closeForWrites(Segment &segment, size_t me,
                    std::chrono::milliseconds deadline) {
  segment.control(me).writable.store(0, std::memory_order_seq_cst);
  auto until = Clock::now() + deadline;
  for (size_t k = 0; k < segment.members(); ++k) {
    if (k == me)
      continue;
    MemberControl &writer = segment.control(k);
    for (int spins = 0;
         writer.writingTo.load(std::memory_order_seq_cst) == me + 1; ++spins) {
      // A writer that died can write no more; one that is alive finishes
      // its copy (a chunk) soon unless descheduled.
      if (!processAlive(writer.pid.load(std::memory_order_acquire),
                        writer.startTime) ||
          Clock::now() >= until)
        break;
      if (spins < 64)
        sched_yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

} // namespace dtorch::rt::hostshm
