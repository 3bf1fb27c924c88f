//===- RecordPool.cpp - free lists for the per-op objects of recording ----===//
#include "dtorch/Client/RecordPool.h"

#include <cstdlib>
#include <mutex>
#include <string_view>

namespace dtorch::client {

bool recordPoolEnabled() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_RECORD_POOL");
    return !(value && std::string_view(value) == "0");
  }();
  return enabled;
}

namespace pool {
namespace {

struct Block {
  Block *next;      // within a list or chain
  Block *nextChain; // the depot's chains, through their first blocks
};
static_assert(sizeof(Block) <= kGranule, "a block must hold its links");

/// Blocks move between threads in chains of kChain: a thread whose list
/// grows past 2 * kChain hands a chain to the depot, a thread whose list is
/// empty takes one. The controller thread frees the blocks of the storages
/// it was the last to see; the main thread, which records, reuses them.
constexpr uint32_t kChain = 64;
constexpr uint32_t kMaxChains = kMaxCached / kChain;

struct Depot {
  std::mutex mutex;
  Block *chains[kClasses] = {};
  uint32_t count[kClasses] = {};
};
/// Never destroyed: threads may free blocks while the process exits.
Depot &depot() {
  static Depot *d = new Depot;
  return *d;
}

/// One thread's free lists. Trivially destructible, so it stays readable
/// after the thread's other thread_local objects are gone (`dead` then
/// sends every block to the heap).
struct Lists {
  Block *head[kClasses];
  uint32_t count[kClasses];
  Stats stats;
  bool dead;
  bool reaperArmed;
};
thread_local Lists tLists;

/// Frees the thread's cached blocks when it exits.
struct Reaper {
  Reaper() noexcept {}
  ~Reaper() {
    Lists &l = tLists;
    for (size_t c = 0; c < kClasses; ++c)
      while (Block *b = l.head[c]) {
        l.head[c] = b->next;
        ::operator delete(b);
      }
    l.dead = true;
  }
  int touched = 0;
};
thread_local Reaper tReaper;

size_t classOf(size_t bytes) { return (bytes + kGranule - 1) / kGranule - 1; }

} // namespace

void *allocate(size_t bytes) {
  if (!recordPoolEnabled())
    return ::operator new(bytes);
  Lists &l = tLists;
  size_t c = classOf(bytes);
  if (!l.head[c] && !l.dead) {
    Depot &d = depot();
    std::lock_guard<std::mutex> lock(d.mutex);
    if (Block *chain = d.chains[c]) {
      d.chains[c] = chain->nextChain;
      --d.count[c];
      l.head[c] = chain;
      l.count[c] = kChain;
      if (!l.reaperArmed) {
        l.reaperArmed = true;
        tReaper.touched = 1; // constructs it: its destructor runs at exit
      }
    }
  }
  if (Block *b = l.head[c]) {
    l.head[c] = b->next;
    --l.count[c];
    ++l.stats.reused;
    return b;
  }
  ++l.stats.fresh;
  // Any block of the class serves any request of it.
  return ::operator new((c + 1) * kGranule);
}

void deallocate(void *block, size_t bytes) noexcept {
  if (!recordPoolEnabled()) {
    ::operator delete(block);
    return;
  }
  Lists &l = tLists;
  size_t c = classOf(bytes);
  if (l.dead) {
    ++l.stats.returned;
    ::operator delete(block);
    return;
  }
  if (!l.reaperArmed) {
    l.reaperArmed = true;
    tReaper.touched = 1; // constructs it: its destructor runs at exit
  }
  auto *b = static_cast<Block *>(block);
  b->next = l.head[c];
  l.head[c] = b;
  if (++l.count[c] < 2 * kChain)
    return;
  // Hand a chain of kChain to the depot (or the heap when it is full).
  Block *chain = l.head[c];
  Block *last = chain;
  for (uint32_t k = 1; k < kChain; ++k)
    last = last->next;
  l.head[c] = last->next;
  last->next = nullptr;
  l.count[c] -= kChain;
  {
    Depot &d = depot();
    std::lock_guard<std::mutex> lock(d.mutex);
    if (d.count[c] < kMaxChains) {
      chain->nextChain = d.chains[c];
      d.chains[c] = chain;
      ++d.count[c];
      return;
    }
  }
  l.stats.returned += kChain;
  while (chain) {
    Block *next = chain->next;
    ::operator delete(chain);
    chain = next;
  }
}

Stats threadStats() {
  Stats s = tLists.stats;
  s.cached = 0;
  for (size_t c = 0; c < kClasses; ++c)
    s.cached += tLists.count[c];
  return s;
}

} // namespace pool
} // namespace dtorch::client
