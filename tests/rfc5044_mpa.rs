//! RFC 5044 (MPA) framing and startup requirements, driven through the MPA layer only
//! (`dpwarp::mpa`, `dpwarp::wire::{mpa, fpdu}`, `dpwarp::crc`).

use std::time::{Duration, Instant};

use dpwarp::mpa::{DeframeError, Deframer, Framer, MpaConfig, Startup, StartupError, StartupEvent};
use dpwarp::wire::fpdu::fpdu_len;
use dpwarp::wire::mpa::{REP_KEY, REQ_KEY};

/// The DDP Send segment of RFC 5044 Figures 5/6: Send with Last, queue 0, MSN `msn`, MO 0,
/// 24 octets of zeros (42 octets).
fn ddp_send(msn: u8) -> Vec<u8> {
    let mut u = vec![0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, msn, 0, 0, 0, 0];
    u.resize(42, 0);
    u
}

fn deframe_all(d: &mut Deframer, bytes: &[u8]) -> (Vec<Vec<u8>>, Result<(), DeframeError>) {
    let mut got = Vec::new();
    let r = d.push(bytes, &mut |u| got.push(u.to_vec()));
    (got, r)
}

#[test]
fn rfc5044_s4_4_figure5_first_fpdu_with_marker_byte_for_byte() {
    let mut f = Framer::new(true, true);
    let mut out = Vec::new();
    f.emit(&ddp_send(1)[..18], &ddp_send(1)[18..], &mut out);
    let mut want = vec![0, 0, 0, 0, 0x00, 0x2a];
    want.extend_from_slice(&ddp_send(1));
    want.extend_from_slice(&[0x52, 0x23, 0x99, 0x83]);
    assert_eq!(out, want);
    assert_eq!(dpwarp::crc::crc32c(&out[..0x30]), 0x83992352);
    let mut d = Deframer::new(true, true, 1000);
    let (got, r) = deframe_all(&mut d, &out);
    assert_eq!(r, Ok(()));
    assert_eq!(got, vec![ddp_send(1)]);
}

#[test]
fn rfc5044_s4_4_figure6_second_fpdu_with_marker_at_0x200_byte_for_byte() {
    let mut f = Framer::new(true, true);
    let mut out = Vec::new();
    // First FPDU: marker (4) + 2 + 482 + 4 = 492 = 0x1ec octets, so the second starts at 0x1ec.
    let first = vec![0x5a; 482];
    f.emit(&first, &[], &mut out);
    assert_eq!(out.len(), 0x1ec);
    f.emit(&ddp_send(2), &[], &mut out);
    let second = &out[0x1ec..];
    let mut want = vec![0x00, 0x2a];
    want.extend_from_slice(&ddp_send(2)[..18]);
    want.extend_from_slice(&[0, 0, 0, 0x14]); // marker at 0x200, FPDUPTR 0x14
    want.extend_from_slice(&ddp_send(2)[18..]);
    want.extend_from_slice(&[0x84, 0x92, 0x58, 0x98]);
    assert_eq!(second, &want[..]);
    assert_eq!(out.len(), 0x220);
    let mut d = Deframer::new(true, true, 1000);
    let (got, r) = deframe_all(&mut d, &out);
    assert_eq!(r, Ok(()));
    assert_eq!(got, vec![first, ddp_send(2)]);
}

#[test]
fn rfc5044_s4_1_fpdu_is_length_ulpdu_pad_crc() {
    let mut f = Framer::new(true, false);
    let mut out = Vec::new();
    f.emit(b"abcde", &[], &mut out);
    assert_eq!(out.len(), fpdu_len(5));
    assert_eq!(&out[..2], &[0, 5]);
    assert_eq!(out[7], 0, "pad octet is zero");
    assert_eq!(&out[8..], &dpwarp::crc::crc32c(&out[..8]).to_le_bytes());
}

