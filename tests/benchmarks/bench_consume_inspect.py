"""On-demand benchmark of `txlog consume` and `txlog inspect --print-data-log` (not a pytest module).

Run: python tests/benchmarks/bench_consume_inspect.py [--records 874000] [--batch-kb 64] [--reps 3]
     [--trees .,/tmp/other-checkout] [--dir DIR] [--rows]

One partition holds one segment of ~100 MB: `--records` records of a 10-byte key and a
100-byte printable value, in ~64 KB uncompressed batches, written straight from batches
(fsync skipped: setup only). Each repetition then runs, interleaved:

* the raw read: the segment read in 1 MiB chunks and written to /dev/null, in-process
  (what the disk and page cache cost: the floor of any reader);
* the C floor: a small C program (compiled here with `cc -O2`; skipped when there is no
  compiler) that walks the batches, decodes every record's varint framing and writes each
  value and a newline through a 1 MiB stdio buffer: the bytes `txlog consume` prints, at C
  speed, without CRC checks;
* for every tree in `--trees` (default: this checkout), the real CLI as a subprocess with
  stdout on /dev/null: `txlog consume -t T` (read_committed, Kafka's text formatter) and
  `txlog inspect --print-data-log SEGMENT`. `--trees` runs the same script against another
  checkout (for example the code before a change) in the same sitting;
* with `--rows`, also `txlog consume -t T --output jsonl`, `csv`, `json` and `table`, and
  `--timestamp-format iso` with jsonl and with Kafka's text formatter printing timestamps
  (`--property print.timestamp=true`), kcat's `-J` lines and a `-f` format, and the text output with
  kcat's `-o e@MS` (a stop no record reaches), for every tree (no target: their before/after).

The first (cold) repetition writes every output to a file instead of /dev/null, and the
script checks that each tree's consume output has the C floor's bytes and that the trees
agree with each other byte for byte; that repetition is then dropped, and the median of
the rest is reported. The CLI rows include the interpreter's start and imports, printed
apart as `startup` (`python -c "import cli.main"`). Every CLI subprocess and the `startup` row
run with bytecode caches whatever the caller's environment says (PYTHONDONTWRITEBYTECODE is
dropped: benchutil.cli_env says why); the cold repetition writes them. Targets (issue 13): consume within 3x
of the C floor; inspect --print-data-log of the 100 MB segment <= 1.5 s.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchutil import ROOT, MiB, Sample, after_cold, cli_env, fsync_skipped, median_after_cold, scratch_dir, spread

from storage.records import build_batch
from storage.store import Store

TOPIC = "bench"
TS0 = 1_700_000_000_000
KEY_BYTES, VALUE_BYTES = 10, 100
RECORD_BYTES = 119  # one record's bytes in a batch (length varint, framing, key, value)
CONSUME_VS_FLOOR_TARGET = 3.0  # consume's time at most this many times the C floor's
INSPECT_TARGET_S = 1.5
# --rows: consume's other outputs, by a label (also the name of its output file) and its arguments.
ROW_VARIANTS = {
    "jsonl": ["--output", "jsonl"],
    "csv": ["--output", "csv"],
    "json": ["--output", "json"],
    "table": ["--output", "table"],
    "jsonl-iso": ["--output", "jsonl", "--timestamp-format", "iso"],
    "text-iso": ["--property", "print.timestamp=true", "--timestamp-format", "iso"],
    "kcat-json": ["-J"],
    "kcat-f": ["-f", "%t %p %o %k %s %h %T\\n"],
    "text-e@": ["-o", f"e@{2**63 - 1}"],  # kcat's stop at a timestamp: every record checked, none reaches it
}

# The C floor: kafka-formats.md §1 batch framing and §2 record framing, values out, bounds-checked.
C_FLOOR = r"""
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
static const uint8_t *p, *e;
static int64_t varint(void) {
    uint64_t v = 0; int shift = 0;
    while (p < e && shift < 64) { uint8_t b = *p++; v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return (int64_t)((v >> 1) ^ -(v & 1)); shift += 7; }
    fprintf(stderr, "bad varint\n"); exit(2);
}
static void need(int64_t n) { if (n < 0 || n > e - p) { fprintf(stderr, "truncated\n"); exit(2); } }
int main(int argc, char **argv) {
    FILE *f = fopen(argv[1], "rb"); if (!f) return 1;
    fseek(f, 0, SEEK_END); long size = ftell(f); fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(size); if (fread(buf, 1, size, f) != (size_t)size) return 1;
    static char out[1 << 20]; setvbuf(stdout, out, _IOFBF, sizeof out);
    long pos = 0; long long n = 0;
    while (pos + 61 <= size) {
        const uint8_t *b = buf + pos;
        int32_t len = (int32_t)((uint32_t)b[8] << 24 | (uint32_t)b[9] << 16 | (uint32_t)b[10] << 8 | b[11]);
        if (len < 49 || pos + 12 + len > size) break;
        uint16_t attrs = (uint16_t)(b[21] << 8 | b[22]);
        int32_t count = (int32_t)((uint32_t)b[57] << 24 | (uint32_t)b[58] << 16 | (uint32_t)b[59] << 8 | b[60]);
        if ((attrs & 0x07) || (attrs & 0x20)) { pos += 12 + len; continue; }  /* compressed or control */
        p = b + 61; e = b + 12 + len;
        for (int32_t i = 0; i < count; i++) {
            int64_t rlen = varint(); need(rlen); const uint8_t *end = p + rlen;
            p++; varint(); varint();
            int64_t klen = varint(); if (klen > 0) { need(klen); p += klen; }
            int64_t vlen = varint();
            if (vlen < 0) fwrite("null", 1, 4, stdout); else { need(vlen); fwrite(p, 1, vlen, stdout); p += vlen; }
            fputc('\n', stdout);
            p = end; n++;
        }
        pos += 12 + len;
    }
    fflush(stdout);
    fprintf(stderr, "%lld\n", n);
    return 0;
}
"""


# ---- the store ---------------------------------------------------------------------------------------


def build_store(root: str, records: int, batch_kb: int) -> str:
    """One partition of plain batches; returns the path of its (only) segment."""
    per_batch = max(1, (batch_kb * 1024 - 61) // RECORD_BYTES)
    with fsync_skipped():  # setup only: benchutil.fsync_skipped says why
        store = Store.open(root)
        try:
            store.create_topic(TOPIC, 1)
            log = store.partition(TOPIC, 0)
            written = 0
            while written < records:
                n = min(per_batch, records - written)
                batch = [
                    (
                        f"key-{written + i:06d}".encode()[-KEY_BYTES:],
                        os.urandom(VALUE_BYTES // 2).hex().encode(),
                        None,
                        TS0 + (written + i) // 64,
                    )
                    for i in range(n)
                ]
                log.append(build_batch(batch))
                written += n
            assert log.log_end_offset == records
        finally:
            store.close()
    segments = sorted(str(p) for p in Path(root, f"{TOPIC}-0").glob("*.log"))
    assert len(segments) == 1, segments
    return segments[0]


def compile_floor(workdir: str) -> str | None:
    """The C floor's binary, or None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    src, exe = os.path.join(workdir, "floor.c"), os.path.join(workdir, "floor")
    Path(src).write_text(C_FLOOR)
    subprocess.run([cc, "-O2", "-o", exe, src], check=True)
    return exe


