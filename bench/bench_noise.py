"""Benchmark: noisy weights per second per core for every device noise model.

Workload: the 54 conv/FC layers of ResNet-50 (25.5 M weights, the zoo's synthetic INT8 weights
as float64), each programmed once and read once at t = 1 day (Wan 2022: its 1-day key).

Part 1, against aihwkit (the peer researchers use): aimcemu's PCM-like model against aihwkit
1.2.0's own PCMLikeNoiseModel (PyTorch, float32): apply_programming_noise, then
apply_drift_noise (drift + read noise), layer by layer, the two alternating, on 1 thread (torch
and aimcemu) and on all cores.  aihwkit is not a dependency: its inference package is pure
Python over torch, and its source distribution provides it without the compiled simulator:

    pip download --no-deps --no-binary :all: --no-build-isolation aihwkit==1.2.0
    tar xzf aihwkit-1.2.0.tar.gz
    python3 bench/bench_noise.py --aihwkit-src aihwkit-1.2.0/src

Part 2, every model against a straightforward NumPy implementation of the same formulas
(numpy.random.Generator for the draws, so the values differ but the work is the same).

Figures: weights/s from wall-clock time (best of --repeats) and from process CPU time (all
threads), which other processes on a shared machine do not inflate.

Threads: torch's OpenMP workers busy-wait after each operation by default.  In one process with
aimcemu, layer by layer, they spun on the cores aimcemu's workers then needed (and their spinning
counted as CPU time of the process): aimcemu's 2-thread rate fell below its 1-thread one and
aihwkit's own 2-thread rate to a tenth of its 1-thread one.  So the benchmark sets
OMP_WAIT_POLICY=PASSIVE (unless the environment sets it) before torch is imported: idle OpenMP
workers sleep, which the 1-thread rows do not notice (torch has no workers there).  aimcemu runs once per vector
implementation of its float64 noise math the CPU has (AVX-512, AVX2; the results are
bit-identical), alternating with aihwkit layer by layer.  The engine keeps freed layer buffers for
the next layer (noise_models/buffer_pool.hpp): the first pass over the network fills that pool, so
the default is --repeats 2 (the best pass is then a steady one; give 1 only for a quick check).  Run:
    python3 bench/bench_noise.py [--layers N] [--repeats 2] [--aihwkit-src DIR]
(the aimcemu Python imports; AIMCEMU_CORE_DIR for a build of your own, docs/performance.md "Reproduce")
"""
from __future__ import annotations

import argparse
import os
import sys
import time

# Before torch (imported below) starts its OpenMP workers: they sleep when idle (see above).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np

import aimcemu
from aimcemu import noise

T_READ = 86400.0


# --- NumPy implementations of the same formulas (program + one read, weights back) ------------
def single_pair(w, g_max):
    scale = g_max / max(np.abs(w).max(), 1e-7)
    gp = np.clip(w * scale, 0, g_max)
    gm = np.clip(-w * scale, 0, g_max)
    return np.stack([gp, gm], axis=-1), scale


def reconvert(g, scale, g_max):
    w_prog = (g[..., 0] - g[..., 1]) / scale
    return single_pair(w_prog, g_max)


def pcm_family_numpy(w, rng, g_max, t0, t_read, prog_sigma, nu_mean, nu_std, read_q):
    g_t, scale = single_pair(w, g_max)
    g_prog = np.maximum(0, g_t + prog_sigma(g_t) * rng.standard_normal(g_t.shape))
    nu = np.abs(nu_mean(g_t) + nu_std(g_t) * rng.standard_normal(g_t.shape))
    g0, scale = reconvert(g_prog, scale, g_max)
    t_total = T_READ + t0
    g_drift = g0 * (t_total / t0) ** -nu
    sigma = read_q(g0) * np.sqrt(np.log((t_total + t_read) / (2 * t_read)))
    g = np.maximum(0, g_drift + np.abs(g_drift) * sigma * rng.standard_normal(g_t.shape))
    return (g[..., 0] - g[..., 1]) / scale


def pcm_like_numpy(w, rng):
    g_max = 25.0
    x = lambda g: np.maximum(g / g_max, 1e-7)
    return pcm_family_numpy(
        w, rng, g_max, 20.0, 250e-9,
        lambda g: 0.26348 + 1.9650 * (g / g_max) - 1.1731 * (g / g_max) ** 2,
        lambda g: np.clip(-0.0155 * np.log(x(g)) + 0.0244, 0.049, 0.1),
        lambda g: np.clip(-0.0125 * np.log(x(g)) - 0.0059, 0.008, 0.045),
        lambda g: np.minimum(0.0088 / np.maximum((g / g_max) ** 0.65, 1e-3), 0.2))


