// Generated kernels shipped inside a program (wire::Executable): loaded once
// per process from their bytes, keyed by content hash, and called by the
// executor for a "fused" instruction. MLIR-free.
#pragma once

#include "dtorch_program.pb.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace dtorch::rt {

// The entry point every generated kernel exports; `scalars` are the
// calling instruction's `scalars` (num_scalars float64 values).
using GeneratedKernelFn = void (*)(void *const *inputs, void *const *outputs,
                                   const double *scalars);

// The entry that computes only rows [begin, end) of the outermost dim of the
// kernel's shape (inputs broadcast along that dim are read whole): exported
// as `<symbol>_rows` by elementwise kernels of at least two rows, so that a
// worker can split a large tensor among threads. Rows are computed exactly
// as the whole-tensor entry computes them.
using GeneratedRowsKernelFn = void (*)(void *const *inputs,
                                       void *const *outputs,
                                       const double *scalars, int64_t begin,
                                       int64_t end);
inline constexpr const char *kRowsEntrySuffix = "_rows";

// FNV-1a 64-bit of `bytes` as 16 lowercase hex digits: the content hash the
// controller writes into wire::Executable::content_hash.
inline std::string executableHash(std::string_view bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  static const char digits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4)
    out[i] = digits[h & 15];
  return out;
}

// The entry of `executable`, loading it the first time its content hash is
// seen in this process (a private temporary file + dlopen). Throws RuntimeError
// when the bytes do not match the hash, are not a loadable shared object, or
// lack the symbol. Thread-safe.
GeneratedKernelFn loadExecutable(const ::dtorch::wire::Executable &executable);

// The `<symbol>_rows` entry of `executable` (loading it as loadExecutable
// does), or null when the kernel has none.
GeneratedRowsKernelFn
loadExecutableRows(const ::dtorch::wire::Executable &executable);

// How many distinct executables this process has loaded (for tests).
int64_t loadedExecutableCount();

class Device;

// Generated kernels for a device (wire::Executable.gpu: PTX for a CUDA
// mesh) are not loaded here: the device's backend registers a launcher,
// which loads the code once per device and content hash and queues one
// call of it on the device's current stream. `inputs` and `outputs` are
// device pointers; `scalars` are host values (num_scalars of them).
using DeviceKernelLauncher = void (*)(Device &device,
                                      const ::dtorch::wire::Executable &exe,
                                      void *const *inputs, void *const *outputs,
                                      const double *scalars);
// Registers `launcher` for devices named `deviceName` ("cuda"); replaces
// an earlier one.
void registerDeviceKernelLauncher(const std::string &deviceName,
                                  DeviceKernelLauncher launcher);
// The launcher registered for `deviceName`, or nullptr.
DeviceKernelLauncher deviceKernelLauncher(const std::string &deviceName);

// Checks what can be checked of `exe` without loading it: for device code,
// that its bytes match the content hash and it has an entry. Throws
// RuntimeError. For host code, loads it (loadExecutable).
void checkExecutable(const ::dtorch::wire::Executable &exe);

} // namespace dtorch::rt
