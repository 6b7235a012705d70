"""The noisy rounds of a run: the NIU writes each round's weights, the PU runs on them.

``NoisyWeights`` is the NIU side of a run.  It holds the run's emulator (whose HBM clean region
is the one copy of the AIMC layers' clean weights it keeps, with their abs-max taken once) and one
noise model object per distinct noise config (built when the configuration was resolved), and
compiles one NIU program per noise model for a (chip, round, t, alpha).  ``run_rounds`` runs
every noisy round through the emulation loop (``_core.niu.Emulator``, emulator/emulator.hpp),
as through the hardware's HBM: the bit-exact NIU model reads the clean region, writes the noisy
INT8 weights into the back buffers and publishes them; the PU leases that round and runs the
network from the leased buffers; digital layers keep their clean weights.  During that pass the
PU takes the metrics of every layer the results file does not store (``RoundMetrics``,
emulator/round_metrics.hpp); only the stored layers and the output come back to Python.

Each layer's RNG key is its index in the network, so its draws do not depend on which other
layers are mapped to AIMC.
"""
from __future__ import annotations

import json
import queue
import signal
import threading
import time
from typing import Any, Callable

import numpy as np

from . import _core, niu
from .config import CALIBRATION_ROUND, RunConfig
from .mapping import Placement
from .noise import NoiseModel


def run_network(net, images, backend: str, threads: int, weights: dict | None = None,
                peripherals=None, keep: list[int] | None = None, metrics=None, into=None) -> list[np.ndarray | None]:
    """Per-layer int8 activations [N, H, W, C] from the PU functional model.  `weights`
    ({layer index: int8 array}) replaces the weights the PU reads; a PublishedRound instead
    runs the PU on that round's lease of the emulator's HBM.  `peripherals` (_core.niu.Peripherals,
    see peripheral_hook) applies the AIMC layers' DACs, output noise and ADCs.  `keep` (layer
    indices; None = every layer) limits what comes back; the other layers come back as None.
    `metrics` (a published round only: ResultsWriter.round_metrics()) takes the metrics of the
    layers the results file does not store during the pass; those come back as None.  `into` (a
    _core.ReferenceActivations, not a published round) receives every layer it holds during the
    pass and is sealed (aimcemu.reference)."""
    if isinstance(weights, PublishedRound):
        if keep is not None or into is not None:
            raise ValueError("keep, into: a published round returns every layer (or those `metrics` leaves)")
        extra = {} if peripherals is None else {"peripherals": peripherals}
        if metrics is not None:
            extra["metrics"] = metrics
        _, activations = weights.emulator.run_published(images, backend, threads, weights.round, **extra)
        return activations
    if metrics is not None:
        raise ValueError("metrics: only a published round takes its metrics during the pass")
    if not hasattr(_core, "run_network"):
        raise RuntimeError("this aimcemu._core has no run_network (the PU functional model is not built in)")
    return _core.run_network(net, images, backend, threads, weights, keep, peripherals=peripherals, into=into)


def peripheral_settings(net, placements: list[Placement]) -> list | None:
    """The core's per-layer peripherals settings (None for layers without), or None when no
    layer has peripherals."""
    from .peripherals import core_settings

    settings: list = [None] * len(net.layers)
    for p in placements:
        if p.is_aimc and p.peripherals is not None:
            settings[p.index] = core_settings(p.peripherals, "<config>", f"peripherals.{p.name}")
    return settings if any(s is not None for s in settings) else None


def peripheral_hook(net, settings: list | None, seed: int, chip: int, round_id: int):
    """The peripherals of one noisy round: their output noise is keyed by (seed, chip, layer,
    round, image), like the NIU's read noise by (seed, chip, layer, round)."""
    return None if settings is None else _core.niu.Peripherals(net, settings, seed, chip, round_id)


