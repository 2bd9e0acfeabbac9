#!/usr/bin/env python3
"""PyTorch's NCCL process group on whatever libnccl.so.2 the process loaded.

Run by tests/gpu/torch-dropin.sh, once with Braid's libnccl.so.2 preloaded
and once with PyTorch's own NCCL. Each rank is a process spawned here, on GPU
rank % (visible GPUs): one GPU each, or, with more ranks than GPUs, sharing
(Braid only, with BRAID_SHARE_GPU=1: NCCL refuses two ranks on one GPU); every check compares against values computed independently on
the host, prints one line per check (PASS, FAIL with the reason, or SKIP with
why) and the run ends with "N passed, M failed, K skipped".

  python3 torch_dropin.py --out DIR [--world N]     all the checks
  python3 torch_dropin.py --out DIR --abrupt-exit [--world 2]
                                                    rank 1 dies mid-run; rank 0
                                                    must get an error, not hang

The losses of the DistributedDataParallel steps go to DIR/ddp_losses.json so
the shell script can compare the Braid run with the NCCL run.
"""
import argparse
import datetime
import json
import os
import socket
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loaded_nccl():
    """Every libnccl the process mapped (which library ran, and whether another one came along)."""
    paths = []
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()[-1]
            if "libnccl" in p and p not in paths:
                paths.append(p)
    return ", ".join(paths) or "none"


class Checks:
    def __init__(self, rank, world):
        self.rank, self.world = rank, world
        self.results = []  # (status, name, detail)

    def run(self, name, fn, min_world=1):
        if self.world < min_world:
            self.results.append(("SKIP", name, f"needs {min_world} ranks, have {self.world}"))
            return
        try:
            detail = fn()
            self.results.append(("PASS", name, detail or ""))
        except Exception as e:  # one failed check must not stop the others
            msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            self.results.append(("FAIL", name, msg))


def expect_equal(got, want, what):
    got = got.detach().to("cpu")
    want = want.to("cpu")
    if got.dtype != want.dtype:
        got = got.to(want.dtype)
    if got.is_floating_point():
        if not torch.allclose(got.double(), want.double(), rtol=2e-2, atol=1e-2):
            diff = (got.double() - want.double()).abs().max().item()
            raise AssertionError(f"{what}: max |diff| {diff} (got {got.flatten()[:4].tolist()}, "
                                 f"want {want.flatten()[:4].tolist()})")
    elif not torch.equal(got, want):
        raise AssertionError(f"{what}: got {got.flatten()[:4].tolist()}, want {want.flatten()[:4].tolist()}")


def rank_values(r, n, dtype):
    """Rank r's contribution: small values that every type and op represent exactly."""
    base = torch.arange(n, dtype=torch.float64) % 3 + 1 + r
    return base.to(dtype)


def reference_reduce(op, world, n, dtype):
    parts = [rank_values(r, n, torch.float64) for r in range(world)]
    acc = parts[0].clone()
    for p in parts[1:]:
        if op == "sum" or op == "avg":
            acc = acc + p
        elif op == "product":
            acc = acc * p
        elif op == "max":
            acc = torch.maximum(acc, p)
        elif op == "min":
            acc = torch.minimum(acc, p)
    if op == "avg":
        acc = acc / world
    return acc.to(dtype) if dtype not in (torch.float8_e4m3fn, torch.float8_e5m2) else acc


OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "product": dist.ReduceOp.PRODUCT,
}


