#!/usr/bin/python3
"""The PyTorch (Python) baseline: the model, recipe and timing rule of
bench/volt_bench.cpp and bench/libtorch_bench.cpp, through Debian's
python3-torch (CPU) or any PyTorch on a GPU node.

    python3 bench/pytorch_bench.py [--batch 8,256] [--steps N] [--threads N] [--json]
    python3 bench/pytorch_bench.py --device cuda --modes eager,compile,reduce-overhead

Modes: eager; compile (torch.compile's default mode on the model and its
loss, the optimizer eager); reduce-overhead (the same compiled into CUDA
graphs); cuda-graph (the whole training step, forward, backward and a fused
Adam, captured by hand into one CUDA graph with static inputs: the most a
PyTorch program can take off the launch overhead, as volt's compiled step
does).  On a GPU each timed step ends with torch.cuda.synchronize(), as
volt_bench's CUDA cells do.  The batches are drawn by torch's own generator
(same distribution as the C++ benches, not the same numbers; the timing does
not depend on them).  Threads: $OMP_NUM_THREADS, else one per core.
"""
import argparse
import json
import os
import statistics
import time

import torch
from torch import nn

FEATURES, CLASSES, HELD = 784, 10, 8


def make_model():
    # torchvision.ops.MLP(784, [784, 784, 784, 28, 10], dropout=0.1): Linear, ReLU,
    # Dropout per hidden layer, then Linear, Dropout.
    torch.manual_seed(0)
    widths = [784, 784, 784, 784, 28, 10]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(nn.ReLU())
        layers.append(nn.Dropout(0.1))
    return nn.Sequential(*layers)


def time_steps(step, steps):
    """Warm up, then time single steps: exactly `steps`, or at least 20 and 1 s
    until the second half's median agrees with the whole run's within 2 %."""
    t0 = time.perf_counter()
    done = 0
    while done < 3 or (done < 50 and time.perf_counter() - t0 < 0.2):
        step()
        done += 1
    us = []
    start = time.perf_counter()
    while True:
        if steps > 0 and len(us) >= steps:
            break
        if steps <= 0 and len(us) >= 20 and time.perf_counter() - start > 1.0:
            whole = statistics.median(us)
            late = statistics.median(us[len(us) // 2:])
            if abs(late - whole) <= 0.02 * whole or len(us) >= 3000 or time.perf_counter() - start > 10:
                break
        s = time.perf_counter()
        step()
        us.append((time.perf_counter() - s) * 1e6)
    return len(us), statistics.median(us), min(us)


def print_cell(a, name, device, phase, batch, n, median, least, first_ms):
    cell = {"mode": name, "device": device, "phase": phase, "batch": batch, "steps": n,
            "median_us": round(median, 2), "min_us": round(least, 2),
            "steps_per_s": round(1e6 / median, 2), "samples_per_s": round(1e6 / median * batch, 1),
            "first_call_ms": round(first_ms, 1)}
    if a.json:
        print(json.dumps(cell, separators=(",", ":")), flush=True)
    else:
        print(f"{name} {device} {phase:5} batch {batch:5}: median {median:10.1f} us, min {least:10.1f} us, "
              f"{1e6 / median:9.1f} steps/s, {1e6 / median * batch:10.0f} samples/s", flush=True)


def run_graph_cell(a, batch, net, loss_fn, data):
    """The whole step in one CUDA graph: warm up on a side stream, capture, replay."""
    t0 = time.perf_counter()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, fused=True, capturable=True)
    static_x, static_y = data[0][0].clone(), data[0][1].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss_fn(net(static_x), static_y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss_fn(net(static_x), static_y).backward()
        opt.step()
    torch.cuda.synchronize()
    first_ms = (time.perf_counter() - t0) * 1e3
    k = [0]

    def train_step():
        x, y = data[k[0] % HELD]
        k[0] += 1
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        torch.cuda.synchronize()

    n, median, least = time_steps(train_step, a.steps)
    print_cell(a, "pytorch-cuda-graph", "cuda", "train", batch, n, median, least, first_ms)


def run_cell(a, batch, device, mode):
    """Times training and evaluation steps of one batch size in one mode."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    net = make_model().to(device).train()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(1000)
    data = [(torch.rand(batch, FEATURES, generator=gen).to(device),
             torch.randint(0, CLASSES, (batch,), generator=gen).to(device)) for _ in range(HELD)]
    forward = lambda x, y: loss_fn(net(x), y)
    if mode == "cuda-graph":
        return run_graph_cell(a, batch, net, loss_fn, data)
    if mode != "eager":
        forward = torch.compile(forward, mode=None if mode == "compile" else "reduce-overhead")
    k = [0]

    def train_step():
        x, y = data[k[0] % HELD]
        k[0] += 1
        loss = forward(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sync()

    def eval_step():
        x, _ = data[k[0] % HELD]
        k[0] += 1
        net(x)
        sync()

    t0 = time.perf_counter()
    train_step()  # the first call compiles, in the compiled modes
    first_ms = (time.perf_counter() - t0) * 1e3
    results = [("train", time_steps(train_step, a.steps))]
    if mode == "eager":
        net.eval()
        with torch.no_grad():
            results.append(("eval", time_steps(eval_step, a.steps)))
    name = "pytorch" if mode == "eager" else "pytorch-" + mode
    for phase, (n, median, least) in results:
        print_cell(a, name, device, phase, batch, n, median, least, first_ms)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="8,64,256,1024")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--modes", default="eager", help="eager,compile,reduce-overhead,cuda-graph")
    ap.add_argument("--compile-batch", default="8,1024",
                    help="the batch sizes the compiled modes run (each compile takes seconds)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("pytorch_bench.py: --device cuda, but torch sees no GPU")
    modes = [m for m in a.modes.split(",") if m]
    for m in modes:
        if m not in ("eager", "compile", "reduce-overhead", "cuda-graph"):
            raise SystemExit(f"pytorch_bench.py: unknown mode {m!r} (eager, compile, reduce-overhead, cuda-graph)")
        if m == "cuda-graph" and a.device != "cuda":
            raise SystemExit("pytorch_bench.py: cuda-graph needs --device cuda")
    compiled_batches = {int(b) for b in a.compile_batch.split(",") if b}
    for mode in modes:
        for batch in [int(b) for b in a.batch.split(",")]:
            if mode in ("eager", "cuda-graph") or batch in compiled_batches:
                run_cell(a, batch, a.device, mode)


if __name__ == "__main__":
    main()