#[test]
fn rfc5044_s4_4_crc_disabled_field_present_and_not_checked() {
    let mut f = Framer::new(false, false);
    let mut out = Vec::new();
    f.emit(b"abcd", &[], &mut out);
    assert_eq!(&out[out.len() - 4..], &[0, 0, 0, 0]);
    // A receiver with CRC off accepts any CRC value.
    let n = out.len();
    out[n - 1] = 0x77;
    let mut d = Deframer::new(false, false, 100);
    assert_eq!(deframe_all(&mut d, &out), (vec![b"abcd".to_vec()], Ok(())));
}

#[test]
fn rfc5044_s4_4_bad_crc_is_an_invalid_fpdu() {
    let mut f = Framer::new(true, false);
    let mut out = Vec::new();
    f.emit(b"one", &[], &mut out);
    let good = out.len();
    f.emit(b"two", &[], &mut out);
    out[good + 3] ^= 1;
    let mut d = Deframer::new(true, false, 100);
    let (got, r) = deframe_all(&mut d, &out);
    assert_eq!(got, vec![b"one".to_vec()]);
    assert_eq!(r, Err(DeframeError::Crc));
    assert_eq!(DeframeError::Crc.cause().code, 0x02);
    // Stays failed.
    assert_eq!(deframe_all(&mut d, &out), (vec![], Err(DeframeError::Crc)));
}

#[test]
fn rfc5044_s4_3_wrong_fpduptr_is_a_marker_error() {
    let mut f = Framer::new(true, true);
    let mut out = Vec::new();
    f.emit(&[1u8; 600], &[], &mut out);
    // The marker at 512 points back to the header at 4: FPDUPTR 508.
    assert_eq!(&out[512..516], &[0, 0, 0x01, 0xfc]);
    out[515] = 0xf8;
    let mut d = Deframer::new(false, true, 1000);
    assert_eq!(
        deframe_all(&mut d, &out),
        (vec![], Err(DeframeError::Marker))
    );
    assert_eq!(DeframeError::Marker.cause().code, 0x03);
}

#[test]
fn rfc5044_s4_3_markers_point_to_the_same_header_and_between_fpdus_are_zero() {
    let mut f = Framer::new(true, true);
    let mut out = Vec::new();
    f.emit(&[9u8; 1200], &[], &mut out);
    for at in [512usize, 1024] {
        assert_eq!(
            &out[at..at + 4],
            &[0, 0, ((at - 4) >> 8) as u8, (at - 4) as u8]
        );
    }
    // Pad the stream so the next FPDU starts exactly at 2048: marker FPDUPTR 0 precedes it.
    let left = 2048 - out.len();
    // FPDU of length L occupies L + markers; choose a ULPDU that ends exactly at 2048.
    let ulpdu = left - 6 - 4; // one marker at 1536 falls inside
    f.emit(&vec![3u8; ulpdu], &[], &mut out);
    assert_eq!(out.len(), 2048);
    f.emit(b"next", &[], &mut out);
    assert_eq!(&out[2048..2052], &[0, 0, 0, 0]);
    assert_eq!(&out[2052..2054], &[0, 4]);
    // CRC of the following FPDU covers the marker (RFC 5044 §4.4 rule 2).
    let crc = dpwarp::crc::crc32c(&out[2048..2060]);
    assert_eq!(&out[2060..2064], &crc.to_le_bytes());
    let mut d = Deframer::new(true, true, 4096);
    let (got, r) = deframe_all(&mut d, &out);
    assert_eq!(r, Ok(()));
    assert_eq!(got.len(), 3);
    assert_eq!(got[2], b"next");
}

#[test]
fn rfc5044_s4_5_mulpdu() {
    assert_eq!(Framer::mulpdu_for_emss(1448, false), 1442);
    assert_eq!(Framer::mulpdu_for_emss(1460, true), 1460 - (6 + 4 * 3));
    assert_eq!(Framer::mulpdu_for_emss(64, true), 128);
}