def check_activations(layers, activations, images: int) -> None:
    """The PU model returned one [images, H, W, C] array per layer (an internal consistency check)."""
    if len(activations) != len(layers):
        raise RuntimeError(f"run_network returned {len(activations)} layers, the model has {len(layers)}")
    for layer, acts in zip(layers, activations):
        if acts is None:  # not kept (run_network's keep)
            continue
        expected = (images, *tuple(layer.out_shape))
        if tuple(np.shape(acts)) != expected:
            raise RuntimeError(f"run_network: layer {layer.name} gave shape {np.shape(acts)}, expected {expected}")


class PublishedRound:
    """A round the NIU published in the emulator's HBM: `round` is the emulator's round id, which
    the PU's lease must hold.  The noisy weights stay in the HBM (emulator.weights(i) reads one
    back); nothing is copied to Python per round."""

    def __init__(self, emulator, round_id: int):
        self.emulator, self.round = emulator, round_id

    def read_back(self) -> dict[int, np.ndarray]:
        """{layer index: noisy int8 weights} of every AIMC layer, copied from the HBM (for tests
        and inspection; valid until the next round is published)."""
        return {i: self.emulator.weights(i) for i in self.emulator.aimc_layers}


class NoisyWeights:
    """The NIU side of a run: one group of AIMC layers per noise config, each group's program
    compiled per (chip, round, t, alpha) from the group's model object; runs them in the
    emulator's HBM for noisy rounds (write_round) or directly for calibration readouts (weights).

    The emulator is built here, when the run has AIMC layers: its HBM's clean region is the one
    copy of their clean weights the NIU side holds (`clean` views it, read-only), and each
    layer's clean abs-max is taken there once per run, not once per program."""

    def __init__(self, net, placements: list[Placement], seed: int, threads: int):
        self.seed, self.threads = seed, threads
        self.placements = placements
        layers = net.layers
        aimc = [p.index for p in placements if p.is_aimc]
        self.names = {i: layers[i].name for i in aimc}
        self._readouts: dict[tuple[int, float], dict[int, float]] = {}
        # One group per distinct noise config, in order of first appearance: (its model object,
        # the layer indices).
        self.groups: dict[str, tuple[NoiseModel, list[int]]] = {}
        for p in placements:
            if p.is_aimc:
                self.groups.setdefault(json.dumps(p.noise, sort_keys=True), (p.model, []))[1].append(p.index)
        self._emulator = _core.niu.Emulator(net, self.aimc_order()) if aimc else None
        self.clean = {i: self._emulator.clean_weights(i) for i in aimc}
        self.absmax = dict(zip(self._emulator.aimc_layers, self._emulator.clean_absmax)) if aimc else {}

    def programs(self, chip: int, round_id: int, t: float, alpha: dict[int, float] | None = None) -> list:
        """One NIU program per noise model for (chip, round, t, alpha), in self.groups order: their
        layers, concatenated, are the AIMC layers in the order of self.aimc_order()."""
        return [niu.compile_program(model, [self.clean[i] for i in indices], seed=self.seed, chip=chip,
                                    round=round_id, t=t, alpha=[1.0 if alpha is None else alpha[i] for i in indices],
                                    layer_ids=indices, layer_absmax=[self.absmax[i] for i in indices])
                for model, indices in self.groups.values()]

    def aimc_order(self) -> list[int]:
        """The AIMC layer indices in the order of the concatenated programs' layers."""
        return [i for _, indices in self.groups.values() for i in indices]

    def weights(self, chip: int, round_id: int, t: float, alpha: dict[int, float] | None = None) -> dict[int, np.ndarray]:
        """{layer index: noisy int8 weights} of every AIMC layer, as the NIU writes them (the
        calibration readouts use this; noisy rounds go through the emulator's HBM)."""
        out = {}
        for program, (_, indices) in zip(self.programs(chip, round_id, t, alpha), self.groups.values()):
            for position, i in enumerate(indices):
                out[i] = program.apply(position, self.clean[i], self.threads)
        return out

    def emulator(self):
        """The emulation loop holding the run's network in the modelled HBM with this run's AIMC
        layers (None without AIMC layers)."""
        return self._emulator

    def write_round(self, emulator, chip: int, round_id: int, t: float, alpha: dict[int, float]) -> PublishedRound:
        """The NIU writes every AIMC layer's noisy weights for (chip, round, t, alpha) into the
        emulator's back buffers and publishes them; returns that round (its weights stay there)."""
        programs = self.programs(chip, round_id, t, alpha)
        return PublishedRound(emulator, emulator.write_round([p.core_program for p in programs], self.threads))

    def readout(self, chip: int, t: float) -> dict[int, float]:
        """Calibration readout of every AIMC layer at time t: mean |W| of the uncompensated NIU
        weights in the reserved calibration round (a one-hot input per row reads W itself).
        Computed once per (chip, t) and kept, as t = 0 serves both as baseline and as a time."""
        key = (chip, float(t))
        if key not in self._readouts:
            noisy = self.weights(chip, CALIBRATION_ROUND, t)
            self._readouts[key] = {i: float(np.mean(np.abs(w.astype(np.float64)))) if w.size else 0.0
                                   for i, w in noisy.items()}
        return self._readouts[key]

    def alpha_limit(self, layer: int) -> float:
        """The largest alpha the NIU's back-conversion scale holds for `layer` (8-bit output)."""
        return niu.max_alpha(self.absmax[layer])


