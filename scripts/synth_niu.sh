#!/usr/bin/env bash
# Synthesizes the NIU RTL for `--lanes N` with Yosys for AMD UltraScale+ (synth_xilinx -family
# xcup) and writes the resource report (docs/niu_rtl.md quotes it):
#
#   scripts/synth_niu.sh --lanes N [--json FILE] [--out DIR] [--build DIR]
#
#   --json FILE  {"lanes", "LUT", "FF", "DSP", "BRAM36", "URAM", "weights_per_cycle", ...} plus the
#                split of LUTs (logic, shift registers, distributed RAM), a per-module table and
#                rtl_sha256, the digest of the RTL synthesized (scripts/yosys_resources.py)
#   --out DIR    work directory for the generated constants, the Yosys log and stats (build-synth)
#   --build DIR  the CMake build with the co-simulation (build): weights_per_cycle is measured by
#                running its test_niu_cosim_l<N> on a 64000-weight layer with an ideal bus
#
# Counting as scripts/yosys_resources.py says (Vivado's "CLB LUTs": logic, shift-register and
# distributed-RAM LUTs; BRAM36 = RAMB36E2 + RAMB18E2 / 2).  Hierarchical (not
# flattened): each distinct module is synthesized once and `stat -top niu` multiplies by the
# instance counts, so cross-module optimisation is not counted.  Yosys estimates, not Vivado
# results.
set -euo pipefail
cd "$(dirname "$0")/.."

LANES="" JSON="" OUT="build-synth" BUILD="build"
while [ $# -gt 0 ]; do
  case "$1" in
    --lanes) LANES="$2"; shift 2 ;;
    --json)  JSON="$2"; shift 2 ;;
    --out)   OUT="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "synth_niu.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
source scripts/synth_common.sh
generate_constants "$OUT"

# The lane count must be one the RTL supports, and one whose co-simulation model is built.
python3 - "$OUT/niu_constants.json" "$LANES" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
lanes = sys.argv[2]
if not lanes.isdigit() or int(lanes) not in data["lanes_supported"]:
    sys.exit(f"synth_niu.sh: --lanes: the NIU has {', '.join(map(str, data['lanes_supported']))} lanes, got '{lanes}'")
PY

read_sources "$OUT" rtl/sources.f

STAT="$OUT/synth_niu_l${LANES}_stat.txt"
yosys -q -l "$OUT/synth_niu_l${LANES}.log" -p "
  read_verilog -sv -I$OUT ${SOURCES[*]};
  chparam -set Lanes $LANES niu;
  synth_xilinx -family xcup -top niu -noiopad;
  tee -o $STAT stat -top niu;
"

# weights_per_cycle from the co-simulation (ideal bus, long burst), rebuilt first if the RTL changed.
RATE_JSON=""
COSIM="$BUILD/rtl/test_niu_cosim_l$LANES"
if [ -f "$BUILD/CMakeCache.txt" ]; then
  cmake --build "$BUILD" --target "test_niu_cosim_l$LANES" >/dev/null 2>&1 || true
fi
if [ -x "$COSIM" ]; then
  AIMCEMU_NIU_RATE_DIR="$(cd "$OUT" && pwd)" "$COSIM" --gtest_filter='NiuCosimThroughput.*' >/dev/null
  RATE_JSON="$OUT/niu_rate_lanes$LANES.json"
else
  echo "synth_niu.sh: no co-simulation model for $LANES lanes in $BUILD/rtl (built: those of NIU_LANES_BUILT);" \
       "weights_per_cycle is left null" >&2
fi

# The RTL digest (generated constants, ROM contents, rtl/ files) lets a test tell a committed
# result from one that predates an RTL change (tests/arch/check_synth_fresh.py).
python3 - "$STAT" "$LANES" "$RATE_JSON" "$JSON" "${SOURCES[0]}" "$OUT/niu_gauss_rom.svh" "${SOURCES[@]:1}" <<'PY'
import json, sys
sys.path.insert(0, "scripts")
from yosys_resources import cell_counts, hierarchy_top, per_module, resources, rtl_digest
stat_path, lanes, rate_path, json_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rtl_files = sys.argv[5:]
text = open(stat_path).read()
counts = resources(cell_counts(hierarchy_top(text)))
rate = round(json.load(open(rate_path))["weights_per_cycle"], 3) if rate_path else None
report = {"lanes": lanes, **{k: counts[k] for k in ("LUT", "FF", "DSP", "BRAM36", "URAM")},
          "weights_per_cycle": rate,
          **{k: counts[k] for k in ("LUT_logic", "LUT_shift_registers", "LUT_distributed_ram", "CARRY8")},
          "tool": "Yosys synth_xilinx -family xcup (hierarchical)",
          "rtl_sha256": rtl_digest(rtl_files)}
report["per_module"] = per_module(text)

print(f"NIU, {lanes} lanes (Yosys synth_xilinx -family xcup)")
for key in ("LUT", "LUT_logic", "LUT_shift_registers", "LUT_distributed_ram", "FF", "DSP", "BRAM36", "URAM", "weights_per_cycle"):
    print(f"  {key:22s} {report[key]}")
print("  per module (all instances): instances LUT FF DSP BRAM36")
for name, e in report["per_module"].items():
    print(f"    {name:24s} {e['instances']:5d} {e['LUT']:7d} {e['FF']:7d} {e['DSP']:5d} {e['BRAM36']:6g}")
if json_path:
    with open(json_path, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
PY