#[test]
fn rfc5044_s4_1_ulpdu_length_over_max_is_bad_length() {
    let mut d = Deframer::new(true, false, 100);
    assert_eq!(
        deframe_all(&mut d, &[0, 101, 0, 0]),
        (vec![], Err(DeframeError::BadLength))
    );
    assert_eq!(DeframeError::BadLength.cause().code, 0x01);
}

// ---- RFC 5044 §7 startup ----

fn req(flags: u8, rev: u8, pd: &[u8]) -> Vec<u8> {
    let mut b = REQ_KEY.to_vec();
    b.push(flags);
    b.push(rev);
    b.extend_from_slice(&(pd.len() as u16).to_be_bytes());
    b.extend_from_slice(pd);
    b
}

fn rep(flags: u8, rev: u8, pd: &[u8]) -> Vec<u8> {
    let mut b = req(flags, rev, pd);
    b[..16].copy_from_slice(&REP_KEY);
    b
}

fn events(s: &mut Startup) -> Vec<StartupEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn unenhanced() -> MpaConfig {
    MpaConfig {
        revision: 1,
        enhanced: false,
        ..MpaConfig::default()
    }
}

#[test]
fn rfc5044_s7_1_2_rule1_initiator_sends_valid_request() {
    let now = Instant::now();
    let mut s = Startup::initiator(
        MpaConfig {
            private_data: b"hi".to_vec(),
            ..unenhanced()
        },
        now,
    );
    let mut out = Vec::new();
    s.poll_transmit(&mut out);
    assert_eq!(out, req(0x40, 1, b"hi"));
}

#[test]
fn rfc5044_s7_1_responder_accepts_rev1() {
    let now = Instant::now();
    let mut s = Startup::responder(MpaConfig::default(), now);
    let r = req(0x00, 1, b"pd");
    assert_eq!(s.on_bytes(&r, now), r.len());
    match events(&mut s).as_slice() {
        [StartupEvent::Request(p)] => {
            assert_eq!(p.revision, 1);
            assert!(!p.enhanced && p.ird.is_none());
            assert_eq!(p.private_data, b"pd");
        }
        e => panic!("{e:?}"),
    }
    s.accept(None);
    let mut out = Vec::new();
    s.poll_transmit(&mut out);
    assert_eq!(out, rep(0x40, 1, b""));
}

#[test]
fn rfc5044_s7_1_2_bad_key_closes_without_reply() {
    let now = Instant::now();
    let mut s = Startup::responder(MpaConfig::default(), now);
    let mut r = req(0, 1, b"");
    r[3] = b'X';
    s.on_bytes(&r, now);
    assert!(matches!(
        events(&mut s).as_slice(),
        [StartupEvent::Failed(StartupError::Malformed(_))]
    ));
    let mut out = Vec::new();
    s.poll_transmit(&mut out);
    assert!(out.is_empty());
}

#[test]
fn rfc5044_s7_1_2_rule8_initiator_initiator_startup_detected() {
    let now = Instant::now();
    let mut s = Startup::initiator(unenhanced(), now);
    s.on_bytes(&req(0x40, 1, b""), now);
    assert!(matches!(
        events(&mut s).as_slice(),
        [StartupEvent::Failed(StartupError::Malformed(_))]
    ));
}

#[test]
fn rfc5044_s7_1_1_unsupported_rev_closes_without_reply() {
    for rev in [0u8, 3, 255] {
        let now = Instant::now();
        let mut s = Startup::responder(MpaConfig::default(), now);
        s.on_bytes(&req(0, rev, b""), now);
        assert!(
            matches!(
                events(&mut s).as_slice(),
                [StartupEvent::Failed(StartupError::Malformed(_))]
            ),
            "rev {rev}"
        );
        let mut out = Vec::new();
        s.poll_transmit(&mut out);
        assert!(out.is_empty());
    }
}

