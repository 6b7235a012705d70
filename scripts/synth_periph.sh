#!/usr/bin/env bash
# Synthesizes the analog tile peripherals (rtl/pu_periph.sv, R_g = NIU_PERIPH_LANES lanes) with
# Yosys for AMD UltraScale+ (synth_xilinx -family xcup) and prints its resources beside the PU's
# (docs/peripherals.md quotes them):
#
#   scripts/synth_periph.sh [--json FILE] [--out DIR]
#
# Flattened (the block is small), so the counts include cross-module optimisation.  Counting as
# scripts/yosys_resources.py says.  Yosys estimates, not Vivado results.
set -euo pipefail
cd "$(dirname "$0")/.."

JSON="" OUT="build-synth"
while [ $# -gt 0 ]; do
  case "$1" in
    --json) JSON="$2"; shift 2 ;;
    --out)  OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "synth_periph.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
source scripts/synth_common.sh
generate_constants "$OUT"

read_sources "$OUT" rtl/pu_periph_sources.f

STAT="$OUT/synth_periph_stat.txt"
yosys -q -l "$OUT/synth_periph.log" -p "
  read_verilog -sv -I$OUT ${SOURCES[*]};
  synth_xilinx -family xcup -top pu_periph -flatten -noiopad;
  tee -o $STAT stat;
"

python3 - "$STAT" "$JSON" <<'PY'
import json, sys
sys.path.insert(0, "scripts")
from yosys_resources import cell_counts, resources
stat_path, json_path = sys.argv[1], sys.argv[2]
counts = resources(cell_counts(open(stat_path).read()))
report = {"block": "pu_periph", **{k: counts[k] for k in ("LUT", "FF", "DSP", "BRAM36")},
          "tool": "Yosys synth_xilinx -family xcup (flattened)"}
pu = {"LUT": 15500, "DSP": 258}   # PU1x (the paper's resources)
print("analog tile peripherals, R_g lanes (Yosys synth_xilinx -family xcup)")
for key in ("LUT", "FF", "DSP", "BRAM36"):
    ratio = f"  ({100.0 * report[key] / pu[key]:.1f} % of a PU1x)" if key in pu else ""
    print(f"  {key:8s} {report[key]}{ratio}")
if json_path:
    with open(json_path, "w") as f:
        json.dump(report, f, indent=1)
PY