# ---- the variants ------------------------------------------------------------------------------------


def raw_read(path: str) -> Sample:
    """The segment read and written to /dev/null in 1 MiB pieces, in-process."""
    cpu, start = time.process_time(), time.perf_counter()
    with open(path, "rb", buffering=0) as src, open(os.devnull, "wb", buffering=0) as sink:
        while chunk := src.read(MiB):
            sink.write(chunk)
    return Sample(time.perf_counter() - start, time.process_time() - cpu)


def run(cmd: list[str], out_path: str | None, cwd: str | None = None, env: dict | None = None) -> Sample:
    """Wall time of a subprocess, stdout to `out_path` (or /dev/null); CPU is the child's."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # exact CPU: os.times counts 10 ms ticks
    start = time.perf_counter()
    with open(out_path or os.devnull, "wb") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, cwd=cwd, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    return Sample(wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))


def tree_env(tree: str) -> dict:
    env = cli_env(tree)  # with bytecode caches, as a user's interpreter has them
    env.pop("TXLOG_DATA_DIR", None)
    return env


def cli(tree: str, *args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from cli.main import app; sys.argv[0] = 'txlog'; app()", *args]


def digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(MiB):
            h.update(chunk)
    return h.hexdigest()


# ---- main ----------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=874_000)
    ap.add_argument("--batch-kb", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions after the cold one")
    ap.add_argument("--trees", default=str(ROOT), help="comma-separated checkouts to run the CLI from")
    ap.add_argument("--dir", default=None, help="scratch parent (default <repo>/.bench-tmp)")
    ap.add_argument("--rows", action="store_true", help="also time consume's other outputs and ISO timestamps")
    args = ap.parse_args()
    trees = [os.path.abspath(t) for t in args.trees.split(",") if t]
    names = [os.path.basename(t.rstrip("/")) or t for t in trees]
    if len(set(names)) < len(names):
        names = trees

    row_outputs = tuple(ROW_VARIANTS) if args.rows else ()
    with scratch_dir(args.dir, "consume-inspect-") as workdir:
        root = os.path.join(workdir, "store")
        t0 = time.perf_counter()
        segment = build_store(root, args.records, args.batch_kb)
        size = os.path.getsize(segment)
        print(
            f"store: {args.records} records, one segment of {size / MiB:.1f} MiB "
            f"(built in {time.perf_counter() - t0:.1f} s)"
        )
        floor = compile_floor(workdir)
        if floor is None:
            print("no C compiler: the C floor is skipped")

        variants: dict[str, list[Sample]] = {"raw read": []}
        if floor:
            variants["C floor"] = []
        for name in names:
            variants[f"startup [{name}]"] = []
            variants[f"consume [{name}]"] = []
            variants[f"inspect --print-data-log [{name}]"] = []
            for output in row_outputs:
                variants[f"consume {output} [{name}]"] = []
        digests: dict[str, tuple[str, ...]] = {}

        for rep in range(args.reps + 1):
            cold = rep == 0

            def out(label: str, cold: bool = cold) -> str | None:
                return os.path.join(workdir, f"{label}.out") if cold else None

            variants["raw read"].append(raw_read(segment))
            if floor:
                variants["C floor"].append(run([floor, segment], out("floor")))
            for tree, name in zip(trees, names, strict=True):
                env = tree_env(tree)
                variants[f"startup [{name}]"].append(run([sys.executable, "-c", "import cli.main"], None, tree, env))
                variants[f"consume [{name}]"].append(
                    run(
                        cli(tree, "--data-dir", root, "consume", "-t", TOPIC), out(f"consume-{len(digests)}"), tree, env
                    )
                )
                variants[f"inspect --print-data-log [{name}]"].append(
                    run(cli(tree, "inspect", "--print-data-log", segment), out(f"inspect-{len(digests)}"), tree, env)
                )
                for output in row_outputs:
                    variants[f"consume {output} [{name}]"].append(
                        run(
                            cli(tree, "--data-dir", root, "consume", "-t", TOPIC, *ROW_VARIANTS[output]),
                            out(f"{output}-{len(digests)}"),
                            tree,
                            env,
                        )
                    )
                if cold:
                    i = len(digests)
                    kinds = ("consume", "inspect", *row_outputs)
                    digests[name] = tuple(digest(out(f"{kind}-{i}")) for kind in kinds)
                    for kind in kinds:
                        os.remove(out(f"{kind}-{i}"))
            if cold and floor:
                floor_digest = digest(out("floor"))
                os.remove(out("floor"))
                for name, (consume_d, *_) in digests.items():
                    if consume_d != floor_digest:
                        print(f"WARNING: consume output of {name} differs from the C floor's")
            if cold and len(set(digests.values())) > 1:
                print(f"WARNING: the trees' outputs differ: {digests}")
            elif cold and len(digests) > 1:
                print("outputs: identical across trees")

        print(
            f"\n{'variant':44} {'median s':>9} {'min..max':>15} {'CPU s':>7} {'CPU min..max':>15} "
            f"{'MiB/s':>8} {'ns/rec':>7}"
        )
        medians = {}
        for label, samples in variants.items():
            wall = median_after_cold(samples)
            cpu = median_after_cold(samples, "cpu")
            lo, hi = spread(samples)
            cpus_seen = [sample.cpu for sample in after_cold(samples)]
            medians[label] = wall
            rate = "" if label.startswith("startup") else f"{size / MiB / wall:8.0f} {wall / args.records * 1e9:7.0f}"
            cpu_lo, cpu_hi = min(cpus_seen), max(cpus_seen)
            print(f"{label:44} {wall:9.3f} {lo:7.3f}..{hi:<7.3f} {cpu:7.3f} {cpu_lo:7.3f}..{cpu_hi:<7.3f} {rate}")

        cpus = {label: median_after_cold(samples, "cpu") for label, samples in variants.items()}
        for kind, m in (("wall", medians), ("CPU", cpus)):
            # On a loaded machine wall time is mostly waiting for a core: the CPU lines say what the code costs.
            raw = m["raw read"]
            print(f"\nratios (median {kind}; first of {args.reps + 1} repetitions dropped)")
            for name in names:
                consume, inspect = m[f"consume [{name}]"], m[f"inspect --print-data-log [{name}]"]
                if raw > 0:
                    print(
                        f"[{name}] consume / raw read {consume / raw:6.1f}x   inspect / raw read {inspect / raw:6.1f}x"
                    )
                if floor and m["C floor"] > 0:
                    ratio = consume / m["C floor"]
                    ok = "ok" if ratio <= CONSUME_VS_FLOOR_TARGET else "MISSED"
                    print(f"[{name}] consume / C floor {ratio:6.1f}x (target <= {CONSUME_VS_FLOOR_TARGET}x: {ok})")
                ok = "ok" if inspect <= INSPECT_TARGET_S else "MISSED"
                print(
                    f"[{name}] inspect --print-data-log {inspect:.2f} s {kind} (target <= {INSPECT_TARGET_S} s: {ok})"
                )


if __name__ == "__main__":
    main()
