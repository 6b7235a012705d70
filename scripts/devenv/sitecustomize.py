# Development only: drops scikit-build-core's editable-install import finder, so that with
# PYTHONPATH=scripts/devenv:<checkout>/python a second checkout (a git worktree) imports its own
# aimcemu package instead of the one `pip install -e .` was run from.  See docs/DEVELOPING.md.
import sys
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ScikitBuildRedirectingFinder"]
