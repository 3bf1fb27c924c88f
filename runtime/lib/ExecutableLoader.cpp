// Loads generated kernels (wire::Executable) into the process: the bytes go
// into a private temporary file that dlopen maps and that is removed at
// once. Each content hash is loaded once per process and kept until exit.
#include "dtorch/runtime/Executable.h"
#include "dtorch/runtime/Tensor.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace dtorch::rt {
namespace {

struct Loaded {
  void *handle = nullptr;
  std::unordered_map<std::string, void *> symbols; // null: absent
};

std::mutex &loaderMutex() {
  static std::mutex m;
  return m;
}

std::unordered_map<std::string, Loaded> &loadedByHash() {
  static auto *table = new std::unordered_map<std::string, Loaded>();
  return *table;
}

// dlopen knows a library by its path: a path that was opened before returns
// the library loaded then. So each object gets a fresh file name (mkstemp),
// removed as soon as it is mapped.
void *openSharedObject(const std::string &bytes, const std::string &hash) {
  const char *tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") +
                        "/dtorch-kernel-" + hash + "-XXXXXX";
  std::vector<char> path(pattern.begin(), pattern.end());
  path.push_back('\0');
  int fd = mkstemp(path.data());
  if (fd < 0)
    throw RuntimeError("cannot make a file for generated kernel " + hash +
                       ": " + std::strerror(errno));
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      int error = errno;
      ::close(fd);
      ::unlink(path.data());
      throw RuntimeError(std::string("writing a generated kernel failed: ") +
                         std::strerror(error));
    }
    written += static_cast<size_t>(n);
  }
  ::close(fd);
  void *handle = dlopen(path.data(), RTLD_NOW | RTLD_LOCAL);
  const char *error = handle ? nullptr : dlerror();
  ::unlink(path.data()); // the mapping outlives the file's name
  if (!handle)
    throw RuntimeError("generated kernel " + hash +
                       " cannot be loaded: " + (error ? error : "dlopen"));
  return handle;
}

} // namespace

namespace {

// The address of `name` in `exe`'s library (loaded on first use), cached;
// null when the library has no such symbol.
void *findSymbol(const ::dtorch::wire::Executable &exe,
                 const std::string &name) {
  std::lock_guard<std::mutex> lock(loaderMutex());
  auto &table = loadedByHash();
  auto it = table.find(exe.content_hash());
  if (it == table.end()) {
    std::string actual = executableHash(exe.object());
    if (actual != exe.content_hash())
      throw RuntimeError("generated kernel '" + exe.symbol() +
                         "' is corrupt: its bytes hash to " + actual +
                         ", declared " + exe.content_hash());
    if (exe.object().empty())
      throw RuntimeError("generated kernel '" + exe.symbol() + "' has no code");
    Loaded loaded;
    loaded.handle = openSharedObject(exe.object(), actual);
    it = table.emplace(actual, std::move(loaded)).first;
  }
  auto sym = it->second.symbols.find(name);
  if (sym != it->second.symbols.end())
    return sym->second;
  dlerror();
  void *address = dlsym(it->second.handle, name.c_str());
  it->second.symbols.emplace(name, address);
  return address;
}

} // namespace

GeneratedKernelFn loadExecutable(const ::dtorch::wire::Executable &exe) {
  void *address = findSymbol(exe, exe.symbol());
  if (!address)
    throw RuntimeError("generated kernel " + exe.content_hash() +
                       " has no symbol '" + exe.symbol() + "'");
  return reinterpret_cast<GeneratedKernelFn>(address);
}

GeneratedRowsKernelFn
loadExecutableRows(const ::dtorch::wire::Executable &exe) {
  return reinterpret_cast<GeneratedRowsKernelFn>(
      findSymbol(exe, exe.symbol() + kRowsEntrySuffix));
}

namespace {
std::unordered_map<std::string, DeviceKernelLauncher> &launchers() {
  static auto *table =
      new std::unordered_map<std::string, DeviceKernelLauncher>();
  return *table;
}
} // namespace

void registerDeviceKernelLauncher(const std::string &deviceName,
                                  DeviceKernelLauncher launcher) {
  std::lock_guard<std::mutex> lock(loaderMutex());
  launchers()[deviceName] = launcher;
}

DeviceKernelLauncher deviceKernelLauncher(const std::string &deviceName) {
  std::lock_guard<std::mutex> lock(loaderMutex());
  auto it = launchers().find(deviceName);
  return it == launchers().end() ? nullptr : it->second;
}

void checkExecutable(const ::dtorch::wire::Executable &exe) {
  if (!exe.has_gpu()) {
    loadExecutable(exe);
    return;
  }
  const ::dtorch::wire::GpuKernel &gpu = exe.gpu();
  std::string actual = executableHash(gpu.SerializeAsString());
  if (actual != exe.content_hash())
    throw RuntimeError("generated GPU kernel '" + exe.symbol() +
                       "' is corrupt: its bytes hash to " + actual +
                       ", declared " + exe.content_hash());
  if (gpu.grid_x() < 0 ||
      (gpu.grid_x() > 0 &&
       (gpu.ptx().empty() || gpu.entry().empty() || gpu.block_x() <= 0)))
    throw RuntimeError("generated GPU kernel '" + exe.symbol() +
                       "' has no code or no launch shape");
  int limit = exe.inputs_size() + exe.outputs_size() + exe.num_scalars();
  for (int p : gpu.params())
    if (p < 0 || p >= limit)
      throw RuntimeError("generated GPU kernel '" + exe.symbol() +
                         "' names parameter " + std::to_string(p) +
                         " outside [0, " + std::to_string(limit) + ")");
}

int64_t loadedExecutableCount() {
  std::lock_guard<std::mutex> lock(loaderMutex());
  return static_cast<int64_t>(loadedByHash().size());
}

} // namespace dtorch::rt
