#!/usr/bin/env python3
"""Writes OUT/report.md and OUT/results.json from the work folder of
tests/gpu/check.sh: its steps.tsv (name, status, seconds, note), env.txt and
each step's output (NAME.out), plus OUT/bench.json and OUT/pytorch.jsonl.

    report.py WORK OUT DRY
"""
import json
import os
import re
import sys


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def doctest_summary(text):
    """The last '[doctest] test cases: ...' and 'assertions: ...' lines, as numbers."""
    r = {}
    for kind in ("test cases", "assertions"):
        m = re.findall(r"\[doctest\] %s:\s*(\d+) \|\s*(\d+) passed \|\s*(\d+) failed(?: \|\s*(\d+) skipped)?" % kind, text)
        if m:
            total, passed, failed, skipped = m[-1]
            r[kind.replace(" ", "_")] = {"total": int(total), "passed": int(passed), "failed": int(failed),
                                        "skipped": int(skipped or 0)}
    r["skip_messages"] = text.count("skipped: no CUDA GPU")
    return r


def mnist_figures(text):
    r = {}
    acc = re.findall(r"Correctly guessed ([0-9.]+) %", text)
    if acc:
        r["accuracy_before"] = float(acc[0])
        r["accuracy"] = float(acc[-1])
    ep = re.findall(r"epoch \d+: (\d+) steps in ([0-9.]+) s, ([0-9.]+) steps/s, mean loss ([0-9.naif]+)", text)
    if ep:
        steps, secs, rate, loss = ep[-1]
        r.update(steps=int(steps), seconds=float(secs), steps_per_s=float(rate), mean_loss=float(loss))
    g = re.findall(r"graph launches per step:? ([0-9.]+)", text)
    if g:
        r["graph_launches_per_step"] = float(g[-1])
    return r


def sanitizer_figures(text):
    errors = [int(n) for n in re.findall(r"ERROR SUMMARY: (\d+) error", text)]
    hazards = [int(n) for n in re.findall(r"RACECHECK SUMMARY: (\d+) hazard", text)]
    r = {}
    if errors:
        r["errors"] = sum(errors)
        r["runs"] = len(errors)
    if hazards:
        r["hazards"] = sum(hazards)
    return r


def load_cells(out):
    """volt_bench's cells (bench.json, bench_cnn.json) and PyTorch's; and volt_bench's metrics."""
    cells, metrics = [], []
    for name, model in (("bench.json", "mlp"), ("bench_cnn.json", "cnn")):
        try:
            data = json.loads(read(os.path.join(out, name)) or "null")
        except ValueError:
            data = None
        for c in data if isinstance(data, list) else []:
            if isinstance(c, dict) and "mode" in c:
                c.setdefault("model", model)
                cells.append(c)
            elif isinstance(c, dict) and "metric" in c:
                c.setdefault("model", model)
                metrics.append(c)
    lines = read(os.path.join(out, "pytorch.jsonl")).splitlines() + read(os.path.join(out, "bench_gpt.jsonl")).splitlines()
    for line in lines:
        try:
            c = json.loads(line)
            c.setdefault("model", "mlp")
            cells.append(c)
        except ValueError:
            pass
    return cells, metrics


def rate(cells, mode, batch, phase="train"):
    for c in cells:
        if c.get("mode") == mode and c.get("device") == "cuda" and c.get("phase", "train") == phase \
                and c.get("model") == "mlp" and int(c.get("batch", -1)) == batch and c.get("median_us"):
            return 1e6 / float(c["median_us"])
    return None


