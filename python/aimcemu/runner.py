"""``aimcemu.run``: one inference study from model and data files to an HDF5 results file.

    summary = aimcemu.run()                        # the embedded default model, digital
    summary = aimcemu.run(mapping="all", noise={"model": "pcm_like"}, t=(0, 3600, 86400), chips=8,
                          drift_compensation=["none", "global"], output="pcm.h5")
    print(summary.format_accuracy_table())         # accuracy vs t per compensation: mean, std, min, max over chips

The run resolves its configuration once (aimcemu.config.RunConfig), loads and validates both
files, runs the noise-free reference bit-exactly on the PU functional model, then, when a
mapping puts layers on AIMC, calibrates drift compensation (aimcemu.calibration) and runs the
noisy rounds (aimcemu.rounds): for compensation in drift_compensation: for chip in
range(chips): for t in t: for round in range(rounds).  Under several compensations the same
(chip, t, round) gets the same NIU draws; only the factor alpha folded into the back-conversion
differs.  Programming noise and drift exponents are keyed by (seed, chip, layer), read noise by
(seed, chip, layer, round) and not by t, so the same chip drifts from the same programmed state
and sweeps over t use common random numbers.  Everything (reference, rounds, per-layer metrics,
accuracy, the resolved configuration) goes into one results file (docs/hdf5_layout.md), written
atomically: on any error no output file is left.  Details: docs/hybrid_runs.md.

This module keeps the names it always exported (parse_times, RunSummary, CALIBRATION_ROUND, ...);
they live in aimcemu.config, aimcemu.summary and aimcemu.calibration.
"""
from __future__ import annotations

import json
import os
import time
import traceback

import numpy as np

from . import _core, modelfile, niu, process_memory, rounds, validate
from .calibration import Alphas, calibrate, round_alpha
from .config import (CALIBRATION_ROUND, DRIFT_COMPENSATIONS, RUN_DEFAULTS, RunConfig, format_time,
                     load_yaml_config, parse_compensations, parse_times)
from .files import claim_new_file, new_folder_for
from .mapping import Mapping, Placement
from .noise import READOUT_FLOOR
from .reference import ContentDigest, ReferenceCache, compute_reference, process_cache
from .rounds import NoisyWeights, run_rounds
from .summary import LayerSummary, RunSummary

DEFAULTS = RUN_DEFAULTS  # the name this module has always exported

__all__ = ["run", "execute", "RunSummary", "LayerSummary", "DEFAULTS", "DRIFT_COMPENSATIONS", "CALIBRATION_ROUND",
           "READOUT_FLOOR", "format_time", "parse_times", "parse_compensations", "load_yaml_config",
           "niu_alpha_limit"]


def run(model=None, data=None, output=None, *, mapping=None, noise=None, peripherals=None, t=(0.0,), chips: int = 1,
        rounds: int = 1,
        seed: int = 0, drift_compensation: str | list[str] = "none", backend: str = "fast", threads: int = 0, layers="all",
        config: dict | str | os.PathLike | None = None, progress: bool = False, overwrite: bool = True,
        reuse_reference: bool | ReferenceCache = False) -> RunSummary:
    """Run a model file on a data set file and write a results file; returns a RunSummary.

    model:   model file path (docs/model_format.md); None = the embedded default model
    data:    data set file path; None = the test set shipped beside the model
    output:  results file path; None = results/<model>_<timestamp>.h5 (folder created; -2, -3, ...
             before .h5 when that name is taken: a default name never replaces a file)
    mapping: None (all digital, no noisy rounds) | "all" (every GEMM layer on AIMC) | a Mapping |
             a dict {"default": ..., "layers": {pattern: "aimc" | "digital" | {"device", "noise"}}} |
             a YAML mapping file (aimcemu.mapping)
    noise:   default noise of AIMC layers: {"model": name, **params}, a model name, or a noise
             model object (aimcemu.noise); default pcm_like.  A noise without a mapping = "all".
    peripherals: default analog tile peripherals of AIMC layers (aimcemu.peripherals): a preset
             ("aihwkit", "pcm", "ideal"), a dict of aihwkit IOParameters names, or
             "pcm,out_noise=0.02"; None = none.  Without a mapping = "all".
    t:       times since programming in seconds (strictly increasing, >= 0), or "0,1h,1d,1y"
    chips, rounds, seed: noisy rounds are compensation-major, then chip-major:
             for compensation, for chip, for t, for round
    drift_compensation: "none" | "global" | a list of both, e.g. ["none", "global"] or "none,global":
             each (chip, t, round) then runs under every one with the same NIU draws (docs/hybrid_runs.md)
    backend: the PU model's kernel ("fast"; the PU model lists the others); threads: 0 = all cores
    layers:  whose activations to store: "all", "none", or layer names (metrics are always kept)
    config:  the same options as a dict or a YAML file; explicit arguments override it
    progress: show a progress bar over the noisy rounds (tqdm, on stderr, only on a terminal)
    overwrite: replace an existing output file (default); False raises FileExistsError instead,
             at the very end, without touching the file that is there (sweep tasks use it)
    reuse_reference: False (default): compute the noise-free reference for this run alone;
             True: take it from this process's cache (aimcemu.reference.process_cache(), one
             entry) when an earlier run had the same network, images and kept layers, else compute
             and keep it there; or a ReferenceCache of your own.  The results file is the same
             either way (docs/hybrid_runs.md, "The reference, and reusing it across runs").

    Everything is checked before any work (docs/reliability.md): option ranges, the input files
    (regular files, validated by the loaders, read first in a checking process), the output path
    (never an input or a non-file), and that the run's arrays fit in this machine's memory.
    """
    _check_switches(progress=progress, overwrite=overwrite)
    cfg = RunConfig.resolve(config, {
        "model": model, "data": data, "output": output, "mapping": mapping, "noise": noise,
        "peripherals": peripherals, "t": t, "chips": chips, "rounds": rounds, "seed": seed, "drift_compensation": drift_compensation, "backend": backend,
        "threads": threads, "layers": layers})
    return execute(cfg, progress, overwrite, reuse_reference)


