// The BLAS libraries behind blas::sgemm / blas::dgemm (Blas.h): oneDNN,
// OpenBLAS and BLIS, each loaded with dlopen(RTLD_LOCAL) on first use, and
// the thread count applied the way each library takes it.
#include "dtorch/runtime/Blas.h"

#include "dtorch/runtime/Tensor.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>

namespace dtorch::rt::blas {

namespace {

// CBLAS enum values (cblas.h) and the entry points, as declared by every
// library that exports them.
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112;
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float *,
                            int, const float *, int, float, float *, int);
using CblasDgemm = void (*)(int, int, int, int, int, int, double,
                            const double *, int, const double *, int, double,
                            double *, int);
// dnnl_sgemm: row-major, 64-bit dims, returns dnnl_status_t (0: success).
using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float,
                          const float *, int64_t, const float *, int64_t, float,
                          float *, int64_t);
// The leading fields of dnnl_version_t (oneDNN 2.x and 3.x).
struct DnnlVersion {
  int major, minor, patch;
  const char *hash;
};

// DTORCH_BLAS: a library, or nothing for the default choice.
std::optional<Library> libraryFromEnvironment() {
  const char *text = std::getenv("DTORCH_BLAS");
  std::string name = text ? text : "";
  if (name.empty() || name == "auto")
    return std::nullopt;
  if (name == "onednn" || name == "dnnl")
    return Library::OneDnn;
  if (name == "openblas")
    return Library::OpenBlas;
  if (name == "blis")
    return Library::Blis;
  throw RuntimeError("DTORCH_BLAS=" + name +
                     " is not one of auto, onednn, openblas, blis");
}

void *openFirst(std::initializer_list<const char *> names, std::string &tried) {
  for (const char *name : names) {
    if (void *handle = dlopen(name, RTLD_NOW | RTLD_LOCAL))
      return handle;
    const char *error = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + (error ? error : name);
  }
  return nullptr;
}

template <class F> F symbol(void *handle, const char *name, const char *lib) {
  void *address = dlsym(handle, name);
  if (!address)
    throw RuntimeError(std::string(lib) + " lacks " + name);
  return reinterpret_cast<F>(address);
}

int checkedInt(int64_t value, const char *library) {
  if (value > INT_MAX || value < 0)
    throw RuntimeError(std::string("GEMM dimension ") + std::to_string(value) +
                       " exceeds " + library + "'s integer range");
  return static_cast<int>(value);
}

// A process-wide thread count (OpenBLAS, BLIS): set again when it changed.
struct GlobalThreads {
  std::mutex mutex;
  int applied = 0;
  template <class Set> void apply(Set set) {
    int want = threads();
    std::lock_guard<std::mutex> lock(mutex);
    if (applied != want) {
      set(want);
      applied = want;
    }
  }
};

struct OpenBlas {
  void *handle = nullptr;
  CblasSgemm sgemm = nullptr;
  CblasDgemm dgemm = nullptr;
  void (*setNumThreads)(int) = nullptr;
  std::string version, core, chosen;
  bool preloaded = false;
  GlobalThreads threads;

