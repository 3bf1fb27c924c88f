// ASan defaults of the executables that link MLIR: Debian's LLVM/MLIR
// libraries are not instrumented, but LLVM's headers poison the slabs of a
// BumpPtrAllocator when the including code is built with ASan. An allocator
// shared between our instrumented code and the libraries then hands out
// memory that the libraries' uninstrumented copy of Allocate() never
// unpoisoned, and the next memcpy into it reads as a use-after-poison.
// allow_user_poisoning=0 turns that manual poisoning off; ASan's own
// redzones, quarantine and interceptors stay.
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}