def hermes_numpy(w, rng):
    g_max = 20.7
    x = lambda g: np.maximum(g / g_max, 1e-7)
    c = [0.16603222, 4.71806468, -8.48101252, 4.68961419]
    return pcm_family_numpy(
        w, rng, g_max, 300.0, 512e-9,
        lambda g: np.polynomial.polynomial.polyval(g / g_max, c),
        lambda g: np.where(x(g) < 0.0945, np.clip(-0.0387 * np.log(x(g)) - 0.0182, 0.072, 0.13),
                           -0.0436 * x(g) ** 2 - 0.0126 * x(g) + 0.0736),
        lambda g: np.where(x(g) < 0.3055, np.clip(-0.0117 * np.log(x(g)) - 0.0057, 0.0091, 0.04),
                           -0.0118 * x(g) ** 2 + 0.0093 * x(g) + 0.0073),
        lambda g: np.where(x(g) < 0.16, np.clip(-0.0117 * np.log(x(g)) - 0.0069, 0.015, 0.04),
                           0.0069 * x(g) ** 3 - 0.0280 * x(g) ** 2 + 0.0211 * x(g) + 0.0123))


def state_independent_numpy(w, rng):
    return pcm_family_numpy(w, rng, 25.0, 20.0, 250e-9, lambda g: np.full_like(g, 0.2), lambda g: 0.1,
                            lambda g: 0.05, lambda g: 1 / 25.0)


def custom_drift_numpy(w, rng):
    g_lst, mean, std = CUSTOM_DRIFT["g_lst"], CUSTOM_DRIFT["nu_mean_lst"], CUSTOM_DRIFT["nu_std_lst"]
    g_max = 25.0
    return pcm_family_numpy(
        w, rng, g_max, 20.0, 250e-9,
        lambda g: 0.26348 + 1.9650 * (g / g_max) - 1.1731 * (g / g_max) ** 2,
        lambda g: np.interp(g, g_lst, mean), lambda g: np.interp(g, g_lst, std),
        lambda g: np.minimum(0.0088 / np.maximum((g / g_max) ** 0.65, 1e-3), 0.2))


def wan_numpy(w, rng):
    g_t, scale = single_pair(w, 25.0)
    poly = lambda g, c: np.polynomial.polynomial.polyval(g / 25.0, c)
    c1 = [0.348, 16.030, -43.853, 45.393, -16.815]
    cd = [0.701, 22.086, -50.773, 47.095, -16.458]
    g_prog = np.maximum(0, g_t + poly(g_t, c1) * rng.standard_normal(g_t.shape))
    del g_prog  # a read resamples around g_target
    g = np.maximum(0, g_t + poly(g_t, cd) * rng.standard_normal(g_t.shape))
    return (g[..., 0] - g[..., 1]) / scale


def cmo_numpy(w, rng):
    g_min, g_max = 9.0, 88.199997
    lo, hi = w.min(), w.max()
    scale = (g_max - g_min) / max(hi - lo, 1e-7)
    g_t = g_min + (w - lo) * scale
    g_prog = g_t + (0.00081107 + 0.00106879 * g_t) * rng.standard_normal(g_t.shape)
    w_prog = lo + (g_prog - g_min) / scale
    lo, hi = w_prog.min(), w_prog.max()
    scale = (g_max - g_min) / max(hi - lo, 1e-7)
    g0 = np.clip(g_min + (w_prog - lo) * scale, g_min, g_max)
    g_drift = g0 - 0.08900206 * np.log(T_READ) + (0.04201137 * np.log(T_READ) + 0.41183342) * rng.standard_normal(g0.shape)
    sigma = 0.0277316483 * np.log10(g_drift) * np.sqrt(np.log((T_READ + 1e-6) / 2e-6))
    g = np.clip(g_drift + sigma * rng.standard_normal(g0.shape), g_min, g_max)
    return lo + (g - g_min) / scale


def generic_numpy(w, rng):
    g_t, scale = single_pair(w, 25.0)
    u = rng.random(g_t.shape)
    g_prog = g_t + np.hypot(0.02 * 25.0, 0.0) * rng.standard_normal(g_t.shape)
    g_prog = np.where(u < 0.01, 0.0, np.where(u < 0.015, 25.0, g_prog))
    g = g_prog + np.hypot(0.0, 0.02 * g_prog) * rng.standard_normal(g_t.shape)
    g = np.where(u < 0.015, g_prog, g)
    return (g[..., 0] - g[..., 1]) / scale