  OpenBlas() {
    const char *soname = "libopenblas.so.0";
    // Already in the process (linked by someone else): its constructor has
    // run, and the core type we choose cannot take effect any more.
    if (void *existing = dlopen(soname, RTLD_NOW | RTLD_NOLOAD)) {
      preloaded = true;
      dlclose(existing);
    }
    const char *user = std::getenv("OPENBLAS_CORETYPE");
    if (user && *user) {
      chosen = user;
    } else {
      chosen = openBlasCoreTypeFor(detectCpuFeatures());
      if (!chosen.empty() && !preloaded)
        setenv("OPENBLAS_CORETYPE", chosen.c_str(), 0);
    }
    std::string tried;
    handle = openFirst({soname, "libopenblas.so"}, tried);
    if (!handle)
      throw RuntimeError("cannot load OpenBLAS (" + tried +
                         "); install libopenblas0 (scripts/setup.sh)");
    sgemm = symbol<CblasSgemm>(handle, "cblas_sgemm", "OpenBLAS");
    dgemm = symbol<CblasDgemm>(handle, "cblas_dgemm", "OpenBLAS");
    setNumThreads =
        symbol<void (*)(int)>(handle, "openblas_set_num_threads", "OpenBLAS");
    core = symbol<char *(*)()>(handle, "openblas_get_corename", "OpenBLAS")();
    // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64"
    std::string config =
        symbol<char *(*)()>(handle, "openblas_get_config", "OpenBLAS")();
    size_t space = config.find(' ');
    version = "OpenBLAS";
    if (space != std::string::npos)
      version += " " + config.substr(space + 1,
                                     config.find(' ', space + 1) - space - 1);
  }
  void applyThreads() {
    threads.apply([&](int n) { setNumThreads(n); });
  }
};

struct Blis {
  void *handle = nullptr;
  CblasSgemm sgemm = nullptr;
  CblasDgemm dgemm = nullptr;
  void (*setNumThreads)(int64_t) = nullptr;
  std::string version, arch;
  GlobalThreads threads;

  Blis() {
    std::string tried;
    handle = openFirst({"libblis.so.4", "libblis.so"}, tried);
    if (!handle)
      throw RuntimeError("cannot load BLIS (" + tried +
                         "); install libblis4 (scripts/setup.sh)");
    sgemm = symbol<CblasSgemm>(handle, "cblas_sgemm", "BLIS");
    dgemm = symbol<CblasDgemm>(handle, "cblas_dgemm", "BLIS");
    setNumThreads =
        symbol<void (*)(int64_t)>(handle, "bli_thread_set_num_threads", "BLIS");
    version = std::string("BLIS ") +
              symbol<char *(*)()>(handle, "bli_info_get_version_str", "BLIS")();
    int id = symbol<int (*)()>(handle, "bli_arch_query_id", "BLIS")();
    arch = symbol<char *(*)(int)>(handle, "bli_arch_string", "BLIS")(id);
  }
  void applyThreads() {
    threads.apply([&](int n) { setNumThreads(n); });
  }
};

std::string dnnlIsaName(int isa) {
  switch (isa) {
  case 0x1:
    return "sse41";
  case 0x3:
    return "avx";
  case 0x7:
    return "avx2";
  case 0x407:
    return "avx2_vnni";
  case 0xf:
    return "avx512_mic";
  case 0x1f:
    return "avx512_mic_4ops";
  case 0x27:
    return "avx512_core";
  case 0x67:
    return "avx512_core_vnni";
  case 0xe7:
    return "avx512_core_bf16";
  case 0x3e7:
    return "avx512_core_amx";
  default:
    return "isa 0x" + [&] {
      char hex[16];
      std::snprintf(hex, sizeof(hex), "%x", isa);
      return std::string(hex);
    }();
  }
}

struct OneDnn {
  void *handle = nullptr;
  DnnlSgemm sgemm = nullptr;
  void (*ompSetNumThreads)(int) = nullptr;
  std::string version, isa;

  OneDnn() {
    std::string tried;
    handle = openFirst({"libdnnl.so.2", "libdnnl.so.3", "libdnnl.so"}, tried);
    if (!handle)
      throw RuntimeError("cannot load oneDNN (" + tried +
                         "); install libdnnl2 (scripts/setup.sh)");
    sgemm = symbol<DnnlSgemm>(handle, "dnnl_sgemm", "oneDNN");
    const DnnlVersion *v =
        symbol<const DnnlVersion *(*)()>(handle, "dnnl_version", "oneDNN")();
    version = "oneDNN " + std::to_string(v->major) + "." +
              std::to_string(v->minor) + "." + std::to_string(v->patch);
    isa = dnnlIsaName(
        symbol<int (*)()>(handle, "dnnl_get_effective_cpu_isa", "oneDNN")());
    // oneDNN's OpenMP runtime: its thread count is per calling thread. A
    // sequential build has none and runs on the caller only.
    ompSetNumThreads =
        reinterpret_cast<void (*)(int)>(dlsym(handle, "omp_set_num_threads"));
  }
  void applyThreads() {
    thread_local int applied = 0;
    int want = threads();
    if (ompSetNumThreads && applied != want) {
      ompSetNumThreads(want);
      applied = want;
    }
  }
};