def execute(cfg: RunConfig, progress: bool = False, overwrite: bool = True,
            reuse_reference: bool | ReferenceCache = False) -> RunSummary:
    """Runs a resolved configuration (aimcemu.run after parsing; a sweep's worker directly)."""
    cache = _reference_cache(reuse_reference)  # checked before any work
    # A sweep worker's later runs on the same files take the model and data set its last run
    # loaded (modelfile.process_inputs: only in a process that keeps freed memory).  Not with a
    # mapping of the caller's own class: its resolve() gets the network, and a change it made there
    # would carry into every later run of the kept network.
    keep = cache is not None and (cfg.mapping is None or type(cfg.mapping) is Mapping)
    inputs = modelfile.load_inputs(cfg.model, cfg.data, modelfile.process_inputs() if keep else None)
    try:
        net = inputs.net
        out_path = cfg.output_path(net.name)  # checked before the data set is read
        placements = cfg.placements(net)
        coordinates = cfg.round_coordinates()
        images, labels = inputs.dataset()
    finally:
        inputs.close()
    kept = inputs.kept
    net_layers = net.layers  # the binding copies the list on every access
    need = validate.check_run_memory(len(labels), activation_bytes_held(net_layers, net.output_index(), stored_layer_names(cfg, net_layers),
                                                                placements, len(coordinates)),
                              int(np.prod(tuple(net_layers[net.output_index()].out_shape))), len(coordinates),
                              cfg.data, cfg.sources.get("chips", "<arguments>"))
    process_memory.make_room(need, kept)  # what the process keeps from earlier runs is a cache
    source = cfg.sources.get("output", "<arguments>")
    if not cfg.output_named_by_default:
        # A name the user gave: its folder made now (files.output_file found that it can be) and
        # taken away again, with the parents made for it, if the run fails.
        with new_folder_for(out_path.parent, "output", source):
            try:
                return _run_and_write(cfg, net, images, labels, placements, coordinates, kept, cache, out_path,
                                      overwrite, progress)
            except BaseException as exc:
                traceback.clear_frames(exc.__traceback__)   # the results writer's temporary file goes with them
                raise
    # A default name is a new file, never an existing one's: claimed (created empty, exclusively,
    # with its folder) only now that the run is about to write, and removed if the run fails,
    # with the folders the claim created.
    claim = claim_new_file(out_path, "output", source)
    try:
        return _run_and_write(cfg, net, images, labels, placements, coordinates, kept, cache, claim.path, True,
                              progress)
    except BaseException as exc:
        # The failed run's results writer removes its temporary file (beside the claimed one)
        # only when it goes, and the error's traceback keeps it (a local of the frames the error
        # passed) until the caller drops the error: the folder would not be empty yet.
        traceback.clear_frames(exc.__traceback__)
        claim.release()
        raise


