#!/usr/bin/env bash
# Builds the libFuzzer targets of test/fuzz (build-fuzz/, clang with ASan,
# UBSan and coverage) and runs each one from its seed corpus.
#
#   tools/fuzz.sh [LIMIT] [TARGET...]
#
# LIMIT is a number of seconds per target (600), or a number of inputs per
# target with an `r` suffix (1000000r; the seeds count as inputs). The
# default is CI's bounded run, 5000r. New inputs go to build-fuzz/corpus/<target> (the seeds in
# test/fuzz/corpus stay as they are); a crash, hang, leak or sanitizer
# report is written to build-fuzz/artifacts/<target>/ and fails the script.
# Each target runs with one job: the machine's cores are shared.
# FUZZ_BUILD picks another build folder; FUZZ_SKIP_BUILD=1 skips the build.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${FUZZ_BUILD:-$ROOT/build-fuzz}
LIMIT=${1:-5000r}
shift || true
export CCACHE_BASEDIR=$ROOT
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/dtorch-ccache}

case "$LIMIT" in
  *r) LIMIT_FLAG="-runs=${LIMIT%r}" ;;
  *[!0-9]* | '') echo "fuzz.sh: LIMIT is SECONDS or RUNSr, not '$LIMIT'" >&2; exit 2 ;;
  *) LIMIT_FLAG="-max_total_time=$LIMIT" ;;
esac

if [[ ${FUZZ_SKIP_BUILD:-0} != 1 ]]; then
  if [[ ! -f $BUILD/build.ninja ]]; then
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DCMAKE_C_FLAGS_RELEASE=-O1 \
      -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
      -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
      -DLLVM_DIR=/usr/lib/llvm-22/lib/cmake/llvm \
      -DPython_EXECUTABLE="$(command -v python3)" \
      -DPython3_EXECUTABLE="$(command -v python3)" \
      -DDTORCH_FUZZ=ON >/dev/null
  fi
  cmake --build "$BUILD" --target dtorch-fuzzers -j "${JOBS:-$(nproc)}"
fi

TARGETS=("$@")
if [[ ${#TARGETS[@]} -eq 0 ]]; then
  read -r -a TARGETS < <(tr ';' ' ' <"$BUILD/fuzzers.txt")
fi

# Largest input per target: the IR target skips anything above 4 KiB.
max_len() {
  case "$1" in
    fuzz_dtensor_ir) echo 4096 ;;
    fuzz_wire) echo 65536 ;;
    *) echo 16384 ;;
  esac
}

status=0
summary=()
for target in "${TARGETS[@]}"; do
  seeds=$ROOT/test/fuzz/corpus/$target
  work=$BUILD/corpus/$target
  artifacts=$BUILD/artifacts/$target/
  log=$BUILD/logs/$target.log
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  flags=("$LIMIT_FLAG" -max_len="$(max_len "$target")" -timeout=25
         -rss_limit_mb=2560 -malloc_limit_mb=2048 -print_final_stats=1
         -artifact_prefix="$artifacts")
  [[ -f $ROOT/test/fuzz/$target.dict ]] && flags+=(-dict="$ROOT/test/fuzz/$target.dict")
  echo "== $target ${flags[0]}"
  start=$(date +%s)
  rc=0
  # detect_leaks: a leak is a finding like a crash.
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
    "$BUILD/bin/$target" "${flags[@]}" "$work" "$seeds" >"$log" 2>&1 || rc=$?
  elapsed=$(( $(date +%s) - start ))
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
  runs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$log" | awk '{print $2}' || true)
  cov=$(grep -oE 'cov: [0-9]+' <<<"$done_line" | awk '{print $2}' || true)
  ft=$(grep -oE 'ft: [0-9]+' <<<"$done_line" | awk '{print $2}' || true)
  corpus=$(grep -oE 'corp: [0-9]+/[0-9]+[a-zA-Z]*' <<<"$done_line" | awk '{print $2}' || true)
  if [[ $rc -ne 0 ]]; then
    status=1
    echo "   FAILED (exit $rc): see $log and $artifacts"
    grep -E 'ERROR|SUMMARY|runtime error|deadly signal|timeout' "$log" | head -5 | sed 's/^/   /'
  fi
  summary+=("$(printf '%-26s %10s inputs %6ss  cov %6s  ft %7s  corpus %s  %s' \
    "$target" "${runs:-?}" "$elapsed" "${cov:-?}" "${ft:-?}" "${corpus:-?}" \
    "$([[ $rc -eq 0 ]] && echo ok || echo FAILED)")")
done
printf '%s\n' "${summary[@]}"
exit $status
