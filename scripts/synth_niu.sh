#!/usr/bin/env bash
# Synthesizes the NIU RTL with Yosys for AMD UltraScale+ (synth_xilinx -family xcup) and prints
# the resource summary quoted in docs/niu_rtl.md (LUT, FF, DSP48E2, BRAM, LUTRAM).
#
# Hierarchical (not flattened): each distinct module is synthesized once and `stat -top niu`
# multiplies by the instance counts, which keeps the run to minutes on two cores.  Cross-module
# optimization is therefore not counted (Vivado would do a little better).
#
# Usage: scripts/synth_niu.sh [out_dir]      (default: build-synth/)
#   The generated constants come from scripts/gen_niu_tables.py, run into out_dir.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-build-synth}"
mkdir -p "$OUT"
python3 scripts/gen_niu_tables.py --out-dir "$OUT" >/dev/null

# Same order as rtl/CMakeLists.txt: packages first.
SOURCES=(
  "$OUT/niu_constants.svh"
  rtl/niu_axi_pkg.sv rtl/niu_pkg.sv rtl/niu_burst_gen.sv rtl/niu_axi_rd.sv rtl/niu_axi_wr.sv
  rtl/niu_skid.sv rtl/niu_pcg_unit.sv rtl/niu_gauss.sv rtl/niu_table.sv rtl/niu_device.sv
  rtl/niu_lane.sv rtl/niu_noise_pipe.sv rtl/niu_word_unpack.sv rtl/niu_loader.sv rtl/niu_regs.sv
  rtl/niu.sv
)

yosys -q -l "$OUT/synth_niu.log" -p "
  read_verilog -sv ${SOURCES[*]};
  synth_xilinx -family xcup -top niu -noiopad;
  tee -o $OUT/synth_niu_stat.txt stat -top niu;
"

# The last block of `stat -top niu` is the whole design (instances multiplied out).
python3 - "$OUT/synth_niu_stat.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
top = text.split("=== design hierarchy ===")[-1]
cells = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s+(\w+)\s+(\d+)\s*$", top, re.M)}
def total(prefixes):
    return sum(v for k, v in cells.items() if any(k.startswith(p) for p in prefixes))
luts = total(["LUT1", "LUT2", "LUT3", "LUT4", "LUT5", "LUT6"])
# LUTRAM/SRL primitives occupy LUTs too (RAM64M/RAM32M: 4, RAM64X1D/RAM32X1D: 2, SRL: 1).
lutram = 4 * total(["RAM64M", "RAM32M", "RAM128X1D", "RAM256X1S"]) + 2 * total(["RAM64X1D", "RAM32X1D"]) \
       + total(["RAM64X1S", "RAM32X1S", "SRL16E", "SRLC32E"])
ffs = total(["FDRE", "FDSE", "FDCE", "FDPE"])
dsp = total(["DSP48E2"])
bram36 = total(["RAMB36E2"]) + total(["RAMB18E2"]) / 2
print(f"LUT (logic)        {luts}")
print(f"LUT (as RAM/SRL)   {lutram}")
print(f"FF                 {ffs}")
print(f"DSP48E2            {dsp}")
print(f"BRAM (36 Kb equiv) {bram36:g}")
print(f"CARRY4/CARRY8      {total(['CARRY4', 'CARRY8'])}")

# Where the LUTs and DSPs go: each module's cells times its total instance count, found by
# walking the indented hierarchy table (counts there are per parent).
blocks = re.split(r"^=== (.+?) ===$", text, flags=re.M)
per_module = {}
for name, body in zip(blocks[1::2], blocks[2::2]):
    if name != "design hierarchy":
        per_module[name] = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s+(\w+)\s+(\d+)\s*$", body, re.M)}
instances, stack = {}, []  # stack of (indent, multiplicity)
for line in top.split("Number of wires")[0].splitlines():
    m = re.match(r"^(\s+)(\S+)\s+(\d+)\s*$", line)
    if not m:
        continue
    indent, name, count = len(m.group(1)), m.group(2), int(m.group(3))
    while stack and stack[-1][0] >= indent:
        stack.pop()
    mult = count * (stack[-1][1] if stack else 1)
    instances[name] = instances.get(name, 0) + mult
    stack.append((indent, mult))
print("\nper module: instances, and LUT / DSP48E2 / FF / RAMB18 over all instances")
for name, n in sorted(instances.items(), key=lambda kv: -kv[1] * sum(v for k, v in per_module.get(kv[0], {}).items() if re.fullmatch(r"LUT[1-6]", k))):
    c = per_module.get(name, {})
    lut = sum(v for k, v in c.items() if re.fullmatch(r"LUT[1-6]", k))
    ff = sum(v for k, v in c.items() if k.startswith("FD"))
    short = name.split("\\")[-1][:24]
    print(f"  {short:24s} {n:5d}  {n*lut:7d} {n*c.get('DSP48E2', 0):5d} {n*ff:7d} {n*c.get('RAMB18E2', 0):4d}")
PY