#[test]
fn rfc5044_s7_1_1_pd_length_over_512_closes() {
    let now = Instant::now();
    let mut s = Startup::responder(MpaConfig::default(), now);
    let mut r = req(0, 1, b"");
    r[18..20].copy_from_slice(&513u16.to_be_bytes());
    let used = s.on_bytes(&r, now);
    assert_eq!(used, 20);
    assert!(matches!(
        events(&mut s).as_slice(),
        [StartupEvent::Failed(StartupError::Malformed(_))]
    ));
}

#[test]
fn rfc5044_s7_1_1_private_data_512_accepted_and_passed_to_ulp() {
    let now = Instant::now();
    let mut s = Startup::responder(MpaConfig::default(), now);
    let pd = vec![0xabu8; 512];
    s.on_bytes(&req(0, 1, &pd), now);
    match events(&mut s).as_slice() {
        [StartupEvent::Request(p)] => assert_eq!(p.private_data, pd),
        e => panic!("{e:?}"),
    }
}

#[test]
fn rfc5044_s7_1_1_c_bit_either_side_enables_crc_both_ways() {
    for (init_c, resp_c) in [(false, false), (true, false), (false, true), (true, true)] {
        let now = Instant::now();
        let mut i = Startup::initiator(
            MpaConfig {
                crc: init_c,
                ..unenhanced()
            },
            now,
        );
        let mut r = Startup::responder(
            MpaConfig {
                crc: resp_c,
                ..MpaConfig::default()
            },
            now,
        );
        let (ni, nr) = run_pair(&mut i, &mut r);
        let want = init_c || resp_c;
        assert_eq!(
            (ni.crc_tx, ni.crc_rx, nr.crc_tx, nr.crc_rx),
            (want, want, want, want)
        );
    }
}

#[test]
fn rfc5044_s7_1_1_m_bit_is_per_direction() {
    let now = Instant::now();
    let mut i = Startup::initiator(
        MpaConfig {
            markers: true,
            ..unenhanced()
        },
        now,
    );
    let mut r = Startup::responder(MpaConfig::default(), now);
    let (ni, nr) = run_pair(&mut i, &mut r);
    assert!(ni.markers_rx && !ni.markers_tx);
    assert!(nr.markers_tx && !nr.markers_rx);
}

#[test]
fn rfc5044_s7_1_2_rule2_reject_sets_r_with_private_data() {
    let now = Instant::now();
    let mut i = Startup::initiator(unenhanced(), now);
    let mut r = Startup::responder(MpaConfig::default(), now);
    let mut out = Vec::new();
    i.poll_transmit(&mut out);
    r.on_bytes(&out, now);
    events(&mut r);
    r.reject(b"no".to_vec());
    assert_eq!(
        events(&mut r),
        vec![StartupEvent::Failed(StartupError::Rejected)]
    );
    let mut back = Vec::new();
    r.poll_transmit(&mut back);
    assert_eq!(back, rep(0x60, 1, b"no"));
    i.on_bytes(&back, now);
    assert_eq!(
        events(&mut i),
        vec![StartupEvent::Rejected {
            private_data: b"no".to_vec(),
            peer_ird: None,
            peer_ord: None
        }]
    );
}

#[test]
fn rfc5044_s7_1_2_rule3_reply_with_other_rev_is_malformed() {
    let now = Instant::now();
    let mut i = Startup::initiator(unenhanced(), now);
    i.on_bytes(&rep(0, 2, b""), now);
    assert!(matches!(
        events(&mut i).as_slice(),
        [StartupEvent::Failed(StartupError::Malformed(_))]
    ));
}

#[test]
fn rfc5044_s7_1_2_rule4_responder_established_only_after_reply_is_transmitted() {
    let now = Instant::now();
    let mut r = Startup::responder(MpaConfig::default(), now);
    r.on_bytes(&req(0, 1, b""), now);
    events(&mut r);
    r.accept(None);
    assert!(r.poll_event().is_none());
    let mut out = Vec::new();
    r.poll_transmit(&mut out);
    assert!(!out.is_empty());
    assert!(matches!(r.poll_event(), Some(StartupEvent::Established(_))));
}

