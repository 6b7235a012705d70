"""Benchmark: end-to-end INT8 inference, aimcemu against onnxruntime, on ResNet-18 and ResNet-50 v1.

The same topologies on both sides, 224x224, 1 and all cores, in one run:
  * aimcemu, digital, bit-exact: the zoo's ResNet (synthetic INT8 weights, v1: stride on the
    first 1x1 conv of a downsampling bottleneck) on --images random int8 images,
      - "run":  aimcemu.run(model file, data file, layers="none") as a new user would call it
                (model and data written to a temporary folder first, results file included);
      - "PU":   aimcemu._core.run_network(net, images, keep=[-1]): the PU model alone;
  * onnxruntime, INT8 QDQ: the same ResNet defined in PyTorch below (random weights, BN folded
    by onnxruntime's pre-processing), exported to ONNX and quantised with
    onnxruntime.quantization.quantize_static (QDQ, per-tensor, u8 activations, s8 weights,
    8 random calibration images), at its best batch size among --ort-batches;
  * onnxruntime, float32: the exported model itself, same batch sizes.
Each configuration runs --repeats times, the engines alternating so that load from other
processes hits all of them alike; the best wall-clock time counts.  aimcemu.run is resolved before
any timing: its first use imports the runner (and NumPy), which a process pays once, not per run;
that process start-up is measured on its own, in a fresh interpreter, and printed as its own line.  onnxruntime, onnx and torch
are benchmark dependencies only (scripts/setup.sh installs them).

    python3 bench/bench_network.py [--nets resnet50] [--images 64]
(the aimcemu Python imports; AIMCEMU_CORE_DIR for a build of your own, docs/performance.md "Reproduce")
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import aimcemu
from aimcemu import _core, modelfile

run = aimcemu.run  # resolved before any timing (the runner's import is paid once per process)

STARTUP = r"""
import time
start = time.perf_counter()
import aimcemu
aimcemu.run
print(time.perf_counter() - start)
"""


def process_startup_s(repeats: int) -> float:
    """Best seconds over `repeats` fresh interpreters for import aimcemu + resolving aimcemu.run (the
    runner and NumPy): what a process pays once before its first run."""
    return min(float(subprocess.run([sys.executable, "-c", STARTUP], check=True, capture_output=True,
                                    text=True).stdout.strip().splitlines()[-1]) for _ in range(repeats))


# --- the ResNets in PyTorch ------------------------------------------------------------------------
def torch_resnet(depth: int):
    import torch
    from torch import nn

    def conv_bn(cin, cout, k, s, relu=True):
        layers = [nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*layers, nn.ReLU(inplace=True)) if relu else nn.Sequential(*layers)

    class Basic(nn.Module):
        expansion = 1

        def __init__(self, cin, width, stride):
            super().__init__()
            self.body = nn.Sequential(conv_bn(cin, width, 3, stride), conv_bn(width, width, 3, 1, relu=False))
            self.skip = conv_bn(cin, width, 1, stride, relu=False) if stride != 1 or cin != width else nn.Identity()

        def forward(self, x):
            return torch.relu(self.body(x) + self.skip(x))

    class Bottleneck(nn.Module):   # v1: the stride sits on the first 1x1 conv
        expansion = 4

        def __init__(self, cin, width, stride):
            super().__init__()
            out = width * 4
            self.body = nn.Sequential(conv_bn(cin, width, 1, stride), conv_bn(width, width, 3, 1),
                                      conv_bn(width, out, 1, 1, relu=False))
            self.skip = conv_bn(cin, out, 1, stride, relu=False) if stride != 1 or cin != out else nn.Identity()

        def forward(self, x):
            return torch.relu(self.body(x) + self.skip(x))

    block, counts = (Basic, [2, 2, 2, 2]) if depth == 18 else (Bottleneck, [3, 4, 6, 3])
    layers, cin = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)], 64
    for stage, (width, count) in enumerate(zip([64, 128, 256, 512], counts)):
        for i in range(count):
            layers.append(block(cin, width, 2 if i == 0 and stage > 0 else 1))
            cin = width * block.expansion
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000)]
    torch.manual_seed(depth)
    return nn.Sequential(*layers).eval()


def onnx_models(depth: int, folder: Path) -> tuple[str, str]:
    """(float32 ONNX, INT8 QDQ ONNX) paths of the PyTorch ResNet."""
    import torch
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    fp32 = folder / f"resnet{depth}_fp32.onnx"
    prepared = folder / f"resnet{depth}_prep.onnx"
    int8 = folder / f"resnet{depth}_int8.onnx"
    model = torch_resnet(depth)
    torch.onnx.export(model, torch.randn(1, 3, 224, 224), fp32, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, opset_version=17, dynamo=False)
    quant_pre_process(str(fp32), str(prepared))

    class Calibration(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.batches = iter([{"x": rng.standard_normal((1, 3, 224, 224), dtype=np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(str(prepared), str(int8), Calibration(), quant_format=QuantFormat.QDQ, per_channel=False,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return str(fp32), str(int8)


# --- timing -----------------------------------------------------------------------------------------
class Ort:
    def __init__(self, path: str, threads: int, images: int, batch: int):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.batch = batch
        x = np.random.default_rng(1).standard_normal((images, 3, 224, 224), dtype=np.float32)
        self.batches = [x[i:i + batch] for i in range(0, images, batch)]

    def __call__(self) -> None:
        for b in self.batches:
            self.session.run(None, {"x": b})


def best_of(engines: dict, repeats: int) -> tuple[dict, dict]:
    """Best wall-clock and best process CPU seconds of each engine, the engines alternating in every
    repeat.  On one thread the CPU seconds are what other processes on a shared machine do not
    inflate (they take turns on the core, not cycles of this process's time)."""
    best = {name: float("inf") for name in engines}
    best_cpu = dict(best)
    for _ in range(repeats):
        for name, run in engines.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
            best_cpu[name] = min(best_cpu[name], time.process_time() - start_cpu)
    return best, best_cpu


def bench_net(depth: int, args, folder: Path) -> None:
    name = f"resnet{depth}"
    net = _core.zoo.by_name(name)
    images = np.random.default_rng(2).integers(-128, 128, size=(args.images, 224, 224, 3), dtype=np.int8)
    labels = np.zeros(args.images, dtype=np.int64)
    model_path, data_path = folder / f"{name}.h5", folder / f"{name}_data.h5"
    modelfile.save_model(net, model_path)
    modelfile.save_dataset(images, labels, data_path, source="random")
    fp32, int8 = onnx_models(depth, folder)
    print(f"\n== {name} v1, 224x224, {args.images} images ==", flush=True)
    table = {}
    for threads in sorted({1, args.threads}):
        engines = {
            "aimcemu run": lambda t=threads: run(model_path, data_path, folder / "out.h5", layers="none", threads=t),
            "aimcemu PU": lambda t=threads: _core.run_network(net, images, "fast", t, None, [-1]),
        }
        for batch in args.ort_batches:
            engines[f"ort int8 b{batch}"] = Ort(int8, threads, args.images, batch)
            engines[f"ort fp32 b{batch}"] = Ort(fp32, threads, args.images, batch)
        seconds, cpu_seconds = best_of(engines, args.repeats)
        rate = {k: args.images / v for k, v in seconds.items()}
        rate.update({f"{k} per cpu": args.images / v for k, v in cpu_seconds.items()})
        for kind in ("int8", "fp32"):
            best_batch = max(args.ort_batches, key=lambda b: rate[f"ort {kind} b{b}"])
            rate[f"ort {kind}"] = rate[f"ort {kind} b{best_batch}"]
            rate[f"ort {kind} per cpu"] = rate[f"ort {kind} b{best_batch} per cpu"]
            rate[f"ort {kind} batch"] = best_batch
        table[threads] = rate
    cols = sorted(table)
    print(f"{'images/s':<34}" + "".join(f"{f'{t} thread' + ('s' if t > 1 else ''):>12}" for t in cols))
    for key, label in (("aimcemu run", "aimcemu.run, bit-exact"), ("aimcemu PU", "aimcemu PU model only"),
                       ("ort int8", "onnxruntime INT8 QDQ (best batch)"), ("ort fp32", "onnxruntime float32 (best batch)")):
        print(f"{label:<34}" + "".join(f"{table[t][key]:12.1f}" for t in cols))
    print(f"{'  onnxruntime best batch int8/fp32':<34}" +
          "".join(f"{str(table[t]['ort int8 batch']) + '/' + str(table[t]['ort fp32 batch']):>12}" for t in cols))
    for key, label in (("aimcemu run", "aimcemu.run / onnxruntime INT8"), ("aimcemu PU", "PU model / onnxruntime INT8")):
        print(f"{label:<34}" + "".join(f"{table[t][key] / table[t]['ort int8']:12.2f}" for t in cols))
    print(f"{'images per CPU-second, 1 thread':<34}" + "".join(
        f"  {label} {table[1][key + ' per cpu']:.1f}" for key, label in
        (("aimcemu PU", "PU"), ("ort int8", "ort int8"), ("ort fp32", "ort fp32"))) +
        f"  (PU / ort int8 {table[1]['aimcemu PU per cpu'] / table[1]['ort int8 per cpu']:.2f})")
    if len(cols) > 1:
        hi = cols[-1]
        print(f"{'scaling ' + str(hi) + ' threads / 1':<34}" +
              f"{'aimcemu run':>14} {table[hi]['aimcemu run'] / table[1]['aimcemu run']:.2f}, "
              f"PU {table[hi]['aimcemu PU'] / table[1]['aimcemu PU']:.2f}, "
              f"ort int8 {table[hi]['ort int8'] / table[1]['ort int8']:.2f}")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nets", nargs="*", default=["resnet18", "resnet50"], choices=["resnet18", "resnet50"])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the 'all cores' column")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--ort-batches", type=int, nargs="*", default=[1, 16])
    args = parser.parse_args()
    import onnxruntime

    print(f"aimcemu fast kernel: {_core.fast_kernels()[0]}; onnxruntime {onnxruntime.__version__}; "
          f"{os.cpu_count()} cores")
    print(f"process start-up, once per process (import aimcemu + aimcemu.run: the runner and NumPy; not in "
          f"the aimcemu.run rates): {process_startup_s(max(3, args.repeats)):.3f} s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.nets:
            bench_net(int(name[len("resnet"):]), args, Path(tmp))


if __name__ == "__main__":
    main()
