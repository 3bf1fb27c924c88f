//===- ProgramDiskCache.cpp - compiled programs kept across processes -----===//
#include "ProgramDiskCache.h"

#include "SegmentKey.h"
#include "dtorch/Compiler.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <link.h>
#include <sstream>
#include <unistd.h>

namespace dtorch::client {
namespace {

constexpr char kMagic[8] = {'D', 'T', 'P', 'R', 'O', 'G', '0', '1'};

void putU64(std::string &out, uint64_t v) {
  for (int k = 0; k < 8; ++k)
    out.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
}

/// Reads from a byte string; every read fails (returns false) past the end.
struct ByteReader {
  const std::string &in;
  size_t at = 0;
  bool u64(uint64_t &v) {
    if (in.size() - at < 8)
      return false;
    v = 0;
    for (int k = 0; k < 8; ++k)
      v |= static_cast<uint64_t>(static_cast<unsigned char>(in[at + k]))
           << (8 * k);
    at += 8;
    return true;
  }
  bool bytes(std::string &out) {
    uint64_t n;
    if (!u64(n) || in.size() - at < n)
      return false;
    out.assign(in, at, n);
    at += n;
    return true;
  }
};

/// A hash of a file's bytes, eight at a time (the file is large).
uint64_t hashFile(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return 0;
  uint64_t h = 0;
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    size_t n = static_cast<size_t>(f.gcount());
    size_t k = 0;
    for (; k + 8 <= n; k += 8) {
      uint64_t w;
      std::memcpy(&w, buf.data() + k, 8);
      h = mixHash(h, w);
    }
    for (; k < n; ++k)
      h = mixHash(h, static_cast<unsigned char>(buf[k]));
  }
  return h;
}

/// Folds every loaded library that decides what the compiler emits: the
/// file holding compileModule and the DTorch dialect library by content,
/// MLIR and LLVM (system packages, large) by path, size and time.
int foldCompilerLibrary(struct dl_phdr_info *info, size_t, void *data) {
  auto &h = *static_cast<uint64_t *>(data);
  std::string path = info->dlpi_name ? info->dlpi_name : "";
  std::string base = path.substr(path.find_last_of('/') + 1);
  if (base.rfind("libDTorch", 0) == 0) {
    h = mixHash(h, hashFile(path));
  } else if (base.rfind("libMLIR", 0) == 0 || base.rfind("libLLVM", 0) == 0) {
    std::error_code ec;
    auto size = std::filesystem::file_size(path, ec);
    auto time = std::filesystem::last_write_time(path, ec);
    h = mixHash(mixHash(hashString(path, h), static_cast<uint64_t>(size)),
                static_cast<uint64_t>(time.time_since_epoch().count()));
  }
  return 0;
}

} // namespace

uint64_t compilerVersionKey() {
  static const uint64_t key = [] {
    uint64_t h = mixHash(0x445450524F47ULL, wire::PROGRAM_FORMAT_VERSION);
    // Programs compiled with and without buffer planning differ.
    h = mixHash(h, bufferPlanningDefault() ? 1 : 0);
    // The environment's compiler configuration changes the programs too.
    h = hashString(compilerConfiguration(), h);
    Dl_info info;
    if (!dladdr(reinterpret_cast<void *>(&compileModule), &info) ||
        !info.dli_fname)
      // No file to hash: programs of this process only.
      return mixHash(h, static_cast<uint64_t>(getpid()) ^
                            reinterpret_cast<uintptr_t>(&info));
    h = mixHash(h, hashFile(info.dli_fname));
    dl_iterate_phdr(foldCompilerLibrary, &h);
    return h;
  }();
  return key;
}

std::string ProgramDiskCache::pathOf(uint64_t key) const {
  char name[40];
  std::snprintf(name, sizeof name, "%016llx.dtprog",
                static_cast<unsigned long long>(key));
  return dir_ + "/" + name;
}

std::optional<std::vector<wire::Program>>
ProgramDiskCache::load(uint64_t key, const std::string &structure) const {
  if (!enabled())
    return std::nullopt;
  std::ifstream f(pathOf(key), std::ios::binary);
  if (!f)
    return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string data = ss.str();
  if (data.size() < sizeof kMagic + 16 ||
      data.compare(0, sizeof kMagic, kMagic, sizeof kMagic) != 0)
    return std::nullopt;
  // The checksum covers everything before it.
  ByteReader tail{data, data.size() - 8};
  uint64_t checksum;
  if (!tail.u64(checksum) ||
      checksum != hashString(data.substr(0, data.size() - 8)))
    return std::nullopt;
  ByteReader r{data, sizeof kMagic};
  uint64_t version, count;
  std::string stored;
  if (!r.u64(version) || version != compilerVersionKey() || !r.bytes(stored) ||
      stored != structure || !r.u64(count) || count > (data.size() - r.at) / 8)
    return std::nullopt;
  std::vector<wire::Program> programs(count);
  std::string bytes;
  for (wire::Program &p : programs)
    if (!r.bytes(bytes) || !p.ParseFromString(bytes))
      return std::nullopt;
  if (r.at != data.size() - 8)
    return std::nullopt;
  return programs;
}

void ProgramDiskCache::store(uint64_t key, const std::string &structure,
                             const std::vector<wire::Program> &programs) const {
  if (!enabled())
    return;
  std::string data(kMagic, sizeof kMagic);
  putU64(data, compilerVersionKey());
  putU64(data, structure.size());
  data += structure;
  putU64(data, programs.size());
  std::string bytes;
  for (const wire::Program &p : programs) {
    bytes.clear();
    p.SerializeToString(&bytes);
    putU64(data, bytes.size());
    data += bytes;
  }
  putU64(data, hashString(data));
  static std::atomic<uint64_t> counter{0};
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  std::string path = pathOf(key);
  std::string temp = path + ".tmp." + std::to_string(getpid()) + "." +
                     std::to_string(counter++);
  {
    std::ofstream f(temp, std::ios::binary | std::ios::trunc);
    if (!f)
      return;
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!f) {
      f.close();
      std::filesystem::remove(temp, ec);
      return;
    }
  }
  std::filesystem::rename(temp, path, ec);
  if (ec)
    std::filesystem::remove(temp, ec);
}

} // namespace dtorch::client
