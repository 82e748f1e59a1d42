# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One rank of an all-reduce between cluster nodes, timed: torch.distributed in the serving image.

Run by the network_check role on every node of a group at once (a pair, or the whole ring), in a container of
the serving image with the node's cluster environment (NCCL_*, GLOO_SOCKET_IFNAME: the cluster link). NCCL on a
GPU, Gloo on CPU. Rank 0 prints one JSON line: the bytes reduced, the seconds of each timed all-reduce, and the
algorithm and bus bandwidth (nccl-tests' definition: busbw = algbw * 2 (n - 1) / n for an all-reduce).
"""

import argparse
import datetime
import json
import signal
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--master-addr", required=True, help="rank 0's cluster address (the rendezvous)")
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
    parser.add_argument("--bytes", type=int, default=256 << 20)
    parser.add_argument("--seconds", type=float, default=5.0, help="time the all-reduce at least this long")
    parser.add_argument("--max-iterations", type=int, default=200)
    parser.add_argument("--timeout", type=int, default=300, help="seconds for the whole run")
    args = parser.parse_args()
    signal.alarm(args.timeout)  # a peer that never comes, or a link that stalls: no container left waiting

    import torch
    import torch.distributed as dist

    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    host = f"[{args.master_addr}]" if ":" in args.master_addr else args.master_addr
    started = time.monotonic()
    dist.init_process_group(backend, init_method=f"tcp://{host}:{args.master_port}", rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=max(30, args.timeout // 2)))
    joined = time.monotonic() - started
    tensor = torch.ones(max(1, args.bytes // 4), dtype=torch.float32, device=device)

    def reduce_once() -> float:
        begin = time.monotonic()
        dist.all_reduce(tensor)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.monotonic() - begin

    reduce_once()  # warm-up: connections, buffers
    # Every rank runs as many as rank 0 decides: its go-on travels in a small broadcast before each one.
    timings = []
    while True:
        keep_on = torch.tensor([1 if (sum(timings) < args.seconds and len(timings) < args.max_iterations)
                                else 0], dtype=torch.int32, device=device)
        dist.broadcast(keep_on, src=0)
        if not int(keep_on.item()):
            break
        timings.append(reduce_once())
    dist.barrier()
    dist.destroy_process_group()
    if args.rank == 0:
        size = tensor.numel() * tensor.element_size()
        algbw = size * len(timings) / sum(timings)  # bytes/s
        busbw = algbw * 2 * (args.world - 1) / args.world
        print(json.dumps({"backend": backend, "world": args.world, "bytes": size, "iterations": len(timings),
                          "seconds": [round(t, 6) for t in timings], "join_seconds": round(joined, 3),
                          "algbw_gbit": round(algbw * 8 / 1e9, 3), "busbw_gbit": round(busbw * 8 / 1e9, 3),
                          "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
