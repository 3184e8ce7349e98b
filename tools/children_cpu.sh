# Sourced by tests/run_all.sh and tools/prepare.sh, which say how much CPU each part of make
# test took. children_cpu: sets CHILD_CPU to the CPU seconds (user + system) of every finished
# child of the calling shell so far, from bash's `times` (its second line: children's user and
# system time, as XmY.YYYs). `times` must run in that shell, not in a $(...) subshell, whose
# children are its own: it writes to CHILD_CPU_FILE, a file of the caller's.
children_cpu() {
  times >"${CHILD_CPU_FILE:?children_cpu: set CHILD_CPU_FILE}"
  CHILD_CPU=$(sed -n 2p "$CHILD_CPU_FILE" | awk '{
    t = 0
    for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); t += a[1] * 60 + a[2] }
    printf "%d\n", t }')
}
