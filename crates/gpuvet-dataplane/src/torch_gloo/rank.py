"""One rank of gpuvet's `pytorch_gloo_2` engine, run by a gpuvet agent with the node's
own Python, never by hand.

Input: one JSON argument. `{"op": "probe"}` imports torch and reports its version;
`{"op": "all_reduce", ...}` joins a Gloo group through a TCPStore and times
all-reduces. Output: JSON lines on stdout. Rank 0 prints `{"port": N}` as soon as its
store listens (the agent passes N to the other ranks), then every rank prints
`{"result": {...}}`. Any failure is a traceback on stderr and a non-zero exit.
"""

import json
import math
import sys
import time
import warnings
from datetime import timedelta

# torch warns on import when numpy is missing; Gloo does not need numpy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")


def emit(message):
    print(json.dumps(message), flush=True)


def probe():
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        raise SystemExit("torch.distributed is not available in this torch build")
    if not dist.is_gloo_available():
        raise SystemExit("torch.distributed has no Gloo backend in this torch build")
    emit({"torch": torch.__version__})


def timed(dist, tensor, iterations):
    seconds = []
    for _ in range(iterations):
        start = time.perf_counter()
        dist.all_reduce(tensor)
        seconds.append(max(time.perf_counter() - start, 1e-9))
    return seconds


def agreed_iterations(torch, dist, args, tensor, deadline):
    """Every rank must run the same count: each proposes one from its own warm-up, and
    the smallest wins (the same rule as gpuvet's built-in engine)."""
    warm_up = timed(dist, tensor, max(args["warmup_iterations"], 1))
    # The first iteration pays for connection warm-up; the others tell the typical time.
    steady = warm_up[1:] or warm_up
    typical = sorted(steady)[len(steady) // 2]
    wanted = math.ceil(args["min_seconds"] / typical)
    wanted = min(max(wanted, args["min_iterations"]), max(args["max_iterations"], 1))
    affordable = math.floor(max(deadline - time.monotonic(), 0) * 0.8 / typical)
    proposal = torch.tensor([max(min(wanted, affordable), 1)], dtype=torch.int64)
    dist.all_reduce(proposal, op=dist.ReduceOp.MIN)
    return int(proposal.item())


def check_sum(torch, dist, rank, world, elements):
    """All-reduces rank + 1 everywhere and checks every element of the sum."""
    tensor = torch.full((elements,), float(rank + 1), dtype=torch.float32)
    dist.all_reduce(tensor)
    expected = float(world * (world + 1) // 2)
    wrong = (tensor != expected).nonzero()
    if wrong.numel() == 0:
        return None
    first = int(wrong[0].item())
    return (
        f"{wrong.numel()} of {elements} elements of the Gloo all-reduce are wrong; "
        f"element {first} is {tensor[first].item()}, expected {expected}"
    )


def all_reduce(args):
    import torch
    import torch.distributed as dist

    deadline = time.monotonic() + args["timeout_s"]
    rank, world = args["rank"], args["world"]
    timeout = timedelta(seconds=args["timeout_s"])
    store = dist.TCPStore(
        args["store_host"],
        args["store_port"],
        world,
        rank == 0,
        timeout=timeout,
        wait_for_workers=False,
    )
    if rank == 0:
        emit({"port": store.port})
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=world, timeout=timeout
    )
    try:
        small = torch.zeros(args["latency_bytes"] // 4, dtype=torch.float32)
        count = agreed_iterations(torch, dist, dict(args, min_seconds=0.1), small, deadline)
        latency = timed(dist, small, max(count, 20))
        # Zeros stay zeros however often they are summed, so no value overflows.
        large = torch.zeros(args["bytes"] // 4, dtype=torch.float32)
        count = agreed_iterations(torch, dist, args, large, deadline)
        seconds = timed(dist, large, count)
        wrong_result = check_sum(torch, dist, rank, world, args["bytes"] // 4)
    finally:
        dist.destroy_process_group()
    emit(
        {
            "result": {
                "torch": torch.__version__,
                "bytes": args["bytes"],
                "seconds": seconds,
                "latency_bytes": args["latency_bytes"],
                "latency_seconds": latency,
                "wrong_result": wrong_result,
            }
        }
    )


def main():
    args = json.loads(sys.argv[1])
    if args["op"] == "probe":
        probe()
    elif args["op"] == "all_reduce":
        all_reduce(args)
    else:
        raise SystemExit(f"unknown op {args['op']!r}")


main()