def main():
    work, out, dry = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    steps = []
    for line in read(os.path.join(work, "steps.tsv")).splitlines():
        name, status, secs, note = (line.split("\t") + ["", "", "", ""])[:4]
        steps.append({"name": name, "status": status, "seconds": float(secs or 0), "note": note})
    env = {}
    for line in read(os.path.join(work, "env.txt")).splitlines():
        if ": " in line:
            k, v = line.split(": ", 1)
            env[k] = v
    figures = {}
    for s in steps:
        text = read(os.path.join(work, s["name"] + ".out"))
        if s["name"] in ("cuda_tests", "device_guard"):
            figures[s["name"]] = doctest_summary(text)
        elif s["name"].startswith("mnist_"):
            figures[s["name"]] = mnist_figures(text)
        elif s["name"] in ("memcheck", "racecheck"):
            figures[s["name"]] = sanitizer_figures(text)
        elif s["name"] == "gpt":
            vals = re.findall(r"val loss ([0-9.]+)", text)
            toks = re.findall(r"([0-9.]+) tokens/s", text)
            figures["gpt"] = {"val_loss_first": float(vals[0]) if vals else None,
                              "val_loss_last": float(vals[-1]) if vals else None,
                              "tokens_per_s_last": float(toks[-1]) if toks else None}
        elif s["name"] == "kernels":
            m = re.search(r"precompile_kernels: (\d+) of (\d+) kernels", text)
            if m:
                figures["kernels"] = {"compiled_or_cached": int(m.group(1)), "sources": int(m.group(2))}
    cells, metrics = load_cells(out)
    ratios = {}
    for name, mode, batch, base in (("step_vs_pytorch_eager_b8", "step", 8, "pytorch"),
                                    ("step_vs_reduce_overhead_b8", "step", 8, "pytorch-reduce-overhead"),
                                    ("step_vs_pytorch_cuda_graph_b8", "step", 8, "pytorch-cuda-graph"),
                                    ("step_vs_pytorch_eager_b1024", "step", 1024, "pytorch"),
                                    ("step_vs_pytorch_cuda_graph_b1024", "step", 1024, "pytorch-cuda-graph"),
                                    ("jit_vs_pytorch_eager_b8", "jit", 8, "pytorch"),
                                    ("eager_vs_pytorch_eager_b8", "eager", 8, "pytorch")):
        a, b = rate(cells, mode, batch), rate(cells, base, batch)
        if a and b:
            ratios[name] = round(a / b, 3)
    results = {"dry_run": dry, "environment": env, "steps": steps, "figures": figures, "ratios": ratios,
               "cells": cells, "metrics": metrics}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)

    md = ["# volt on a GPU: check report%s" % (" (dry run on tests/cudasim)" if dry else ""), ""]
    md += ["| | |", "|---|---|"] + ["| %s | %s |" % (k, v.replace("|", "/")) for k, v in env.items()] + [""]
    md += ["## Steps", "", "| step | result | seconds | note |", "|---|---|---|---|"]
    md += ["| %s | %s | %.1f | %s |" % (s["name"], s["status"], s["seconds"], s["note"]) for s in steps] + [""]
    md += ["## Figures", ""]
    for name, f in figures.items():
        md.append("- **%s**: %s" % (name, json.dumps(f)))
    md.append("")
    if cells:
        md += ["## Training and evaluation steps on the GPU (medians)", "",
               "| model | mode | phase | batch | median us | steps/s | samples/s |", "|---|---|---|---|---|---|---|"]
        for c in cells:
            if c.get("device") != "cuda" or not c.get("median_us"):
                continue
            us = float(c["median_us"])
            md.append("| %s | %s | %s | %s | %.1f | %.1f | %.0f |" % (
                c.get("model"), c.get("mode"), c.get("phase", "train"), c.get("batch"), us, 1e6 / us,
                1e6 / us * int(c.get("batch", 0))))
        md.append("")
    if metrics:
        md += ["## volt_bench's counts on the GPU", ""]
        for m in metrics:
            values = ", ".join("%s %s" % (k, v) for k, v in m.items() if k not in ("metric", "note", "model"))
            md.append("- %s %s: %s (%s)" % (m.get("model"), m.get("metric"), values, m.get("note", "")))
        md.append("")
    if ratios:
        md += ["## Ratios (steps/s, volt over PyTorch, same GPU, same run)", ""]
        md += ["- %s: %.2fx" % (k, v) for k, v in ratios.items()] + [""]
    bad = [s["name"] for s in steps if s["status"] in ("failed", "timeout")]
    md.append("Result: " + ("every step passed or was skipped for a stated reason" if not bad
                            else "failed or timed out: " + ", ".join(bad)))
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