// One library, loaded on first use; a failure is kept and thrown again.
template <class Library> class Lazy {
public:
  Library &get() {
    std::call_once(once_, [&] {
      try {
        library_ = std::make_unique<Library>();
      } catch (...) {
        error_ = std::current_exception();
      }
    });
    if (error_)
      std::rethrow_exception(error_);
    return *library_;
  }
  bool available() {
    try {
      get();
      return true;
    } catch (const std::exception &) {
      return false;
    }
  }

private:
  std::once_flag once_;
  std::unique_ptr<Library> library_;
  std::exception_ptr error_;
};

struct Libraries {
  Lazy<OpenBlas> openBlas;
  Lazy<Blis> blis;
  Lazy<OneDnn> oneDnn;
  std::once_flag chooseOnce;
  Library sgemmLibrary = Library::OpenBlas, dgemmLibrary = Library::OpenBlas;

  // The default uses oneDNN for float32 when it loads, OpenBLAS otherwise,
  // and OpenBLAS for float64; DTORCH_BLAS=blis runs both on BLIS.
  void choose() {
    std::call_once(chooseOnce, [&] {
      std::optional<Library> forced = libraryFromEnvironment();
      if (!forced)
        sgemmLibrary = oneDnn.available() ? Library::OneDnn : Library::OpenBlas;
      else
        sgemmLibrary = *forced;
      dgemmLibrary =
          forced == Library::Blis ? Library::Blis : Library::OpenBlas;
    });
  }
  std::string name(Library library) {
    switch (library) {
    case Library::OneDnn:
      return oneDnn.get().version;
    case Library::Blis:
      return blis.get().version;
    case Library::OpenBlas:
      break;
    }
    return openBlas.get().version;
  }
};

Libraries &libraries() {
  static Libraries *instance = new Libraries(); // never destroyed: GEMMs may
                                                // run during static teardown
  return *instance;
}

template <class T, class Gemm>
void cblasGemm(Gemm gemm, const char *name, bool transA, bool transB, int64_t m,
               int64_t n, int64_t k, T alpha, const T *a, int64_t lda,
               const T *b, int64_t ldb, T beta, T *c, int64_t ldc) {
  gemm(kCblasRowMajor, transA ? kCblasTrans : kCblasNoTrans,
       transB ? kCblasTrans : kCblasNoTrans, checkedInt(m, name),
       checkedInt(n, name), checkedInt(k, name), alpha, a,
       checkedInt(lda, name), b, checkedInt(ldb, name), beta, c,
       checkedInt(ldc, name));
}

// The cblas_sgemm (T = float) or cblas_dgemm of BLIS or OpenBLAS.
template <class T, class Lib> auto cblasGemmOf(Lib &lib) {
  if constexpr (std::is_same_v<T, float>)
    return lib.sgemm;
  else
    return lib.dgemm;
}

// sgemmWith / dgemmWith for BLIS and OpenBLAS (`library`): the library's
// threads applied, then its cblas GEMM.
template <class T>
void cblasGemmWith(Library library, bool transA, bool transB, int64_t m,
                   int64_t n, int64_t k, T alpha, const T *a, int64_t lda,
                   const T *b, int64_t ldb, T beta, T *c, int64_t ldc) {
  Libraries &libs = libraries();
  if (library == Library::Blis) {
    Blis &blis = libs.blis.get();
    blis.applyThreads();
    cblasGemm(cblasGemmOf<T>(blis), "BLIS", transA, transB, m, n, k, alpha, a,
              lda, b, ldb, beta, c, ldc);
    return;
  }
  OpenBlas &ob = libs.openBlas.get();
  ob.applyThreads();
  cblasGemm(cblasGemmOf<T>(ob), "OpenBLAS", transA, transB, m, n, k, alpha, a,
            lda, b, ldb, beta, c, ldc);
}

} // namespace

