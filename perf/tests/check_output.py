#!/usr/bin/env python3
"""Runs a perf program and checks its output against nccl-tests' format.

    check_output.py [--ranks N] [--rows N] [--json FILE] -- program args...

Passes when the program exits 0, prints nccl-tests' header and column titles,
at least one row whose #wrong fields are all 0 (or N/A), lists N ranks under
"# Using devices", and ends with "# Out of bounds values : 0 OK" and an
"# Avg bus bandwidth" line; with --rows N, exactly N result rows; with --json,
FILE must hold the same rows.
"""
import argparse
import json
import re
import subprocess
import sys

HEADER = [
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         ",
]
NUM = r"\s*[0-9.]+"
MEASURE = r"(\s+[0-9.]+|\s+N/A)(\s+[0-9.]+|\s+N/A)(\s+[0-9.]+|\s+N/A)\s+(\d+|N/A)"
ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)" + MEASURE + MEASURE + "$")


def fail(msg, out):
    sys.stderr.write(out)
    sys.stderr.write("\ncheck_output: FAIL: %s\n" % msg)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=0)
    ap.add_argument("--rows", type=int, default=0)
    ap.add_argument("--json")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    out = proc.stdout
    print(out)
    if proc.returncode != 0:
        fail("exit status %d" % proc.returncode, "")
    lines = out.splitlines()
    if not any(l.startswith("# Collective test starting: ") for l in lines):
        fail("no '# Collective test starting' line", "")
    for h in HEADER:
        if h not in lines:
            fail("column title line missing: %r" % h, "")
    ranks = [l for l in lines if re.match(r"^#  Rank +\d+ Group +\d+ Pid +\d+ on .* device +-?\d+ ", l)]
    if args.ranks and len(ranks) != args.ranks:
        fail("%d ranks listed, expected %d" % (len(ranks), args.ranks), "")
    # Whole lines ("... device N [id] description"), each rank once.
    for l in ranks:
        if not re.match(r"^#  Rank +\d+ Group +\d+ Pid +\d+ on .* device +-?\d+ \[[^]]*\] \S.*$", l):
            fail("device line cut: %r" % l, "")
    listed = sorted(int(l.split()[2]) for l in ranks)
    if args.ranks and listed != list(range(args.ranks)):
        fail("ranks listed %s, expected 0..%d" % (listed, args.ranks - 1), "")
    rows = []
    for l in lines:
        if l.startswith("#") or not l.strip():
            continue
        m = ROW.match(l)
        if not m:
            if re.match(r"^\s+\d", l):
                fail("malformed row: %r" % l, "")
            continue  # library log lines
        # nccl-tests: 52 characters, then per half 25 and #wrong in 8 ("%6g") or N/A in 7.
        width = 52 + sum(25 + (7 if w == "N/A" else 8) for w in (m.group(9), m.group(13)))
        if len(l) != width and len(m.group(1)) <= 12:
            fail("row width %d, nccl-tests' is %d (118, less 1 per N/A): %r" % (len(l), width, l), "")
        for wrong in (m.group(9), m.group(13)):
            if wrong not in ("0", "N/A"):
                fail("#wrong is %s: %r" % (wrong, l), "")
        rows.append(m)
    if not rows:
        fail("no result rows", "")
    if args.rows and len(rows) != args.rows:
        fail("%d result rows, expected %d" % (len(rows), args.rows), "")
    if "# Out of bounds values : 0 OK" not in lines:
        fail("no '# Out of bounds values : 0 OK' line", "")
    if not any(re.match(r"^# Avg bus bandwidth    : [0-9.e+-]+ $", l) for l in lines):
        fail("no '# Avg bus bandwidth' line", "")
    if args.json:
        with open(args.json) as f:
            doc = json.load(f)
        if len(doc["results"]) != len(rows):
            fail("JSON holds %d rows, output %d" % (len(doc["results"]), len(rows)), "")
        for r, m in zip(doc["results"], rows):
            if r["size"] != int(m.group(1)) or r["out_of_place"]["wrong"] not in (0, None):
                fail("JSON row %r does not match the output" % r, "")
        for key in ("program", "library", "nranks", "avg_busbw", "out_of_bounds"):
            if key not in doc:
                fail("JSON lacks %r" % key, "")
    print("check_output: OK (%d rows)" % len(rows))


if __name__ == "__main__":
    main()
