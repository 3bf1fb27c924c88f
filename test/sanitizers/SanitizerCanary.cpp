// Deliberate memory errors and undefined behaviour, one per kind, for the
// self-check of make test-asan (check_sanitizer_setup.py): each must be
// reported by the sanitized build and fail the run, in the interpreter
// that preloads the ASan runtime (this file as a module loaded with ctypes)
// and in a child process it starts, as the embedded cluster starts its
// workers (the same file as the executable sanitizer_canary). Built only
// with DTORCH_SANITIZE=address; nothing else links it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// No fixed underlying type: its values are those of its enumerators' range
// (0 to 3), so loading 200 is undefined.
enum Dtype { F32, F64, I64 };

// Every value read below comes from memory the optimizer cannot see
// through, so the faulty operation is really executed at -O1.
template <typename T> T opaque(T value) {
  volatile T copy = value;
  return copy;
}

int heapBufferOverflow() {
  int count = opaque(8);
  int *values = new int[count];
  for (int i = 0; i < count; ++i)
    values[i] = i;
  int past = values[opaque(count)]; // one past the end
  delete[] values;
  return past;
}

int heapUseAfterFree() {
  int *values = new int[4]{1, 2, 3, 4};
  delete[] values;
  return values[opaque(1)];
}

int signedOverflow() {
  std::int32_t big = opaque(INT32_MAX);
  return big + opaque(1);
}

int invalidShift() {
  std::int64_t one = opaque<std::int64_t>(1);
  return static_cast<int>(one << opaque(64));
}

int misalignedLoad() {
  alignas(8) unsigned char bytes[16] = {};
  unsigned char *base = opaque(bytes);
  auto *value = reinterpret_cast<std::uint64_t *>(base + opaque(1));
  return static_cast<int>(*value);
}

int invalidEnumLoad() {
  int raw = opaque(200);
  Dtype dtype;
  std::memcpy(&dtype, &raw, sizeof dtype);
  return dtype == I64 ? 1 : 0;
}

} // namespace

// Runs the deliberate error `kind` names; "none" runs nothing and returns 0
// (the setup itself reports nothing). Returns -1 for an unknown kind.
extern "C" int dtorch_sanitizer_canary(const char *kind) {
  struct Case {
    const char *name;
    int (*run)();
  };
  static const Case cases[] = {
      {"heap-buffer-overflow", heapBufferOverflow},
      {"heap-use-after-free", heapUseAfterFree},
      {"signed-integer-overflow", signedOverflow},
      {"invalid-shift", invalidShift},
      {"misaligned-load", misalignedLoad},
      {"invalid-enum-load", invalidEnumLoad},
  };
  if (std::strcmp(kind, "none") == 0)
    return 0;
  for (const Case &c : cases)
    if (std::strcmp(kind, c.name) == 0)
      return c.run();
  std::fprintf(stderr, "sanitizer_canary: unknown kind '%s'\n", kind);
  return -1;
}
