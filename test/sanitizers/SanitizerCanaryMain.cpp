// sanitizer_canary KIND: the executable form of SanitizerCanary.cpp, started
// as a child process the way the embedded cluster starts dtorch-worker.
#include <cstdio>

extern "C" int dtorch_sanitizer_canary(const char *kind);

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: sanitizer_canary KIND\n");
    return 2;
  }
  int result = dtorch_sanitizer_canary(argv[1]);
  // Reached only when nothing was reported.
  std::printf("sanitizer_canary %s: no report (%d)\n", argv[1], result);
  return result < 0 ? 2 : 0;
}
