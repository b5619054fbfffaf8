"""What one random read costs on this machine as the memory it reads from grows: the floor under
``bench_growth.py``'s curve.

Each document the service stores reads ~17 band and id groups at random places in the server's heap
(docs/performance.md, "Huge pages, kept through rewrites"), so the server's CPU per document follows the cost
of a random read, which grows once the heap passes what the TLB covers. This measures that cost alone:
a pointer chase (each read's address comes from the previous read, so reads cannot overlap) over a
random cycle of every 64-byte line of a buffer on 2 MiB transparent huge pages (``MADV_HUGEPAGE``, as
mimalloc asks for the server's heap), for buffers from 32 MB to several GB.

The chase is a few lines of C, compiled here with the system's C compiler (``cc``, ``gcc``): a loop in
Python would measure the interpreter. Prints JSON: per size, the median of ``--repeats`` rounds of
nanoseconds per read, and the share of the buffer on huge pages.

    python bench/read_latency.py                       # 32 MB .. 4 GB
    python bench/read_latency.py --sizes-mb 256,3072 --repeats 7
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_model, git_commit

KERNEL = r"""
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The anonymous huge pages of this process, in kB (smaps_rollup). */
static long huge_kb(void) {
  FILE* f = fopen("/proc/self/smaps_rollup", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb;
}

int main(int argc, char** argv) {
  const size_t bytes = (size_t)atol(argv[1]) << 20, lines = bytes / 64, reads = (size_t)atol(argv[2]);
  const int rounds = atoi(argv[3]);
  const size_t huge = (size_t)2 << 20;
  char* raw = mmap(NULL, bytes + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return 2;
  char* p = (char*)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
  madvise(p, bytes, MADV_HUGEPAGE);
  memset(p, 1, bytes);
  uint32_t* order = malloc(sizeof(uint32_t) * lines);
  if (!order) return 2;
  for (size_t i = 0; i < lines; i++) order[i] = (uint32_t)i;
  uint64_t s = 88172645463325252ull;  /* xorshift64, a fixed seed: the same cycle every run */
  for (size_t i = lines - 1; i > 0; i--) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    const size_t j = s % (i + 1);
    const uint32_t t = order[i]; order[i] = order[j]; order[j] = t;
  }
  for (size_t i = 0; i < lines; i++)
    *(char**)(p + (size_t)order[i] * 64) = p + (size_t)order[(i + 1) % lines] * 64;
  free(order);
  printf("%.4f\n", (double)huge_kb() * 1024.0 / (double)bytes);
  char** q = (char**)p;
  for (size_t i = 0; i < reads; i++) q = (char**)*q;  /* warm up: TLB, caches, page tables */
  for (int r = 0; r < rounds; r++) {
    const double a = now();
    for (size_t i = 0; i < reads; i++) q = (char**)*q;
    printf("%.2f\n", (now() - a) / (double)reads * 1e9);
  }
  return q == NULL;  /* keeps the chase from being optimized away */
}
"""


def compile_kernel(directory: Path) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("read_latency.py needs a C compiler (cc or gcc)")
    source, binary = directory / "chase.c", directory / "chase"
    source.write_text(KERNEL)
    subprocess.run([compiler, "-O2", "-o", str(binary), str(source)], check=True)
    return binary


def measure(binary: Path, size_mb: int, reads: int, repeats: int) -> dict[str, object]:
    out = subprocess.run(
        [str(binary), str(size_mb), str(reads), str(repeats)], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"the chase over {size_mb} MB failed: {out.stderr.strip() or out.returncode}")
    values = [float(v) for v in out.stdout.split()]
    rounds = values[1:]
    return {
        "size_mb": size_mb,
        "ns_per_read": round(statistics.median(rounds), 1),
        "rounds_ns": rounds,
        "huge_pages_share": round(values[0], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mb", default="32,128,256,512,1024,2048,4096", help="buffer sizes, MB")
    parser.add_argument("--reads", type=int, default=4_000_000, help="reads per round")
    parser.add_argument("--repeats", type=int, default=5, help="rounds per size (the median is reported)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes_mb.split(",")]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="neardup-chase-") as tmp:
        binary = compile_kernel(Path(tmp))
        results = []
        for size in sizes:
            results.append(measure(binary, size, args.reads, args.repeats))
            print(f"{size:>6} MB  {results[-1]['ns_per_read']} ns/read", file=sys.stderr, flush=True)
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    report = {
        "benchmark": "read_latency",
        "machine": {
            "cpu": cpu_model(),
            "neardup_commit": git_commit(),
            "transparent_hugepage": thp.read_text().strip() if thp.exists() else None,
        },
        "settings": {"reads_per_round": args.reads, "repeats": args.repeats},
        "sizes": results,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