def _run_and_write(cfg: RunConfig, net, images, labels, placements, coordinates, kept, cache, out_path, overwrite: bool,
                   progress: bool) -> RunSummary:
    """The reference, the calibration and the noisy rounds, written to `out_path` (execute, once
    every check has passed)."""
    net_layers = net.layers
    resolved = cfg.stored(net, out_path, len(labels), placements, len(coordinates))

    # The reference cache's key hashes the weights and images (~16 ms for ResNet-50) on a thread
    # while this one builds the emulator (about 10 ms with the GIL) and the results writer (without it).
    digest = kept.content if kept is not None else None
    content = ContentDigest(net, images) if cache is not None and digest is None else None
    try:
        # The resolved count, not 0: the core then runs the threads the stored config's threads_used names.
        noisy = NoisyWeights(net, placements, cfg.seed, cfg.threads_used) if placements is not None else None
        start = time.perf_counter()
        alphas, capped = calibrate(noisy, cfg) if noisy is not None else ({}, [])
        calibration_s = time.perf_counter() - start
        resolved["drift_alpha"] = {net_layers[i].name: per_chip for i, per_chip in alphas.items()}
        resolved["drift_alpha_capped"] = capped

        start = time.perf_counter()
        writer = _core.ResultsWriter(os.fspath(out_path), net, labels, coordinates,
                                     json.dumps(resolved, sort_keys=True), cfg.layers, 1, overwrite)
        write_s = time.perf_counter() - start
    except BaseException:
        if content is not None:
            content.join()  # no thread outlives a failed run
        raise

    # The reference holds only what the file needs (stored layers and the output; every layer when
    # noisy rounds compare with it): a digital ResNet-50 run would otherwise keep every layer.
    # The PU's pass copies those layers straight into it; the writer shares it, without a copy.
    needed = [i for i in range(len(net_layers)) if writer.reference_needed(i)]
    start = time.perf_counter()
    if cache is None:
        reference = compute_reference(net, images, needed, cfg.backend, cfg.threads_used)
    else:
        if digest is None:
            digest = content.result()
            if kept is not None:
                kept.content = digest  # the kept inputs' key, computed once
        reference, _ = cache.get_or_compute(net, images, needed, cfg.backend, cfg.threads_used, digest)
    inference_s = time.perf_counter() - start

    start = time.perf_counter()
    writer.share_reference(reference)
    # NumPy is needed only when no layer is on AIMC (every round is then the reference): read-only
    # views of the shared bytes, no copy.
    round_reference = None
    if noisy is not None and not noisy.clean:
        held = set(needed)
        round_reference = [reference.layer(i, net) if i in held else None for i in range(len(net_layers))]
    reference = None
    _write_placements(writer, placements, alphas, cfg)
    write_s += time.perf_counter() - start
    timing = {}
    if noisy is not None:
        t_index = {t: k for k, t in enumerate(cfg.t)}
        timing = run_rounds(net, images, cfg, noisy,
                            lambda i, chip, t, name: round_alpha(alphas, i, chip, t_index[t], name),
                            round_reference, writer, progress)
    start = time.perf_counter()
    try:
        writer.commit()
    except _core.FormatError:
        if not overwrite and out_path.exists():
            raise FileExistsError(f"{out_path}: exists; not replaced (overwrite=False)") from None
        raise
    write_s += time.perf_counter() - start + timing.get("write_s", 0.0)
    inference_s += timing.get("inference_s", 0.0)
    return _summary(cfg, net, out_path, labels, writer, placements, coordinates, resolved["drift_alpha"], capped,
                    inference_s, write_s, calibration_s + timing.get("noise_s", 0.0))


def _check_switches(**switches) -> None:
    """aimcemu.run's on/off arguments are True or False: a string such as 'no' is truthy and
    would silently mean yes (or reach the results writer as a binding's TypeError)."""
    for name, value in switches.items():
        if not isinstance(value, (bool, np.bool_)):
            raise validate.fail("<arguments>", name, f"expected True or False, got {validate.short_repr(value)}")


def _reference_cache(reuse_reference: bool | ReferenceCache) -> ReferenceCache | None:
    """The cache a run takes its reference from: None (no reuse), this process's, or the caller's."""
    if isinstance(reuse_reference, ReferenceCache):
        return reuse_reference
    if reuse_reference is True:
        return process_cache()
    if reuse_reference is False or reuse_reference is None:
        return None
    raise validate.fail("<arguments>", "reuse_reference",
                        f"expected True, False or an aimcemu.reference.ReferenceCache, got {reuse_reference!r}")


