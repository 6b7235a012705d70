# Sourced by the synthesis scripts (synth_niu.sh, synth_periph.sh), run from the repository root.

# generate_constants DIR: writes the generated hardware constants (niu_constants.svh, .json, ...)
# into DIR, the Yosys work directory.
generate_constants() {
  mkdir -p "$1"
  python3 rtl/niu_gen.py --out-dir "$1" >/dev/null
}

# read_sources DIR LIST: sets SOURCES to the generated constants in DIR followed by the rtl/ files
# that LIST names (one a line; blank lines and '#' comments skipped).
read_sources() {
  SOURCES=("$1/niu_constants.svh")
  local f
  while read -r f; do
    case "$f" in ''|\#*) ;; *) SOURCES+=("rtl/$f") ;; esac
  done < "$2"
}
