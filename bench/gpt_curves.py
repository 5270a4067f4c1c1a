#!/usr/bin/env python3
"""Draws the validation-loss curves of volt's examples/gpt and of LibTorch's
GPT (libtorch_bench --model gpt --text) into one SVG and prints both at each
step they share, with the difference at the last one.

    build/examples/gpt --jit step --log-json volt.jsonl
    build/bench/libtorch_bench --model gpt --text ~/.cache/volt/brown/brown.txt \\
        --train-steps 2000 --eval-every 100 > libtorch.txt
    bench/gpt_curves.py volt.jsonl libtorch.txt curves.svg
"""
import json
import re
import sys


def volt_curve(path):
    points = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                points.append((int(r["step"]), float(r["val_loss"])))
    return points


def libtorch_curve(path):
    pattern = re.compile(r"^step (\d+) val loss ([0-9.]+)")
    points = []
    with open(path) as f:
        for line in f:
            m = pattern.match(line)
            if m:
                points.append((int(m.group(1)), float(m.group(2))))
    return points


def svg(curves, path):
    w, h, x0, y0, pw, ph = 720, 420, 70, 40, 600, 320
    xs = [x for _, pts, _ in curves for x, _ in pts]
    ys = [y for _, pts, _ in curves for _, y in pts]
    xmin, xmax, ymin, ymax = min(xs), max(xs), min(ys), max(ys)
    xmax = xmax if xmax > xmin else xmin + 1
    ymax = ymax if ymax > ymin else ymin + 1
    px = lambda x: x0 + (x - xmin) / (xmax - xmin) * pw
    py = lambda y: y0 + ph - (y - ymin) / (ymax - ymin) * ph
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif'>",
           f"<rect width='{w}' height='{h}' fill='white'/>",
           f"<text x='{x0 + pw / 2}' y='24' text-anchor='middle' font-size='14'>validation loss (nats per byte)</text>",
           f"<rect x='{x0}' y='{y0}' width='{pw}' height='{ph}' fill='none' stroke='#444'/>"]
    for i in range(5):
        xv, yv = xmin + (xmax - xmin) * i / 4, ymin + (ymax - ymin) * i / 4
        out.append(f"<text x='{px(xv)}' y='{y0 + ph + 18}' text-anchor='middle' font-size='11'>{xv:g}</text>")
        out.append(f"<text x='{x0 - 8}' y='{py(yv) + 4}' text-anchor='end' font-size='11'>{yv:.3g}</text>")
    out.append(f"<text x='{x0 + pw / 2}' y='{y0 + ph + 36}' text-anchor='middle' font-size='12'>step</text>")
    for k, (name, pts, colour) in enumerate(curves):
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f"<polyline fill='none' stroke='{colour}' stroke-width='1.5' points='{coords}'/>")
        out.append(f"<text x='{x0 + pw - 10}' y='{y0 + 20 + 18 * k}' text-anchor='end' font-size='12' "
                   f"fill='{colour}'>{name}</text>")
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    volt, torch = volt_curve(sys.argv[1]), libtorch_curve(sys.argv[2])
    if not volt or not torch:
        sys.exit("gpt_curves.py: no validation losses in " + (sys.argv[1] if not volt else sys.argv[2]))
    svg([("volt", volt, "#1f77b4"), ("LibTorch", torch, "#d62728")], sys.argv[3])
    theirs = dict(torch)
    shared = [(s, v, theirs[s]) for s, v in volt if s in theirs]
    for s, v, t in shared:
        print(f"step {s:5d}: volt {v:.4f}  LibTorch {t:.4f}  difference {v - t:+.4f}")
    print(f"curves: {sys.argv[3]}")


if __name__ == "__main__":
    main()
