"""A script that calls sweep() without `if __name__ == "__main__":` (as docs/sweeps.md's example
read) makes every spawned worker import it and start the sweep again, which fails; the workers
die before their first task.  The error says it was a start-up failure and names the main
guard; it said "exited with status 1 ... with fewer --workers if memory ran out"."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from hostile import tiny_files

UNGUARDED_SCRIPT = textwrap.dedent("""\
    import sys
    from aimcemu.sweeps import sweep
    from aimcemu.executors import WorkerDiedError

    model, data, output = sys.argv[1:4]
    try:
        sweep({"output": output, "model": model, "data": data, "noise": {"model": "pcm_like"}, "mapping": "all",
               "grid": {"noise.prog_noise_scale": [0.5, 1.0]}}, workers=1, progress=False)
    except WorkerDiedError as exc:
        print("WorkerDiedError:", exc)
        sys.exit(3)
    print("no error")
""")


def test_a_worker_that_dies_before_its_first_task_is_named_a_start_up_failure(tmp_path):
    model, data = tiny_files(tmp_path)
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED_SCRIPT)
    run = subprocess.run([sys.executable, str(script), str(model), str(data), str(tmp_path / "sweep")],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path, env=os.environ.copy())
    assert run.returncode == 3, run.stdout + run.stderr
    message = run.stdout
    assert "before it started any task (a start-up failure" in message
    assert 'if __name__ == "__main__":' in message
    assert "fewer --workers" not in message  # memory is not the likely cause here
    assert "rerun the same command" in message
