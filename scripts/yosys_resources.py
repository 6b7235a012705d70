"""Reads a Yosys `stat` report of a synth_xilinx run and counts resources as Vivado's utilisation
report names them.  Shared by scripts/synth_niu.sh and scripts/synth_periph.sh.

Counting: LUT = logic LUTs (LUT1..LUT6) + LUTs used as shift registers (SRL16E, SRLC32E) + LUTs
used as distributed RAM (RAM64M and friends, by the LUTs each occupies), as Vivado's "CLB LUTs"
counts them.  Yosys's INV cells are left out: they invert a flip-flop's clear (or a LUT input),
which the UltraScale+ FDCE and LUT absorb.  BRAM36 = RAMB36E2 + RAMB18E2 / 2.
"""
import re

# LUTs occupied by each distributed-RAM primitive (UltraScale+ CLB).
LUTS_PER_LUTRAM = {"RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4, "RAM512X1S": 8,
                   "RAM32X1D": 2, "RAM64X1D": 2, "RAM128X1D": 4, "RAM256X1D": 8, "RAM32M": 4,
                   "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8}
_CELL_LINE = re.compile(r"^\s+(\w+)\s+(\d+)\s*$", re.M)


def cell_counts(stat_text):
    """{cell type: count} from the lines of one `stat` block (e.g. '     LUT6   1234')."""
    return {m.group(1): int(m.group(2)) for m in _CELL_LINE.finditer(stat_text)}


def resources(cells):
    """LUT (and its split), FF, DSP, BRAM36, URAM and CARRY8 from a {cell type: count} table."""
    def count(names):
        return sum(cells.get(n, 0) for n in names)
    lut_logic = count([f"LUT{i}" for i in range(1, 7)])
    lut_srl = count(["SRL16E", "SRLC32E"])
    lut_ram = sum(cells.get(k, 0) * v for k, v in LUTS_PER_LUTRAM.items())
    return {
        "LUT": lut_logic + lut_srl + lut_ram,
        "FF": count(["FDRE", "FDSE", "FDCE", "FDPE"]),
        "DSP": count(["DSP48E2"]),
        "BRAM36": count(["RAMB36E2"]) + count(["RAMB18E2"]) / 2,
        "URAM": count(["URAM288"]),
        "LUT_logic": lut_logic, "LUT_shift_registers": lut_srl, "LUT_distributed_ram": lut_ram,
        "CARRY8": count(["CARRY4", "CARRY8"]),
    }


def hierarchy_top(stat_text):
    """The `design hierarchy` block of a hierarchical `stat -top` report (the whole text if flat)."""
    return stat_text.split("=== design hierarchy ===")[-1]


def per_module(stat_text):
    """Resources of each module times its total instance count, largest LUT count first.

    A hierarchical report lists each module's cells once, and the hierarchy table gives instance
    counts per parent (indented), so the counts multiply down the tree.
    """
    top = hierarchy_top(stat_text)
    blocks = re.split(r"^=== (.+?) ===$", stat_text, flags=re.M)
    cells_of = {name: cell_counts(body) for name, body in zip(blocks[1::2], blocks[2::2])
                if name != "design hierarchy"}
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
        r = resources(cells_of.get(name, {}))
        short = re.sub(r"^\$paramod(\$[0-9a-f]+)?\\\\?", "", name).split("\\")[0]
        entry = modules.setdefault(short, {"instances": 0, "LUT": 0, "FF": 0, "DSP": 0, "BRAM36": 0.0})
        entry["instances"] += n
        for key in ("LUT", "FF", "DSP", "BRAM36"):
            entry[key] += n * r[key]
    return dict(sorted(modules.items(), key=lambda kv: -kv[1]["LUT"]))


def rtl_digest(paths):
    """SHA-256 of the RTL a synthesis read, for telling a committed result from a stale one.

    `paths`: the files in compile order (the generated constants and ROM contents, then the rtl/
    files).  Each enters as its file name and its lines without `//` comments, trailing blanks or
    empty lines, so a comment or layout edit leaves the digest alone and any code edit changes it.
    (No string in the RTL holds `//`.)  tests/arch/check_synth_fresh.py recomputes it.
    """
    import hashlib
    import pathlib
    digest = hashlib.sha256()
    for path in map(pathlib.Path, paths):
        digest.update(path.name.encode() + b"\n")
        for line in path.read_text(encoding="utf-8").splitlines():
            code = line.split("//", 1)[0].rstrip()
            if code:
                digest.update(code.encode() + b"\n")
    return digest.hexdigest()
