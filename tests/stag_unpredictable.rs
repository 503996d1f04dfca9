//! RFC 5040 §8.1.1 item 8: an RNIC MUST choose STags that are difficult to predict, and it is
//! RECOMMENDED that they be sparse over the full range. One STag a peer learns must say nothing
//! about the next one: consecutive registrations are not at neighbouring indices, indices are
//! spread over the whole 24-bit space, and a freed index is not handed out again at once.

use std::collections::HashSet;

use dpwarp::rdma::{Access, MemoryTable};

const N: usize = 1000;

fn index(stag: u32) -> u32 {
    stag >> 8
}

/// Counts how often an index is its predecessor's + 1 (the old sequential allocator: always).
fn sequential_steps(indices: &[u32]) -> usize {
    indices
        .windows(2)
        .filter(|w| w[1] == w[0].wrapping_add(1))
        .count()
}

/// How many of the 16 equal slices of the 24-bit index space hold at least one index.
fn slices_hit(indices: &[u32]) -> usize {
    let mut hit = [false; 16];
    for &i in indices {
        hit[(i >> 20) as usize] = true;
    }
    hit.iter().filter(|&&h| h).count()
}

#[test]
fn rfc5040_s8_1_1_consecutive_live_registrations_are_not_guessable() {
    let m = MemoryTable::new();
    let pd = m.alloc_pd();
    let mrs: Vec<_> = (0..N).map(|_| m.register(pd, 8, Access(7))).collect();
    let stags: Vec<u32> = mrs.iter().map(|r| r.stag()).collect();
    let idx: Vec<u32> = stags.iter().map(|&s| index(s)).collect();
    let distinct: HashSet<u32> = idx.iter().copied().collect();
    assert_eq!(distinct.len(), N, "live regions have distinct indices");
    assert!(
        idx.iter().all(|&i| i >= 1),
        "index 0 (STag 0, siw's RTR STag 1) never used"
    );
    let seq = sequential_steps(&idx);
    assert!(
        seq <= 5,
        "{seq} of {N} registrations got the previous index + 1"
    );
    // Sparse over the full range: 1000 uniform draws leave none of 16 slices empty (the chance
    // of a miss is 16 * (15/16)^1000 < 1e-26).
    assert_eq!(
        slices_hit(&idx),
        16,
        "indices confined to part of the range"
    );
    assert!(
        idx.iter().any(|&i| i >= 1 << 23),
        "no index in the upper half"
    );
    // Every STag still names its own region.
    for r in &mrs {
        assert_eq!(m.get(r.stag()).map(|g| g.addr()), Some(r.addr()));
    }
}

#[test]
fn rfc5040_s8_1_1_freed_indices_are_not_reused_at_once() {
    let m = MemoryTable::new();
    let pd = m.alloc_pd();
    let mut idx = Vec::with_capacity(N);
    for _ in 0..N {
        let r = m.register(pd, 8, Access(7));
        idx.push(index(r.stag()));
        assert!(m.deregister(r.stag()));
        assert!(m.get(r.stag()).is_none());
    }
    let distinct: HashSet<u32> = idx.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        N,
        "a freed index came back while a peer could still hold its STag"
    );
    let seq = sequential_steps(&idx);
    assert!(
        seq <= 5,
        "{seq} of {N} registrations got the previous index + 1"
    );
    assert_eq!(slices_hit(&idx), 16);
}

#[test]
fn rfc5040_s8_1_1_a_guessed_neighbour_stag_names_nothing() {
    // What the peer in issue 13 did: take an STag it was given and try its neighbours with every
    // key byte. With sparse indices the neighbouring indices are (almost surely) not registered.
    let m = MemoryTable::new();
    let pd = m.alloc_pd();
    let mrs: Vec<_> = (0..64).map(|_| m.register(pd, 8, Access(7))).collect();
    let mut hits = 0;
    for r in &mrs {
        let i = index(r.stag());
        for n in [i.wrapping_sub(1), i + 1, i + 2] {
            for key in 0..=255u32 {
                if m.get((n << 8) | key).is_some() {
                    hits += 1;
                }
            }
        }
    }
    // 64 regions in 2^24 indices: a neighbour is registered with probability ~64 * 3 / 2^24.
    assert!(hits <= 1, "{hits} neighbouring STags named a region");
}
