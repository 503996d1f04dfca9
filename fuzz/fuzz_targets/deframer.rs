//! The streaming FPDU deframer (RFC 5044 §4-§5) on arbitrary bytes, arbitrarily segmented, with
//! every CRC/marker combination: it must never panic, never deliver more than max_ulpdu, and once
//! it fails it must stay failed.
#![no_main]
use dpwarp::mpa::Deframer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let crc = data[0] & 1 != 0;
    let markers = data[0] & 2 != 0;
    let max = 64 + usize::from(data[1]) * 64;
    let mut d = Deframer::new(crc, markers, max);
    let mut rest = &data[2..];
    let mut step = usize::from(data[1] % 17) + 1;
    let mut failed = false;
    while !rest.is_empty() {
        let n = step.min(rest.len());
        let mut got = Vec::new();
        let r = d.push(&rest[..n], &mut |u| got.push(u.len()));
        assert!(got.iter().all(|&l| l <= max));
        if failed {
            assert!(r.is_err() && got.is_empty());
        }
        failed |= r.is_err();
        rest = &rest[n..];
        step = step * 7 % 23 + 1;
    }
});