#[test]
fn rfc5044_s7_1_2_startup_consumes_only_the_frame() {
    let now = Instant::now();
    let mut i = Startup::initiator(unenhanced(), now);
    let mut bytes = rep(0x40, 1, b"xy");
    let frame_len = bytes.len();
    bytes.extend_from_slice(&[0, 4, 1, 2, 3, 4]);
    assert_eq!(i.on_bytes(&bytes, now), frame_len);
    assert!(matches!(i.poll_event(), Some(StartupEvent::Established(_))));
    assert_eq!(i.on_bytes(&bytes[frame_len..], now), 0);
}

#[test]
fn rfc5044_s7_1_2_frame_split_byte_by_byte() {
    let now = Instant::now();
    let mut r = Startup::responder(MpaConfig::default(), now);
    let f = req(0x40, 2, &[0x00, 0x01, 0x00, 0x01])
        .into_iter()
        .collect::<Vec<_>>();
    let mut f = f;
    f[16] |= 0x10;
    let mut total = 0;
    for b in &f {
        total += r.on_bytes(std::slice::from_ref(b), now);
    }
    assert_eq!(total, f.len());
    assert!(matches!(r.poll_event(), Some(StartupEvent::Request(_))));
}

#[test]
fn rfc5044_s7_1_2_rule10_startup_timeout() {
    let now = Instant::now();
    for mut s in [
        Startup::initiator(MpaConfig::default(), now),
        Startup::responder(MpaConfig::default(), now),
    ] {
        let t = s.poll_timeout().expect("a deadline");
        assert_eq!(t, now + MpaConfig::default().timeout);
        s.handle_timeout(now + Duration::from_secs(1));
        assert!(s.poll_event().is_none());
        s.handle_timeout(t);
        assert_eq!(
            s.poll_event(),
            Some(StartupEvent::Failed(StartupError::Timeout))
        );
        assert_eq!(s.poll_timeout(), None);
    }
}

#[test]
fn rfc5044_s7_1_2_eof_before_reply_is_peer_closed() {
    let now = Instant::now();
    let mut i = Startup::initiator(MpaConfig::default(), now);
    i.on_eof();
    assert_eq!(
        i.poll_event(),
        Some(StartupEvent::Failed(StartupError::PeerClosed))
    );
}

#[test]
fn rfc5044_s7_1_1_private_data_over_512_is_refused_locally() {
    let now = Instant::now();
    let mut i = Startup::initiator(
        MpaConfig {
            private_data: vec![0; 513],
            ..unenhanced()
        },
        now,
    );
    assert!(matches!(
        i.poll_event(),
        Some(StartupEvent::Failed(StartupError::Malformed(_)))
    ));
    let mut out = Vec::new();
    i.poll_transmit(&mut out);
    assert!(out.is_empty());
}

/// Drive two startups to completion; returns (initiator, responder) Negotiated.
fn run_pair(
    i: &mut Startup,
    r: &mut Startup,
) -> (dpwarp::mpa::Negotiated, dpwarp::mpa::Negotiated) {
    let now = Instant::now();
    let mut a = Vec::new();
    i.poll_transmit(&mut a);
    assert_eq!(r.on_bytes(&a, now), a.len());
    assert!(matches!(r.poll_event(), Some(StartupEvent::Request(_))));
    r.accept(None);
    let mut b = Vec::new();
    r.poll_transmit(&mut b);
    let nr = match r.poll_event() {
        Some(StartupEvent::Established(n)) => n,
        e => panic!("{e:?}"),
    };
    assert_eq!(i.on_bytes(&b, now), b.len());
    let ni = match i.poll_event() {
        Some(StartupEvent::Established(n)) => n,
        e => panic!("{e:?}"),
    };
    (ni, nr)
}

