"""Page faults and CPU time of each PU pass of a run (docs/performance.md, section 3).

Runs ``aimcemu.run`` once in this process (ResNet-50 from the zoo by default, random images,
``layers="none"``) and times every PU pass it makes: the reference pass, then one per noisy
round.  Each pass is wrapped in getrusage(RUSAGE_SELF) (all threads of the process: the results
writer of the previous round, which runs during the pass, is counted too), so a line gives the
pass's wall time, user and system CPU seconds and minor page faults.  One JSON object per pass,
then one for the whole run (its peak RSS included).

    python3 scripts/pass_faults.py [--case aimc|digital] [--images 16] [--rounds 4] [--threads 2]

on the installed package (scripts/setup.sh); on a build of one's own, as docs/performance.md
("Reproduce") says: AIMCEMU_CORE_DIR=$PWD/build-bench/python python3 scripts/pass_faults.py
"""
from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np


def usage() -> tuple[float, float, float, int]:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), u.ru_utime, u.ru_stime, u.ru_minflt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=["aimc", "digital"], default="aimc")
    parser.add_argument("--net", default="resnet50")
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--inputs", type=Path, help="folder for the model and data-set files (default: temporary); "
                        "two runs given the same folder write results files that record the same input paths")
    parser.add_argument("--out", type=Path, help="keep the results file as OUT/<case>.h5 (default: temporary)")
    args = parser.parse_args()

    import aimcemu
    from aimcemu import _core, modelfile, rounds

    passes: list[dict] = []
    plain = rounds.run_network

    def timed(*a, **k):  # the runner and the round loop call rounds.run_network once per pass
        before = usage()
        out = plain(*a, **k)
        after = usage()
        passes.append({"pass": len(passes), "wall_s": after[0] - before[0], "user_s": after[1] - before[1],
                       "sys_s": after[2] - before[2], "minflt": after[3] - before[3]})
        return out

    rounds.run_network = timed
    with tempfile.TemporaryDirectory() as tmp:
        inputs = args.inputs or Path(tmp)
        inputs.mkdir(parents=True, exist_ok=True)
        net = _core.zoo.by_name(args.net)
        images = np.random.default_rng(3).integers(-128, 128, size=(args.images, *net.input_shape), dtype=np.int8)
        model, data = inputs / f"{args.net}.h5", inputs / f"{args.net}_data{args.images}.h5"
        if not model.exists():
            modelfile.save_model(net, model)
        if not data.exists():
            modelfile.save_dataset(images, np.zeros(args.images, dtype=np.int64), data, source="random")
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        extra = {"mapping": "all", "noise": "pcm_like", "rounds": args.rounds} if args.case == "aimc" else {}
        run = aimcemu.run
        start = usage()
        run(str(model), str(data), str(out / f"{args.case}.h5"), layers="none", threads=args.threads, **extra)
        end = usage()
    for p in passes:
        print(json.dumps(p))
    print(json.dumps({"run_wall_s": end[0] - start[0], "run_user_s": end[1] - start[1],
                      "run_sys_s": end[2] - start[2], "run_minflt": end[3] - start[3],
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