CUSTOM_DRIFT = {"g_lst": [0.0, 5.0, 25.0], "nu_mean_lst": [0.1, 0.06, 0.05], "nu_std_lst": [0.04, 0.02, 0.01]}

CASES = [
    ("pcm_like", noise.PCMLikeNoiseModel(), pcm_like_numpy),
    ("hermes", noise.HermesNoiseModel(), hermes_numpy),
    ("state_independent", noise.StateIndependentNoiseModel(), state_independent_numpy),
    ("custom_drift_pcm", noise.CustomDriftPCMLikeNoiseModel(CUSTOM_DRIFT), custom_drift_numpy),
    ("reram_wan2022", noise.ReRamWan2022NoiseModel(), wan_numpy),
    ("reram_cmo", noise.ReRamCMONoiseModel(), cmo_numpy),
    ("generic", noise.GenericNoiseModel(prog_additive=0.02, read_multiplicative=0.02, stuck_low_prob=0.01,
                                         stuck_high_prob=0.005), generic_numpy),
]


def resnet50_layers(limit: int | None) -> list[np.ndarray]:
    net = aimcemu._core.zoo.resnet50()
    layers = [l for l in net.layers if l.is_gemm]
    if limit:
        layers = layers[:limit]
    return [l.weights.astype(np.float64).reshape(l.gemm_n, l.gemm_m) for l in layers]


def time_interleaved(model: noise.NoiseModel, numpy_fn, layers, cores: int, repeats: int) -> tuple[float, float, float]:
    """Seconds for C++ on 1 thread, C++ on all cores and NumPy, over all layers, best of
    `repeats`.  The three run layer by layer in turn, so that load from other processes on a
    shared machine hits all of them alike and their ratio stays meaningful."""
    best = [float("inf")] * 3
    for _ in range(repeats):
        rng = np.random.default_rng(1)
        spent = [0.0, 0.0, 0.0]
        for i, w in enumerate(layers):
            for slot, threads in ((0, 1), (1, cores)):
                model.num_threads = threads
                start = time.perf_counter()
                state = model.program(w, seed=1, chip=0, layer=i)
                model.read(state, T_READ, 0)
                spent[slot] += time.perf_counter() - start
            start = time.perf_counter()
            numpy_fn(w, rng)
            spent[2] += time.perf_counter() - start
        best = [min(b, s) for b, s in zip(best, spent)]
    model.num_threads = 0
    return best[0], best[1], best[2]


def aimcemu_isas() -> list[str]:
    """The implementations of the float64 noise math this CPU has, best first."""
    active = aimcemu._core.noise.noise_simd_isa()
    found = []
    for isa in ("avx512", "avx2"):
        try:
            aimcemu._core.noise.use_noise_simd_isa(isa)
            found.append(isa)
        except ValueError:
            pass
    aimcemu._core.noise.use_noise_simd_isa(active)
    return found or ["scalar"]


