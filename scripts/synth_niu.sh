#!/usr/bin/env bash
# Synthesizes the NIU RTL for `--lanes N` with Yosys for AMD UltraScale+ (synth_xilinx -family
# xcup) and writes the resource report (docs/niu_rtl.md quotes it):
#
#   scripts/synth_niu.sh --lanes N [--json FILE] [--out DIR] [--build DIR]
#
#   --json FILE  {"lanes", "LUT", "FF", "DSP", "BRAM36", "URAM", "weights_per_cycle", ...} plus the
#                split of LUTs (logic, shift registers, distributed RAM) and a per-module table
#   --out DIR    work directory for the generated constants, the Yosys log and stats (build-synth)
#   --build DIR  the CMake build with the co-simulation (build): weights_per_cycle is measured by
#                running its test_niu_cosim_l<N> on a 64000-weight layer with an ideal bus
#
# Counting: LUT = logic LUTs + LUTs used as shift registers (SRL16E/SRLC32E) + LUTs used as
# distributed RAM (RAM64M and friends, by the LUTs each occupies), as Vivado's "CLB LUTs" counts
# them.  Yosys's INV cells are left out: they invert a flip-flop's clear (or a LUT input), which
# the UltraScale+ FDCE and LUT absorb.  BRAM36 = RAMB36E2 + RAMB18E2 / 2.  Hierarchical (not
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
mkdir -p "$OUT"
python3 rtl/niu_gen.py --out-dir "$OUT" >/dev/null

# The lane count must be one the RTL supports, and one whose co-simulation model is built.
python3 - "$OUT/niu_constants.json" "$LANES" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
lanes = sys.argv[2]
if not lanes.isdigit() or int(lanes) not in data["lanes_supported"]:
    sys.exit(f"synth_niu.sh: --lanes: the NIU has {', '.join(map(str, data['lanes_supported']))} lanes, got '{lanes}'")
PY

SOURCES=("$OUT/niu_constants.svh")
while read -r f; do
  case "$f" in ''|\#*) ;; *) SOURCES+=("rtl/$f") ;; esac
done < rtl/sources.f

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

python3 - "$STAT" "$LANES" "$RATE_JSON" "$JSON" <<'PY'
import json, re, sys
stat_path, lanes, rate_path, json_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
text = open(stat_path).read()
top = text.split("=== design hierarchy ===")[-1]
cells = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s+(\w+)\s+(\d+)\s*$", top, re.M)}
LUTRAM = {"RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4, "RAM512X1S": 8, "RAM32X1D": 2,
          "RAM64X1D": 2, "RAM128X1D": 4, "RAM256X1D": 8, "RAM32M": 4, "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8}
def count(names):
    return sum(cells.get(n, 0) for n in names)
lut_logic = count([f"LUT{i}" for i in range(1, 7)])
lut_srl = count(["SRL16E", "SRLC32E"])
lut_ram = sum(cells.get(k, 0) * v for k, v in LUTRAM.items())
report = {
    "lanes": lanes,
    "LUT": lut_logic + lut_srl + lut_ram,
    "FF": count(["FDRE", "FDSE", "FDCE", "FDPE"]),
    "DSP": count(["DSP48E2"]),
    "BRAM36": count(["RAMB36E2"]) + count(["RAMB18E2"]) / 2,
    "URAM": count(["URAM288"]),
    "weights_per_cycle": None,
    "LUT_logic": lut_logic, "LUT_shift_registers": lut_srl, "LUT_distributed_ram": lut_ram,
    "CARRY8": count(["CARRY4", "CARRY8"]),
    "tool": "Yosys synth_xilinx -family xcup (hierarchical)",
}
if rate_path:
    report["weights_per_cycle"] = round(json.load(open(rate_path))["weights_per_cycle"], 3)

# Per module: cells of each module times its total instance count (the hierarchy table lists
# counts per parent).
blocks = re.split(r"^=== (.+?) ===$", text, flags=re.M)
per_module = {}
for name, body in zip(blocks[1::2], blocks[2::2]):
    if name != "design hierarchy":
        per_module[name] = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s+(\w+)\s+(\d+)\s*$", body, re.M)}
instances, stack = {}, []
for line in top.split("Number of wires")[0].splitlines():
    m = re.match(r"^(\s+)(\S+)\s+(\d+)\s*$", line)
    if not m:
        continue
    indent, name, n = len(m.group(1)), m.group(2), int(m.group(3))
    while stack and stack[-1][0] >= indent:
        stack.pop()
    mult = n * (stack[-1][1] if stack else 1)
    instances[name] = instances.get(name, 0) + mult
    stack.append((indent, mult))
modules = {}
for name, n in instances.items():
    c = per_module.get(name, {})
    short = re.sub(r"^\$paramod(\$[0-9a-f]+)?\\\\?", "", name).split("\\")[0]
    entry = modules.setdefault(short, {"instances": 0, "LUT": 0, "FF": 0, "DSP": 0, "BRAM36": 0.0})
    entry["instances"] += n
    entry["LUT"] += n * (sum(v for k, v in c.items() if re.fullmatch(r"LUT[1-6]", k)) + c.get("SRL16E", 0)
                         + c.get("SRLC32E", 0) + sum(c.get(k, 0) * v for k, v in LUTRAM.items()))
    entry["FF"] += n * sum(v for k, v in c.items() if k.startswith("FD"))
    entry["DSP"] += n * c.get("DSP48E2", 0)
    entry["BRAM36"] += n * (c.get("RAMB36E2", 0) + c.get("RAMB18E2", 0) / 2)
report["per_module"] = dict(sorted(modules.items(), key=lambda kv: -kv[1]["LUT"]))

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
