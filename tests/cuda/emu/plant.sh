# tests/cuda/emu/plant.sh — sourced by run-mm-emu.sh and run-rrf-emu.sh:
# emu_plant NAME PERL-EDIT MACRO LINK-INPUTS...: the kernel source
# $out/k.cc edited by PERL-EDIT (perl -0pe) must make the harness FAIL.
# The harness includes the kernel file named by -DMACRO; it is compiled
# with $F and LINK-INPUTS into $out/bug.  An edit that no longer applies
# (the kernel changed under it) is an error too, so a plant cannot go
# silently stale.
emu_plant() {
    name=$1 edit=$2 macro=$3
    shift 3
    perl -0pe "$edit" "$out/k.cc" > "$out/bug.cc"
    cmp -s "$out/k.cc" "$out/bug.cc" && { echo "plant $name: the edit did not apply (kernel changed?)"; exit 1; }
    g++ $F -D$macro="\"$out/bug.cc\"" "$@" -o "$out/bug"
    if "$out/bug" > "$out/bug.log" 2>&1; then
        echo "plant $name: NOT detected"
        exit 1
    fi
    echo "plant $name: detected ($(grep -c FAIL "$out/bug.log") FAIL lines; $(grep -m1 FAIL "$out/bug.log" | cut -c1-90))"
}