class DeferredInterrupts:
    """While the round loop runs, SIGINT and SIGTERM handlers that raise (Ctrl-C's
    KeyboardInterrupt; `aimcemu run` makes SIGTERM raise it too) only record the signal, and
    check() (the loop's own points, between rounds and their C++ calls) runs the handler there.
    Why: a handler's exception is raised at whatever bytecode the main thread is at, which can be
    inside queue.Queue or threading.Condition code while it hands a round to the writer thread;
    one raised there lost the writer's wake-up, and `aimcemu run` hung after Ctrl-C, the main
    thread joining a writer that waited for a round that never came.  A signal that comes while
    the main thread runs C++ (the NIU, the PU) is raised as soon as that call returns, as before.
    Outside the main thread (Dask worker threads) it changes nothing: only the main thread gets
    Python's signal handlers."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._previous: dict = {}
        self._pending: list[tuple[int, Any]] = []

    def __enter__(self) -> "DeferredInterrupts":
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                handler = signal.getsignal(signum)
                if callable(handler):  # SIG_DFL and SIG_IGN stay as they are
                    self._previous[signum] = handler
                    signal.signal(signum, self._record)
        return self

    def _record(self, signum, frame) -> None:
        self._pending.append((signum, frame))

    def check(self) -> None:
        """Runs the handler of a signal that came since (it raises, as it would have)."""
        if self._pending:
            signum, frame = self._pending.pop(0)
            self._previous[signum](signum, frame)

    def __exit__(self, kind, value, traceback) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        if kind is None:
            self.check()


class RoundWriter:
    """Writes noisy rounds into a results file on a background thread, so that writing round r
    overlaps computing round r + 1: the metrics the PU took during its pass (set_round_metrics),
    then every layer that came back (set_round: its metrics against the reference, predictions,
    the HDF5 writes); both run without the GIL, as does the PU.

    At most one round is in the writer (waiting or being written) while the caller computes the
    next, so a run holds at most two rounds' returned activations besides the reference.  An error in the
    writer (a FormatError naming the file and the field) is raised in the caller at its next
    hand-over or at close(); the file is then never committed, so the writer's atomic file leaves
    nothing behind."""

    def __init__(self, writer):
        self._writer = writer
        self._slot: queue.Queue = queue.Queue(maxsize=1)
        self._error: BaseException | None = None
        self.wait_s = 0.0  # time the caller waited for the writer (what the overlap did not hide)
        self._thread = threading.Thread(target=self._work, name="aimcemu-results-writer", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            item = self._slot.get()
            try:
                if item is None:
                    return
                if self._error is None:  # after an error the rest is dropped: the file will not be committed
                    position, activations, metrics = item
                    if metrics is not None:
                        self._writer.set_round_metrics(position, metrics)
                    for index, layer_acts in enumerate(activations):
                        if layer_acts is not None:  # None: measured during the pass (metrics)
                            self._writer.set_round(position, index, layer_acts)
            except BaseException as exc:  # handed to the caller, whatever it is
                self._error = exc
            finally:
                item = activations = metrics = None  # the round is freed now, not at the next hand-over
                self._slot.task_done()

    def _wait_idle(self) -> None:
        """Waits until the writer has written everything handed over; raises its error."""
        start = time.perf_counter()
        self._slot.join()
        self.wait_s += time.perf_counter() - start
        if self._error is not None:
            raise self._error

    def put(self, position: int, activations: list[np.ndarray | None], metrics=None) -> None:
        """Hands round `position` over (after the previous one is written): its activations (None
        for a layer `metrics`, the round's RoundMetrics, measured during the pass)."""
        self._wait_idle()
        self._slot.put((position, activations, metrics))

    def close(self) -> None:
        """Waits for the last round and stops the thread; raises the writer's error, if any.
        Called on every path out of the round loop, so no thread outlives it."""
        try:
            self._wait_idle()
        finally:
            self._slot.put(None)
            self._thread.join()


def run_rounds(net, images, cfg: RunConfig, noisy: NoisyWeights, round_alpha: Callable[[int, int, float, str], float],
               reference: list[np.ndarray] | None, writer, progress: bool = False) -> dict:
    """Runs and writes every noisy round of `cfg`; `round_alpha(layer, chip, t, compensation)`
    is the factor folded into a round's NIU program; `reference` (the reference activations) is
    read only when no layer is on AIMC (may be None otherwise).  Rounds are written by a
    RoundWriter while the next one runs.  Returns the time spent in each part; write_s is the time the round loop
    waited for the writer."""
    times = {"noise_s": 0.0, "inference_s": 0.0, "write_s": 0.0}
    net_layers = net.layers
    emulator = noisy.emulator()
    settings = peripheral_settings(net, noisy.placements)
    bar = cfg.round_coordinates()
    if progress:  # tqdm's import costs ~50 ms of every run's wall time; only a bar needs it
        from tqdm import tqdm

        bar = tqdm(bar, desc="noisy rounds", unit="round", disable=None, leave=False)
    with DeferredInterrupts() as interrupts:
        background = RoundWriter(writer)
        try:
            for position, (round_id, chip, t, compensation) in enumerate(bar):
                interrupts.check()
                start = time.perf_counter()
                published = noisy.write_round(emulator, chip, round_id, t, {
                    i: round_alpha(i, chip, t, compensation) for i in noisy.clean}) if emulator is not None else None
                times["noise_s"] += time.perf_counter() - start
                interrupts.check()
                start = time.perf_counter()
                # With no AIMC layer every round is the reference, bit for bit: no need to run it again.
                hook = peripheral_hook(net, settings, cfg.seed, chip, round_id)
                extra = {} if hook is None else {"peripherals": hook}
                # The PU compares each layer the file does not store with the reference as it makes it;
                # only the stored layers and the output come back to Python.
                metrics = writer.round_metrics() if published else None
                activations = (run_network(net, images, cfg.backend, cfg.threads_used, published, metrics=metrics, **extra)
                               if published else reference)
                check_activations(net_layers, activations, len(images))
                times["inference_s"] += time.perf_counter() - start
                interrupts.check()
                background.put(position, activations, metrics)
                activations = metrics = None
        finally:
            background.close()
            times["write_s"] = background.wait_s
        return times