def time_against_aihwkit(layers, cores: int, repeats: int, aihwkit_src: str) -> None:
    """aimcemu PCM-like (each vector implementation the CPU has) against aihwkit's
    PCMLikeNoiseModel, program + drift + read, same layers, the engines alternating layer by
    layer so that load from other processes hits all of them alike."""
    sys.path.insert(0, aihwkit_src)
    import torch
    from aihwkit.inference.noise.pcm import PCMLikeNoiseModel

    ours = noise.PCMLikeNoiseModel()
    theirs = PCMLikeNoiseModel()
    tensors = [torch.from_numpy(w.astype(np.float32)) for w in layers]
    n = sum(w.size for w in layers)
    isas = aimcemu_isas()
    active = aimcemu._core.noise.noise_simd_isa()

    def run_ours(isa, i, w, wt):
        aimcemu._core.noise.use_noise_simd_isa(isa)
        state = ours.program(w, seed=1, chip=0, layer=i)
        ours.read(state, T_READ, 0)

    def run_theirs(isa, i, w, wt):
        w_prog, nu = theirs.apply_programming_noise(wt)
        theirs.apply_drift_noise(w_prog, nu, T_READ)

    engines = [(f"aimcemu {isa}", run_ours, isa) for isa in isas] + [("aihwkit", run_theirs, None)]
    print(f"\n== aihwkit {getattr(sys.modules.get('aihwkit'), '__version__', '1.2.0')} PCMLikeNoiseModel (torch "
          f"{torch.__version__}, float32) vs aimcemu pcm_like (float64): program + drift + read at t = {T_READ:g} s ==")
    print("Mweights/s from wall-clock time and per process CPU-second (all threads' CPU time); "
          "ratio = aimcemu / aihwkit, measured in the same run")
    print(f"{'threads':>8} {'engine':>16} {'wall':>10} {'per CPU-s':>10} {'ratio wall':>11} {'ratio CPU':>10}")
    walls = {}
    for threads in sorted({1, cores}):
        ours.num_threads = threads
        torch.set_num_threads(threads)
        best_wall, best_cpu = [float("inf")] * len(engines), [float("inf")] * len(engines)
        for _ in range(repeats):
            wall, cpu = [0.0] * len(engines), [0.0] * len(engines)
            for i, (w, wt) in enumerate(zip(layers, tensors)):
                for k, (_, fn, isa) in enumerate(engines):
                    w0, c0 = time.perf_counter(), time.process_time()
                    fn(isa, i, w, wt)
                    wall[k] += time.perf_counter() - w0
                    cpu[k] += time.process_time() - c0
            best_wall = [min(b, x) for b, x in zip(best_wall, wall)]
            best_cpu = [min(b, x) for b, x in zip(best_cpu, cpu)]
        for k, (label, _, _) in enumerate(engines):
            ratios = (f"{best_wall[-1] / best_wall[k]:11.2f} {best_cpu[-1] / best_cpu[k]:10.2f}"
                      if k < len(engines) - 1 else f"{'':>11} {'':>10}")
            print(f"{threads:>8} {label:>16} {n / best_wall[k] / 1e6:10.2f} {n / best_cpu[k] / 1e6:10.2f} {ratios}")
        walls[threads] = best_wall
    if cores > 1:
        print(f"{cores} threads / 1 thread, wall: " + ", ".join(
            f"{label} {walls[1][k] / walls[cores][k]:.2f}x" for k, (label, _, _) in enumerate(engines)))
    aimcemu._core.noise.use_noise_simd_isa(active)
    ours.num_threads = 0


def default_aihwkit_src() -> str | None:
    """.deps/aihwkit-1.2.0/src of this checkout (scripts/setup.sh unpacks it there), if present."""
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".deps", "aihwkit-1.2.0", "src")
    return src if os.path.isdir(src) else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=None, help="only the first N ResNet-50 layers")
    parser.add_argument("--repeats", type=int, default=2,
                        help="passes over the network, best counts; the first fills the buffer pool (default 2)")
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--aihwkit-src", default=os.environ.get("AIHWKIT_SRC", default_aihwkit_src()),
                        help="aihwkit 1.2.0's src/ folder (from its sdist): compare with its PCMLikeNoiseModel "
                             "(default: $AIHWKIT_SRC, else .deps/aihwkit-1.2.0/src where scripts/setup.sh unpacks it)")
    parser.add_argument("--no-numpy", action="store_true", help="skip the per-model NumPy comparison")
    args = parser.parse_args()
    layers = resnet50_layers(args.layers)
    n = sum(w.size for w in layers)
    cores = os.cpu_count() or 1
    print(f"ResNet-50: {len(layers)} layers, {n / 1e6:.2f} M weights; program + read at t = {T_READ:g} s; {cores} cores")
    if args.aihwkit_src:
        time_against_aihwkit(layers, cores, args.repeats, args.aihwkit_src)
    else:
        print("(no --aihwkit-src: skipping the aihwkit comparison; see the top of this file)")
    if args.no_numpy:
        return
    print()
    print(f"{'model':<18} {'C++ 1 thr':>12} {'C++ ' + str(cores) + ' thr':>12} {'NumPy':>12} {'C++/NumPy':>10}")
    print(f"{'':<18} {'Mweights/s':>12} {'Mweights/s':>12} {'Mweights/s':>12} {'per core':>10}")
    for name, model, numpy_fn in CASES:
        if args.models and name not in args.models:
            continue
        t1, tn, tnp = time_interleaved(model, numpy_fn, layers, cores, args.repeats)
        print(f"{name:<18} {n / t1 / 1e6:12.2f} {n / tn / 1e6:12.2f} {n / tnp / 1e6:12.2f} {tnp / t1:10.2f}")


if __name__ == "__main__":
    main()
