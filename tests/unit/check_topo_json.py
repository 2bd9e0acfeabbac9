#!/usr/bin/env python3
"""Runs braid-topo --json on a topology XML and checks the schedule it prints.

usage: check_topo_json.py BRAID_TOPO XML [--nodes N] [--disjoint]
Checks: one GPU entry per GPU of the file (document order) per node, with
index = position + node * GPUs per node; every ring visits every GPU once;
every channel's tree has one root and parents and children agree; with
--disjoint no directed link is used by two rings.
"""
import json
import subprocess
import sys
import xml.etree.ElementTree as ET


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    args = sys.argv[1:]
    tool, xml_path = args[0], args[1]
    nodes = int(args[args.index("--nodes") + 1]) if "--nodes" in args else 1
    out = subprocess.run([tool, "--json", "--xml", xml_path, "--nodes", str(nodes)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        fail(f"braid-topo exited {out.returncode}: {out.stderr}")
    doc = json.loads(out.stdout)

    # GPUs of the file in document order: the busid of each <gpu>'s parent <pci>.
    busids = []
    for pci in ET.parse(xml_path).getroot().iter("pci"):
        if pci.find("gpu") is not None:
            busids.append(pci.get("busid").lower())
    per_node = len(busids)
    total = per_node * nodes
    gpus = doc["gpus"]
    if len(gpus) != total:
        fail(f"{len(gpus)} GPUs listed, expected {total}")
    for i, g in enumerate(gpus):
        if g["index"] != i or g["node"] != i // per_node or g["busid"] != busids[i % per_node]:
            fail(f"GPU entry {i} is {g}")

    rings, trees = doc["rings"], doc["trees"]
    if not rings or len(rings) != doc["channels"] or len(trees) != len(rings):
        fail(f"{len(rings)} rings, {len(trees)} trees for {doc['channels']} channels")
    for ring in rings:
        if sorted(ring) != list(range(total)):
            fail(f"ring {ring} does not visit every GPU once")
    for c, tree in enumerate(trees):
        if len(tree) != total:
            fail(f"tree {c} has {len(tree)} entries")
        roots = [g for g, t in enumerate(tree) if t["parent"] == -1]
        if len(roots) != 1:
            fail(f"tree {c} has roots {roots}")
        for g, t in enumerate(tree):
            for child in t["children"]:
                if tree[child]["parent"] != g:
                    fail(f"tree {c}: {child} is a child of {g} but its parent is {tree[child]['parent']}")
            seen, at = set(), g
            while tree[at]["parent"] != -1:
                if at in seen:
                    fail(f"tree {c} has a cycle through {at}")
                seen.add(at)
                at = tree[at]["parent"]
    if "--disjoint" in args:
        used = set()
        for ring in rings:
            for a, b in zip(ring, ring[1:] + ring[:1]):
                if (a, b) in used:
                    fail(f"directed link {a}->{b} used by two rings")
                used.add((a, b))
    if doc["busbw"]["ring"] <= 0:
        fail("no expected bus bandwidth")
    print(f"ok: {total} GPUs, {len(rings)} channels, ring busbw {doc['busbw']['ring']} GB/s")


if __name__ == "__main__":
    main()
