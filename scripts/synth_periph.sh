#!/usr/bin/env bash
# Synthesizes the analog tile peripherals (rtl/pu_periph.sv, R_g = NIU_PERIPH_LANES lanes) with
# Yosys for AMD UltraScale+ (synth_xilinx -family xcup) and prints its resources beside the PU's
# (docs/peripherals.md quotes them):
#
#   scripts/synth_periph.sh [--json FILE] [--out DIR]
#
# Flattened (the block is small), so the counts include cross-module optimisation.  Counting as
# scripts/synth_niu.sh: LUT = logic LUTs + shift-register LUTs + distributed-RAM LUTs; BRAM36 =
# RAMB36E2 + RAMB18E2 / 2.  Yosys estimates, not Vivado results.
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
mkdir -p "$OUT"
python3 rtl/niu_gen.py --out-dir "$OUT" >/dev/null

SOURCES=("$OUT/niu_constants.svh")
while read -r f; do
  case "$f" in ''|\#*) ;; *) SOURCES+=("rtl/$f") ;; esac
done < rtl/pu_periph_sources.f

STAT="$OUT/synth_periph_stat.txt"
yosys -q -l "$OUT/synth_periph.log" -p "
  read_verilog -sv -I$OUT ${SOURCES[*]};
  synth_xilinx -family xcup -top pu_periph -flatten -noiopad;
  tee -o $STAT stat;
"

python3 - "$STAT" "$JSON" <<'PY'
import json, re, sys
stat_path, json_path = sys.argv[1], sys.argv[2]
text = open(stat_path).read()
cells = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s+(\w+)\s+(\d+)\s*$", text, re.M)}
LUTRAM = {"RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4, "RAM512X1S": 8, "RAM32X1D": 2,
          "RAM64X1D": 2, "RAM128X1D": 4, "RAM256X1D": 8, "RAM32M": 4, "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8}
count = lambda names: sum(cells.get(n, 0) for n in names)
report = {
    "block": "pu_periph",
    "LUT": count([f"LUT{i}" for i in range(1, 7)]) + count(["SRL16E", "SRLC32E"])
           + sum(cells.get(k, 0) * v for k, v in LUTRAM.items()),
    "FF": count(["FDRE", "FDSE", "FDCE", "FDPE"]),
    "DSP": count(["DSP48E2"]),
    "BRAM36": count(["RAMB36E2"]) + count(["RAMB18E2"]) / 2,
    "tool": "Yosys synth_xilinx -family xcup (flattened)",
}
pu = {"LUT": 15500, "DSP": 258}   # PU1x (the paper's resources)
print("analog tile peripherals, R_g lanes (Yosys synth_xilinx -family xcup)")
for key in ("LUT", "FF", "DSP", "BRAM36"):
    ratio = f"  ({100.0 * report[key] / pu[key]:.1f} % of a PU1x)" if key in pu else ""
    print(f"  {key:8s} {report[key]}{ratio}")
if json_path:
    with open(json_path, "w") as f:
        json.dump(report, f, indent=1)
PY
