# Sourced by scripts/bench and scripts/ab: telling this kind of host's slow phases.
#
# Now and then the shared hosts these benchmarks run on keep both vCPUs about three times
# slower for seconds to minutes (docs/testing.md "Slow phases"; a memif Write of one build
# then measures a third of what it measures otherwise). One cache line timed between the two CPUs (benches/pmd_floor --cacheline-only,
# 200 000 round trips, about 25 ms) tells: 0.17-0.24 us one way in a slow phase, 0.056-0.065
# otherwise. It does not see every noisy stretch: runs of 64 B Sends at 1.5-2.0 us one way
# (1.15 otherwise) came while it read a normal 0.06 us (2026-11-30), so read an A/B's pairs,
# not only its medians.
#
#   slow_phase_build       build the probe (cargo bench --no-run); call once before probing
#   slow_phase_probe       print the probe's one-way p50 in us (empty when it gave none)
#   slow_phase_is VALUE    remember VALUE; status 0 when it is slow: over 2.5 times the lower
#                          quartile of every value remembered so far, and over 0.1 us
#   slow_phase_reference   the lower quartile slow_phase_is compared the last value against
#   slow_phase_wait_out LIMIT WHO WHAT
#                          before a run: probe, and while slow wait 10 s at a time, up to LIMIT
#                          seconds (saying so as WHO, before WHAT); sets slow_phase_before (the
#                          last probe, empty when it gave none) and slow_phase_waited (seconds)
#   slow_phase_caught      after a run: probe once more; sets slow_phase_after; status 0 when
#                          that probe is slow (the run should be done again)
#
# The reference is a lower quartile, not the minimum: one fast outlier (seen at 0.025-0.030 us
# against a normal 0.06) must not make every normal probe look slow, and a slow phase must last
# most of a run of probes to raise it.

slow_phase_values=()
slow_phase_ref=

slow_phase_build() {
    cargo bench -q --bench pmd_floor --no-run 2>/dev/null
}

slow_phase_probe() {
    cargo bench -q --bench pmd_floor -- --cacheline-only --iters 200000 2>/dev/null |
        sed -nE 's/.*one-way p50 ([0-9.]+) us.*/\1/p'
}

slow_phase_is() {
    slow_phase_values+=("$1")
    slow_phase_ref=$(printf '%s\n' "${slow_phase_values[@]}" | sort -g |
        awk '{ v[NR] = $1 } END { print v[int((NR - 1) / 4) + 1] }')
    awk -v a="$1" -v b="$slow_phase_ref" 'BEGIN { exit !(a > 2.5 * b && a > 0.1) }'
}

slow_phase_reference() {
    echo "$slow_phase_ref"
}

slow_phase_wait_out() {
    local limit=$1 who=$2 what=$3
    slow_phase_waited=0
    while slow_phase_before=$(slow_phase_probe) && [[ -n $slow_phase_before ]] &&
        slow_phase_is "$slow_phase_before" && [[ $slow_phase_waited -lt $limit ]]; do
        echo "$who: slow phase (one cache line between the CPUs $slow_phase_before us, reference $slow_phase_ref): waiting 10 s before $what"
        sleep 10
        slow_phase_waited=$((slow_phase_waited + 10))
    done
}

slow_phase_caught() {
    slow_phase_after=$(slow_phase_probe) || slow_phase_after=
    [[ -n $slow_phase_after ]] && slow_phase_is "$slow_phase_after"
}
