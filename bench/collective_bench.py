"""all_reduce between 2 processes of this host: DTorch's shared-memory
transport between processes next to Gloo used directly (the Gloo
communicator the runtime builds for ranks on different hosts), in one run.

Sizes 4 KiB to 64 MiB (powers of 4), float32, sum. Transports: shared memory
with the runtime's defaults (peer access above 64 KiB: every member reads
the others' inputs and writes into their outputs, process_vm_readv/writev),
the same with peer access off (the staged rounds: what every size used
before; --no-staged leaves it out) and Gloo. Each transport runs in 2 fresh
processes; the transports alternate --repeats times so that they see the
same noise, and each size reports the median and the best time of one
all_reduce over every iteration of every repeat, and the CPU time per call
of both processes together. Bus bandwidth = 2 (n - 1) / n * bytes / time
(n = 2: bytes / time). The goal is at least 5x Gloo at every size.

    python3 bench/collective_bench.py [--repeats 5] [--out bench/results/collectives]
                                      [--no-staged]
                                      [--quick]   (2 sizes, 1 repeat: a smoke test)

The measuring is done by build/bin/collective_bench (bench/collective_bench.cpp).
Writes table.md, results.json and collectives.png into --out. Not run by the
tests (test/python/test_collective_bench.py runs --quick).
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

from bench_support import load_averages, write_table_and_json

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_BINARY = os.path.join(ROOT, "build", "bin", "collective_bench")
SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
GOAL = 5.0


def human(nbytes):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def measure(binary, sizes, repeats, transports, chunk_bytes=None):
    cmd = [binary, "--sizes", ",".join(str(s) for s in sizes), "--repeats", str(repeats),
           "--transports", ",".join(transports)]
    if chunk_bytes:
        cmd += ["--chunk-bytes", str(chunk_bytes)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def ratio(a, b):
    return a / b if b > 0 else 0.0


def rows_of(raw):
    transports = raw["transports"]
    shm, gloo = transports["shared_memory"], transports["gloo"]
    staged = transports.get("shared_memory_staged")
    rows = []
    for i, size in enumerate(raw["sizes"]):
        row = {
            "bytes": size,
            "shared_memory_us": shm["seconds"][i] * 1e6,
            "shared_memory_best_us": shm["best_seconds"][i] * 1e6,
            "gloo_us": gloo["seconds"][i] * 1e6,
            "gloo_best_us": gloo["best_seconds"][i] * 1e6,
            "shared_memory_bus_gbps": shm["bus_gbps"][i],
            "gloo_bus_gbps": gloo["bus_gbps"][i],
            "ratio": ratio(gloo["seconds"][i], shm["seconds"][i]),
            "best_ratio": ratio(gloo["best_seconds"][i], shm["best_seconds"][i]),
            # CPU time per call of both processes together (all threads).
            "shared_memory_cpu_us": shm["cpu_seconds_all_ranks"][i] * 1e6,
            "gloo_cpu_us": gloo["cpu_seconds_all_ranks"][i] * 1e6,
            "cpu_ratio": ratio(gloo["cpu_seconds_all_ranks"][i],
                               shm["cpu_seconds_all_ranks"][i]),
        }
        if staged:
            row.update({
                "staged_us": staged["seconds"][i] * 1e6,
                "staged_best_us": staged["best_seconds"][i] * 1e6,
                "staged_bus_gbps": staged["bus_gbps"][i],
                "staged_cpu_us": staged["cpu_seconds_all_ranks"][i] * 1e6,
                "staged_ratio": ratio(gloo["seconds"][i], staged["seconds"][i]),
            })
        rows.append(row)
    return rows


def table(rows, meta):
    staged = "staged_us" in rows[0]
    lines = [
        "# all_reduce between 2 processes of one host (float32, sum)",
        "",
        f"{meta['when']}, {meta['cpus']} CPUs, load average {meta['load']} at the start, "
        f"{meta.get('load_end', '?')} at the end; {meta['repeats']} alternating runs of "
        "each transport, median and best of every call.",
        "",
        "| size | shared memory us, median / best | "
        + ("staged us, median | " if staged else "")
        + "Gloo us, median / best | speed-up, median | speed-up, best | "
        + ("staged speed-up | " if staged else "")
        + "shared memory GB/s | CPU us both processes: shared memory | "
        + ("staged | " if staged else "") + "Gloo | CPU ratio |",
        "|---:|---:|" + ("---:|" if staged else "") + "---:|---:|---:|"
        + ("---:|" if staged else "") + "---:|---:|" + ("---:|" if staged else "") + "---:|---:|",
    ]
    for r in rows:
        mark = "" if r["ratio"] >= GOAL else " (below 5x)"
        cells = [human(r["bytes"]),
                 f"{r['shared_memory_us']:.1f} / {r['shared_memory_best_us']:.1f}"]
        if staged:
            cells.append(f"{r['staged_us']:.1f}")
        cells += [f"{r['gloo_us']:.1f} / {r['gloo_best_us']:.1f}",
                  f"{r['ratio']:.1f}x{mark}", f"{r['best_ratio']:.1f}x"]
        if staged:
            cells.append(f"{r['staged_ratio']:.1f}x")
        cells += [f"{r['shared_memory_bus_gbps']:.2f}", f"{r['shared_memory_cpu_us']:.1f}"]
        if staged:
            cells.append(f"{r['staged_cpu_us']:.1f}")
        cells += [f"{r['gloo_cpu_us']:.1f}", f"{r['cpu_ratio']:.1f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Shared memory: as in dtorch-worker (tensors in the shared arena, "
              "peer access above 64 KiB). Staged: shared memory with peer access "
              "off (the rounds through the segment). Speed-up: Gloo's time over shared memory's. GB/s is bus "
              "bandwidth (2 (n - 1) / n * bytes / time; n = 2), from the median. "
              "CPU us: CPU time per call of both processes together (all their "
              "threads, Gloo's I/O threads included), median; the host's load "
              "inflates it less than the wall-clock time."]
    return "\n".join(lines) + "\n"


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    sizes = [r["bytes"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(sizes, [r["shared_memory_bus_gbps"] for r in rows], "o-", label="DTorch shared memory")
    if "staged_bus_gbps" in rows[0]:
        left.plot(sizes, [r["staged_bus_gbps"] for r in rows], "^--",
                  label="shared memory, staged (peer access off)")
    left.plot(sizes, [r["gloo_bus_gbps"] for r in rows], "s-", label="Gloo (TCP loopback)")
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("bytes per rank")
    left.set_ylabel("bus bandwidth GB/s")
    left.set_title("all_reduce, 2 processes, float32")
    left.legend()
    width = 0.4
    right.bar([i - width / 2 for i in range(len(rows))], [r["ratio"] for r in rows], width,
              label="median")
    right.bar([i + width / 2 for i in range(len(rows))], [r["best_ratio"] for r in rows],
              width, label="best")
    right.set_yscale("log")
    right.axhline(GOAL, color="red", linestyle="--", label="goal 5x")
    right.set_xticks(range(len(rows)))
    right.set_xticklabels([human(s) for s in sizes], rotation=45)
    right.set_ylabel("speed-up over Gloo")
    right.set_title("shared memory / Gloo")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=DEFAULT_BINARY)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chunk-bytes", type=int, default=None,
                        help="shared memory's bytes per round (default: the runtime's)")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "collectives"))
    parser.add_argument("--quick", action="store_true", help="2 sizes, 1 repeat")
    parser.add_argument("--no-staged", action="store_true",
                        help="leave out shared memory with peer access off")
    args = parser.parse_args()
    if not os.path.exists(args.binary):
        raise SystemExit(f"{args.binary} is missing: build it (cmake --build build "
                         "--target collective_bench)")
    sizes = [4 << 10, 256 << 10] if args.quick else SIZES
    repeats = 1 if args.quick else args.repeats
    transports = ["shared_memory"] + ([] if args.no_staged else ["shared_memory_staged"]) \
        + ["gloo"]
    start = time.time()
    load_start = load_averages()
    raw = measure(args.binary, sizes, repeats, transports, args.chunk_bytes)
    rows = rows_of(raw)
    meta = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "load": load_start,
        "load_end": load_averages(),
        "repeats": repeats,
        "machine": platform.machine(),
        "seconds": round(time.time() - start, 1),
        "goal_ratio": GOAL,
    }
    text = table(rows, meta)
    write_table_and_json(args.out, text, {"meta": meta, "rows": rows, "raw": raw}, indent=2)
    png = plot(rows, os.path.join(args.out, "collectives.png"))
    print(text)
    print(f"wrote {args.out}/table.md, results.json" + (", collectives.png" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
