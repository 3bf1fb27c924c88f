// A main() for the fuzz targets in the ordinary build (no libFuzzer): runs
// LLVMFuzzerTestOneInput once on every file of the folders and files given,
// so that ctest replays each seed corpus, with the regression inputs of
// fixed bugs, on every `make test`. Prints how many inputs ran.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace {

int runFile(const std::filesystem::path &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()),
                         bytes.size());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  int inputs = 0, failures = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path path(argv[i]);
    if (std::filesystem::is_directory(path)) {
      for (const auto &entry : std::filesystem::directory_iterator(path))
        if (entry.is_regular_file()) {
          failures += runFile(entry.path());
          ++inputs;
        }
    } else {
      failures += runFile(path);
      ++inputs;
    }
  }
  std::printf("%s: %d inputs replayed\n", argc > 0 ? argv[0] : "replay",
              inputs);
  return failures || inputs == 0 ? 1 : 0;
}