def all_checks(c, rank, world, dev, out_dir):
    n = 1031  # odd, not a multiple of any vector width

    # all_reduce: every op on the types PyTorch maps to NCCL types.
    types = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64]
    for dtype in types:
        for op in OPS:
            if op == "avg" and not dtype.is_floating_point:
                continue  # PyTorch refuses AVG on integers before reaching NCCL

            def f(dtype=dtype, op=op):
                x = rank_values(rank, n, dtype).to(dev)
                dist.all_reduce(x, op=OPS[op])
                expect_equal(x, reference_reduce(op, world, n, dtype), f"all_reduce {op}")

            c.run(f"all_reduce {op} {str(dtype).replace('torch.', '')}", f)
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        def f8(dtype=dtype):
            x = rank_values(rank, n, torch.float32).to(dtype).to(dev)
            try:
                dist.all_reduce(x, op=dist.ReduceOp.SUM)
            except (RuntimeError, ValueError, TypeError) as e:
                if "not supported" in str(e).lower() or "unsupported" in str(e).lower():
                    return f"PyTorch refuses it before NCCL: {str(e).splitlines()[0][:120]}"
                raise
            expect_equal(x.float(), reference_reduce("sum", world, n, torch.float32), "fp8 sum")

        c.run(f"all_reduce sum {str(dtype).replace('torch.', '')}", f8)

    def broadcast():
        for root in range(world):
            x = rank_values(rank, n, torch.float32).to(dev)
            dist.broadcast(x, src=root)
            expect_equal(x, rank_values(root, n, torch.float32), f"broadcast root {root}")

    c.run("broadcast", broadcast)

    def all_gather_into_tensor():
        x = rank_values(rank, n, torch.bfloat16).to(dev)
        out = torch.empty(world * n, dtype=torch.bfloat16, device=dev)
        dist.all_gather_into_tensor(out, x)
        expect_equal(out, torch.cat([rank_values(r, n, torch.bfloat16) for r in range(world)]), "gathered")

    c.run("all_gather_into_tensor", all_gather_into_tensor)

    def all_gather_list():
        x = rank_values(rank, n, torch.float32).to(dev)
        outs = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(outs, x)
        for r in range(world):
            expect_equal(outs[r], rank_values(r, n, torch.float32), f"all_gather[{r}]")

    c.run("all_gather (list)", all_gather_list)

    def reduce_scatter_tensor():
        full = torch.cat([rank_values(rank + 10 * k, n, torch.float32) for k in range(world)]).to(dev)
        out = torch.empty(n, dtype=torch.float32, device=dev)
        dist.reduce_scatter_tensor(out, full, op=dist.ReduceOp.SUM)
        want = sum(rank_values(r + 10 * rank, n, torch.float64) for r in range(world))
        expect_equal(out, want.float(), "reduce_scatter block")

    c.run("reduce_scatter_tensor", reduce_scatter_tensor)

    def reduce():
        for root in range(world):
            x = rank_values(rank, n, torch.float32).to(dev)
            dist.reduce(x, dst=root, op=dist.ReduceOp.MAX)
            if rank == root:
                expect_equal(x, reference_reduce("max", world, n, torch.float32), f"reduce root {root}")

    c.run("reduce", reduce)

    def all_to_all_even():
        chunk = 257
        x = torch.cat([torch.full((chunk,), float(100 * rank + d)) for d in range(world)]).to(dev)
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x)
        want = torch.cat([torch.full((chunk,), float(100 * s + rank)) for s in range(world)])
        expect_equal(out, want, "all_to_all_single even")

    c.run("all_to_all_single even", all_to_all_even)

    def all_to_all_uneven():
        # rank s sends (s + d + 1) * 3 elements to rank d
        sizes_in = [(rank + d + 1) * 3 for d in range(world)]
        sizes_out = [(s + rank + 1) * 3 for s in range(world)]
        x = torch.cat([torch.full((sizes_in[d],), float(100 * rank + d)) for d in range(world)]).to(dev)
        out = torch.empty(sum(sizes_out), device=dev)
        dist.all_to_all_single(out, x, output_split_sizes=sizes_out, input_split_sizes=sizes_in)
        want = torch.cat([torch.full((sizes_out[s],), float(100 * s + rank)) for s in range(world)])
        expect_equal(out, want, "all_to_all_single uneven")

    c.run("all_to_all_single uneven", all_to_all_uneven)

    def send_recv():
        peer = 1 - rank
        x = rank_values(rank, n, torch.float32).to(dev)
        y = torch.empty_like(x)
        if rank == 0:
            dist.send(x, dst=peer)
            dist.recv(y, src=peer)
        else:
            dist.recv(y, src=peer)
            dist.send(x, dst=peer)
        expect_equal(y, rank_values(peer, n, torch.float32), "received")

    c.run("send/recv", send_recv, min_world=2)

    def batch_isend_irecv():
        right, left = (rank + 1) % world, (rank - 1) % world
        x = rank_values(rank, n, torch.float32).to(dev)
        y = torch.empty_like(x)
        ops = [dist.P2POp(dist.isend, x, right), dist.P2POp(dist.irecv, y, left)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        expect_equal(y, rank_values(left, n, torch.float32), "ring neighbour's data")

    c.run("batch_isend_irecv", batch_isend_irecv, min_world=2)

    def barrier():
        dist.barrier(device_ids=[dev.index])

    c.run("barrier", barrier)

    def new_group():
        g = dist.new_group(ranks=list(range(world)))
        x = torch.ones(n, device=dev) * (rank + 1)
        dist.all_reduce(x, group=g)
        expect_equal(x, torch.full((n,), float(sum(range(1, world + 1)))), "new_group all_reduce")
        if world >= 2:
            solo = dist.new_group(ranks=[0])
            if rank == 0:
                y = torch.ones(n, device=dev) * 5
                dist.all_reduce(y, group=solo)
                expect_equal(y, torch.full((n,), 5.0), "one-rank group")

    c.run("new_group", new_group)

    def split_group():
        if not hasattr(dist, "split_group"):
            raise AssertionError("this PyTorch has no torch.distributed.split_group")
        halves = [[r] for r in range(world)] if world > 1 else [[0]]
        g = dist.split_group(split_ranks=halves)
        x = torch.ones(n, device=dev) * (rank + 3)
        dist.all_reduce(x, group=g)
        expect_equal(x, torch.full((n,), float(rank + 3)), "split_group all_reduce")
        whole = dist.split_group(split_ranks=[list(range(world))])
        y = torch.ones(n, device=dev)
        dist.all_reduce(y, group=whole)
        expect_equal(y, torch.full((n,), float(world)), "split_group (all ranks) all_reduce")

    c.run("split_group (ncclCommSplit)", split_group)

    def async_ops():
        xs = [rank_values(rank + k, n, torch.float32).to(dev) for k in range(4)]
        works = [dist.all_reduce(x, async_op=True) for x in xs]
        for w in works:
            w.wait()
        torch.cuda.current_stream().synchronize()
        for k, x in enumerate(xs):
            want = sum(rank_values(r + k, n, torch.float64) for r in range(world))
            expect_equal(x, want.float(), f"async all_reduce {k}")

    c.run("async ops + wait()", async_ops)

    def coalesced():
        xs = [torch.full((n + k,), float(rank + k), device=dev) for k in range(3)]
        with dist._coalescing_manager(async_ops=True) as cm:
            for x in xs:
                dist.all_reduce(x)
        cm.wait()
        for k, x in enumerate(xs):
            expect_equal(x, torch.full((n + k,), float(sum(r + k for r in range(world)))), "coalesced")

    c.run("coalesced all_reduce (group)", coalesced)

    def graph_capture():
        s = torch.cuda.Stream()
        x = torch.zeros(n, device=dev)
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):  # warm up outside the capture
                dist.all_reduce(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dist.all_reduce(x)
        for k in range(3):
            x.fill_(float(rank + k))
            g.replay()
            torch.cuda.synchronize()
            expect_equal(x, torch.full((n,), float(sum(r + k for r in range(world)))), f"replay {k}")

    c.run("CUDA graph capture of all_reduce", graph_capture)

    def ddp():
        from torch.nn.parallel import DistributedDataParallel as DDP

        torch.manual_seed(1234)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(dev)
        reference = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(dev)
        reference.load_state_dict(model.state_dict())
        ddp_model = DDP(model, device_ids=[dev.index])
        opt = torch.optim.SGD(ddp_model.parameters(), lr=0.05)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05)
        gen = torch.Generator().manual_seed(99)
        batches = [(torch.randn(world, 8, 32, generator=gen), torch.randn(world, 8, 4, generator=gen))
                   for _ in range(5)]
        losses = []
        for xb, yb in batches:
            x, y = xb[rank].to(dev), yb[rank].to(dev)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp_model(x), y)
            loss.backward()
            opt.step()
            # the same step without DDP: the mean of every rank's gradient
            ref_opt.zero_grad()
            ref_loss = sum(torch.nn.functional.mse_loss(reference(xb[r].to(dev)), yb[r].to(dev))
                           for r in range(world)) / world
            ref_loss.backward()
            ref_opt.step()
            total = loss.detach().clone()
            dist.all_reduce(total)
            losses.append(total.item() / world)
        for p, q in zip(model.parameters(), reference.parameters()):
            if not torch.allclose(p, q, rtol=1e-4, atol=1e-5):
                raise AssertionError("DDP parameters differ from the single-process reference")
        if rank == 0:
            with open(os.path.join(out_dir, "ddp_losses.json"), "w") as f:
                json.dump(losses, f)
        return "losses " + " ".join(f"{l:.6f}" for l in losses)

    c.run("DistributedDataParallel 5 steps", ddp)


