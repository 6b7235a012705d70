"""How many NIUs does noise emulation need?  FPS against NIU count, on the accelerator model.

    python examples/niu_vs_fps.py [--model resnet50] [--aimc all] [--max-niu 8]

For each NIU count the system model (aimcemu.perf: U50 with 5 PU2x + 5 PU1x, frame-parallel)
gives the frame rate with the chosen layers on AIMC, and the bottleneck; 0 NIUs is the digital
baseline.  Also writes niu_vs_fps.png."""
import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from aimcemu.perf import perf

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default="resnet50", help="zoo network or model file")
parser.add_argument("--aimc", default="all", help='AIMC layers: "all" or comma-separated names')
parser.add_argument("--max-niu", type=int, default=8)
parser.add_argument("--plot", default="niu_vs_fps.png")
args = parser.parse_args()

baseline = perf(args.model).summary()
print(f"{'NIUs':>4}  {'FPS':>10}  {'vs digital':>10}  bottleneck")
print(f"{0:>4}  {baseline['fps']:>10.1f}  {1.0:>10.3f}  {baseline['bottleneck']}")
counts, fps = [0], [baseline["fps"]]
for niu in range(1, args.max_niu + 1):
    s = perf(args.model, aimc_layers=args.aimc, niu=niu).summary()
    counts.append(niu)
    fps.append(s["fps"])
    print(f"{niu:>4}  {s['fps']:>10.1f}  {s['fps'] / baseline['fps']:>10.3f}  {s['bottleneck']}")

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(counts[1:], fps[1:], marker="o", label=f"AIMC layers: {args.aimc}")
ax.axhline(baseline["fps"], color="k", ls="--", lw=0.8, label="digital")
ax.set_xlabel("NIUs")
ax.set_ylabel("frames per second")
ax.set_title(f"{baseline['model']}: throughput vs NIU count")
ax.legend()
fig.tight_layout()
fig.savefig(args.plot, dpi=120)
print("plot:", args.plot)