def stored_layer_names(cfg: RunConfig, net_layers) -> set[str]:
    """The layers whose activations the results file stores (the run's `layers` selection); a name
    the network does not have is an error naming where the selection came from (the config file)."""
    selection = cfg.layers
    names = {l.name for l in net_layers}
    if selection in ("all", "none"):
        return names if selection == "all" else set()
    for name in selection:
        if name not in names:
            raise validate.fail(cfg.sources.get("layers", "<arguments>"), "layers",
                                f"no layer named '{_core.printable(name.encode())}' in the model {cfg.model}")
    return set(selection)


def activation_bytes_held(net_layers, output_index: int, stored: set[str], placements, noisy_rounds: int) -> int:
    """Bytes of activations per image that a run holds at its peak, as execute() and run_rounds
    keep them (int8, one byte per value):
      * a run without AIMC rounds keeps only the stored layers and the output, once (the
        reference the PU's pass fills and the results writer shares; aimcemu.reference);
      * with noisy rounds the reference holds every layer (each round's metrics compare against
        it; NumPy sees it through views, never a copy), and at most two rounds' stored layers
        and output are alive: one computed, one being written.
    A reference reused from a cache (reuse_reference) is the same one object, not another copy."""
    sizes = [int(l.out_shape.h) * int(l.out_shape.w) * int(l.out_shape.c) for l in net_layers]
    kept = sum(size for i, (l, size) in enumerate(zip(net_layers, sizes)) if l.name in stored or i == output_index)
    if placements is None or noisy_rounds == 0:
        return kept
    return sum(sizes) + 2 * kept


def _write_placements(writer, placements: list[Placement] | None, alphas: Alphas, cfg: RunConfig) -> None:
    """Per layer: the attribute device ("digital"/"aimc") and, for AIMC layers, noise_model,
    peripherals (its resolved config as JSON, "null" for none) and the dataset drift_alpha [round] (the factor folded into that round's NIU program)."""
    if placements is None:
        return
    t_index = {t: k for k, t in enumerate(cfg.t)}
    for p in placements:
        writer.set_layer_attribute(p.index, "device", p.device)
        if p.is_aimc:
            writer.set_layer_attribute(p.index, "noise_model", p.noise["model"])
            writer.set_layer_attribute(p.index, "peripherals", json.dumps(p.peripherals, sort_keys=True))
            per_round = [round_alpha(alphas, p.index, chip, t_index[t], name)
                         for _, chip, t, name in cfg.round_coordinates()]
            writer.set_layer_series(p.index, "drift_alpha", np.asarray(per_round, dtype=np.float64))


def _summary(cfg: RunConfig, net, out_path, labels, writer, placements, coordinates, drift_alpha: dict, capped: list[dict],
             inference_s: float, write_s: float, noise_s: float) -> RunSummary:
    net_layers = net.layers
    stored = stored_layer_names(cfg, net_layers)
    device = {p.index: p for p in placements} if placements else {}
    return RunSummary(
        path=os.fspath(out_path), model=net.name, images=int(len(labels)), accuracy=writer.reference_accuracy,
        round_accuracy=list(writer.round_accuracy),
        layers=[LayerSummary(l.name, str(l.kind.name), tuple(l.out_shape), l.name in stored,
                             device[i].device if i in device else "digital",
                             device[i].noise["model"] if i in device and device[i].is_aimc else None)
                for i, l in enumerate(net_layers)],
        inference_s=inference_s, write_s=write_s, noise_s=noise_s,
        round_chip=[c[1] for c in coordinates], round_t=[c[2] for c in coordinates],
        niu_round=[c[0] for c in coordinates], drift_alpha=drift_alpha, drift_alpha_capped=capped,
        drift_compensation=cfg.drift_compensation, round_compensation=[c[3] for c in coordinates])


def niu_alpha_limit(constants: dict, absmax: int, out_bits: int = 8) -> float:
    """The largest drift-compensation alpha whose back-conversion scale fits the NIU: niu.max_alpha,
    which the NIU compiler computes from the constants it was built with (docs/niu_datapath.md
    section 3).  `constants` (niu.constants()) is accepted for compatibility and not needed."""
    del constants
    return niu.max_alpha(absmax, out_bits)