// RFC 5044 §7 requirements and the tests that cover them:
// §7.1   MUST activate MPA at the same stream location both ends: stream position 0 of
//        Framer/Deframer is the first octet after the frame; rfc5044_s7_1_2_startup_consumes_only_the_frame.
// §7.1   DDP endpoint MUST be bound at Full Operation: conn.rs (not observable in this layer).
// §7.1.1 Key: initiator MUST send "MPA ID Req Frame": rfc5044_s7_1_2_rule1_initiator_sends_valid_request;
//        responder MUST check and close: rfc5044_s7_1_2_bad_key_closes_without_reply;
//        responder MUST send Rep key / initiator MUST check: rfc5044_s7_1_responder_accepts_rev1,
//        rfc5044_s7_1_2_rule8_initiator_initiator_startup_detected.
// §7.1.1 M: markers REQUIRED per direction: rfc5044_s7_1_1_m_bit_is_per_direction;
//        markers MUST be added as §4.3: rfc5044_s4_3_* and the figure 5/6 tests.
// §7.1.1 C: either C=1 => CRC both ways: rfc5044_s7_1_1_c_bit_either_side_enables_crc_both_ways;
//        CRC field present but not checked when off: rfc5044_s4_4_crc_disabled_field_present_and_not_checked.
// §7.1.1 R: zero in Request (rule1 test checks the exact flags), reject bit in Reply:
//        rfc5044_s7_1_2_rule2_reject_sets_r_with_private_data.
// §7.1.1 Res MUST be zero on send, not checked on receive: wire::mpa unit test
//        reserved_bits_ignored_on_receive_and_zero_on_send.
// §7.1.1 Rev MUST be checked, close if not interoperable: rfc5044_s7_1_1_unsupported_rev_closes_without_reply,
//        rfc5044_s7_1_2_rule3_reply_with_other_rev_is_malformed.
// §7.1.1 PD_Length MUST match / <= 512 else close: rfc5044_s7_1_1_pd_length_over_512_closes,
//        rfc5044_s7_1_1_private_data_512_accepted_and_passed_to_ulp (a short frame simply waits
//        for more octets; on EOF -> PeerClosed: rfc5044_s7_1_2_eof_before_reply_is_peer_closed).
// §7.1.1 Private Data MUST be 0..512: rfc5044_s7_1_1_private_data_over_512_is_refused_locally.
// §7.1.2 rule 1 MUST send valid Request: rfc5044_s7_1_2_rule1_initiator_sends_valid_request.
// §7.1.2 rule 2 MUST wait for a validated Request; malformed -> close (MUST); SHOULD reply R=1 on
//        unacceptable PD: rfc5044_s7_1_2_bad_key_closes_without_reply, rfc5044_s7_1_2_rule2_reject_sets_r_with_private_data;
//        SHOULD reply R=0 and interpret FPDUs: rfc5044_s7_1_responder_accepts_rev1.
// §7.1.2 rule 3 MUST receive and validate a Reply; R=1 -> exit MPA (Rejected):
//        rfc5044_s7_1_2_rule3_reply_with_other_rev_is_malformed, rfc5044_s7_1_2_rule2_reject_sets_r_with_private_data.
// §7.1.2 rule 4 responder MUST receive a FPDU before sending FPDUs: the QP engine's job; here
//        Established only after the Reply left: rfc5044_s7_1_2_rule4_responder_established_only_after_reply_is_transmitted.
// §7.1.2 rule 5 key mismatch MUST close: rfc5044_s7_1_2_bad_key_closes_without_reply.
// §7.1.2 rule 7 first octets are the marker 0 when markers on: rfc5044_s4_4_figure5_first_fpdu_with_marker_byte_for_byte.
// §7.1.2 rule 8 MUST detect initiator/initiator; SHOULD time out responder/responder:
//        rfc5044_s7_1_2_rule8_initiator_initiator_startup_detected, rfc5044_s7_1_2_rule10_startup_timeout.
// §7.1.2 rule 9 MUST validate PD_Length: rfc5044_s7_1_1_pd_length_over_512_closes.
// §7.1.2 rule 10 SHOULD time out startup: rfc5044_s7_1_2_rule10_startup_timeout.