bool available(Library library) {
  Libraries &libs = libraries();
  switch (library) {
  case Library::OneDnn:
    return libs.oneDnn.available();
  case Library::Blis:
    return libs.blis.available();
  case Library::OpenBlas:
    break;
  }
  return libs.openBlas.available();
}

void load() {
  Libraries &libs = libraries();
  libs.choose();
  libs.name(libs.sgemmLibrary);
  libs.name(libs.dgemmLibrary);
}

Info info() {
  Libraries &libs = libraries();
  libs.choose();
  Info result;
  Library s = libs.sgemmLibrary, d = libs.dgemmLibrary;
  result.sgemmLibrary = libs.name(s);
  result.dgemmLibrary = libs.name(d);
  if (s == Library::OpenBlas || d == Library::OpenBlas) {
    OpenBlas &ob = libs.openBlas.get();
    result.openBlasCore = ob.core;
    result.openBlasChosen = ob.chosen;
    result.openBlasPreloaded = ob.preloaded;
  }
  if (s == Library::OneDnn)
    result.oneDnnIsa = libs.oneDnn.get().isa;
  if (s == Library::Blis || d == Library::Blis)
    result.blisArch = libs.blis.get().arch;
  result.threads = threads();
  return result;
}

std::string describe() {
  Info i = info();
  auto detail = [&](const std::string &library) {
    if (library.rfind("oneDNN", 0) == 0)
      return library + " (" + i.oneDnnIsa + ")";
    if (library.rfind("BLIS", 0) == 0)
      return library + " (" + i.blisArch + ")";
    return library + " (" + i.openBlasCore +
           (i.openBlasPreloaded ? ", loaded before dtorch" : "") + ")";
  };
  return "sgemm: " + detail(i.sgemmLibrary) +
         ", dgemm: " + detail(i.dgemmLibrary) + ", " +
         std::to_string(i.threads) + (i.threads == 1 ? " thread" : " threads");
}

void sgemmWith(Library library, bool transA, bool transB, int64_t m, int64_t n,
               int64_t k, float alpha, const float *a, int64_t lda,
               const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  if (library == Library::OneDnn) {
    OneDnn &dnnl = libraries().oneDnn.get();
    dnnl.applyThreads();
    int status = dnnl.sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', m, n, k,
                            alpha, a, lda, b, ldb, beta, c, ldc);
    if (status != 0)
      throw RuntimeError("oneDNN sgemm failed with status " +
                         std::to_string(status));
    return;
  }
  cblasGemmWith(library, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta,
                c, ldc);
}

void dgemmWith(Library library, bool transA, bool transB, int64_t m, int64_t n,
               int64_t k, double alpha, const double *a, int64_t lda,
               const double *b, int64_t ldb, double beta, double *c,
               int64_t ldc) {
  if (library == Library::OneDnn)
    throw RuntimeError("oneDNN has no dgemm");
  cblasGemmWith(library, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta,
                c, ldc);
}

void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const float *a, int64_t lda, const float *b,
           int64_t ldb, float beta, float *c, int64_t ldc) {
  Libraries &libs = libraries();
  libs.choose();
  sgemmWith(libs.sgemmLibrary, transA, transB, m, n, k, alpha, a, lda, b, ldb,
            beta, c, ldc);
}

void dgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           double alpha, const double *a, int64_t lda, const double *b,
           int64_t ldb, double beta, double *c, int64_t ldc) {
  Libraries &libs = libraries();
  libs.choose();
  dgemmWith(libs.dgemmLibrary, transA, transB, m, n, k, alpha, a, lda, b, ldb,
            beta, c, ldc);
}

} // namespace dtorch::rt::blas