def worker(rank, world, port, out_dir, mode):
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    timeout = datetime.timedelta(seconds=30 if mode == "abrupt" else 120)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timeout, device_id=dev)
    if mode == "abrupt":
        x = torch.ones(1 << 20, device=dev)
        dist.all_reduce(x)
        torch.cuda.synchronize()
        if rank == 1:
            os._exit(0)  # no destroy, no goodbye: the peer must find out by itself
        start = time.time()
        try:
            for _ in range(1000):
                dist.all_reduce(x)
                torch.cuda.synchronize()
            result = {"error": None}
        except Exception as e:
            result = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        result["seconds"] = time.time() - start
        with open(os.path.join(out_dir, "abrupt.json"), "w") as f:
            json.dump(result, f)
        os._exit(0)

    c = Checks(rank, world)
    c.results.append(("PASS", "library", loaded_nccl()))
    all_checks(c, rank, world, dev, out_dir)
    try:
        dist.destroy_process_group()
        c.results.append(("PASS", "destroy_process_group", ""))
    except Exception as e:
        c.results.append(("FAIL", "destroy_process_group", str(e)[:300]))
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(c.results, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--world", type=int, default=min(2, torch.cuda.device_count()))
    ap.add_argument("--abrupt-exit", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.abrupt_exit:
        if a.world < 2:
            print("SKIP abrupt exit of a rank (needs 2 ranks: 2 GPUs, or --world 2 with BRAID_SHARE_GPU=1)")
            return 0
        ctx = mp.get_context("spawn")
        port = free_port()
        procs = [ctx.Process(target=worker, args=(r, 2, port, a.out, "abrupt")) for r in range(2)]
        start = time.time()
        for p in procs:
            p.start()
        procs[0].join(timeout=180)
        hung = procs[0].is_alive()
        for p in procs:
            if p.is_alive():
                p.kill()
        elapsed = time.time() - start
        path = os.path.join(a.out, "abrupt.json")
        res = json.load(open(path)) if os.path.exists(path) else None
        # PyTorch's watchdog may also end the survivor itself (exit code != 0): an error, not a hang.
        ok = not hung and ((res is not None and res["error"]) or procs[0].exitcode != 0)
        what = (res or {}).get("error") or f"survivor exited with code {procs[0].exitcode}"
        print(f"{'PASS' if ok else 'FAIL'} abrupt exit of rank 1: rank 0 "
              f"{'hung' if hung else 'got: ' + str(what)} after {elapsed:.1f} s")
        return 0 if ok else 1

    if a.world < 1:
        print("no GPU visible")
        return 1
    port = free_port()
    mp.start_processes(worker, args=(a.world, port, a.out, "checks"), nprocs=a.world, start_method="spawn")
    results = json.load(open(os.path.join(a.out, "rank0.json")))
    failed_elsewhere = {}
    for r in range(1, a.world):
        for status, name, detail in json.load(open(os.path.join(a.out, f"rank{r}.json"))):
            if status == "FAIL":
                failed_elsewhere.setdefault(name, f"rank {r}: {detail}")
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    for status, name, detail in results:
        if status == "PASS" and name in failed_elsewhere:
            status, detail = "FAIL", failed_elsewhere[name]
        counts[status] += 1
        print(f"{status} {name}" + (f": {detail}" if detail else ""))
    print(f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped (world size {a.world})")
    return 0 if counts["FAIL"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
