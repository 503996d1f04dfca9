//! RFC 6581 enhanced MPA connection setup, driven through `dpwarp::mpa::Startup` only: two
//! engines against each other and against hand-built frames (including Linux siw's).

use std::time::Instant;

use dpwarp::mpa::{MpaConfig, Negotiated, RtrSet, Startup, StartupError, StartupEvent};
use dpwarp::rdma::RtrKind;
use dpwarp::wire::mpa::{REP_KEY, REQ_KEY};
use dpwarp::wire::terminate::TermCause;

fn frame(key: &[u8; 16], flags: u8, rev: u8, pd: &[u8]) -> Vec<u8> {
    let mut b = key.to_vec();
    b.extend_from_slice(&[flags, rev]);
    b.extend_from_slice(&(pd.len() as u16).to_be_bytes());
    b.extend_from_slice(pd);
    b
}

fn enh(a: bool, b: bool, ird: u16, c: bool, d: bool, ord: u16) -> [u8; 4] {
    let iw = ird | if a { 0x8000 } else { 0 } | if b { 0x4000 } else { 0 };
    let ow = ord | if c { 0x8000 } else { 0 } | if d { 0x4000 } else { 0 };
    let mut o = [0; 4];
    o[..2].copy_from_slice(&iw.to_be_bytes());
    o[2..].copy_from_slice(&ow.to_be_bytes());
    o
}

fn tx(s: &mut Startup) -> Vec<u8> {
    let mut out = Vec::new();
    s.poll_transmit(&mut out);
    out
}

/// Responder: feed `req`, accept, return (reply bytes, Negotiated).
fn respond(cfg: MpaConfig, req: &[u8]) -> (Vec<u8>, Negotiated) {
    let now = Instant::now();
    let mut r = Startup::responder(cfg, now);
    assert_eq!(r.on_bytes(req, now), req.len());
    match r.poll_event() {
        Some(StartupEvent::Request(_)) => {}
        e => panic!("{e:?}"),
    }
    r.accept(None);
    let out = tx(&mut r);
    match r.poll_event() {
        Some(StartupEvent::Established(n)) => (out, n),
        e => panic!("{e:?}"),
    }
}

/// Initiator with `cfg` fed `reply`: its single event.
fn initiate(cfg: MpaConfig, reply: &[u8]) -> StartupEvent {
    let now = Instant::now();
    let mut i = Startup::initiator(cfg, now);
    tx(&mut i);
    assert_eq!(i.on_bytes(reply, now), reply.len());
    i.poll_event().expect("an event")
}

fn p2p(send: bool, write: bool, read: bool) -> Option<RtrSet> {
    Some(RtrSet { send, write, read })
}

fn pair(ic: MpaConfig, rc: MpaConfig) -> (StartupEvent, Negotiated) {
    let now = Instant::now();
    let mut i = Startup::initiator(ic, now);
    let req = tx(&mut i);
    let (rep, nr) = respond(rc, &req);
    assert_eq!(i.on_bytes(&rep, now), rep.len());
    (i.poll_event().unwrap(), nr)
}

fn established(e: StartupEvent) -> Negotiated {
    match e {
        StartupEvent::Established(n) => n,
        e => panic!("{e:?}"),
    }
}

#[test]
fn rfc6581_s6_initiator_sends_enhanced_request_with_rev2_and_s() {
    let now = Instant::now();
    let mut i = Startup::initiator(
        MpaConfig {
            crc: false,
            ird: 1,
            ord: 1,
            ..MpaConfig::default()
        },
        now,
    );
    // siw's exact initiator frame: 10 02 0004 0001 0001.
    assert_eq!(tx(&mut i), frame(&REQ_KEY, 0x10, 2, &[0, 1, 0, 1]));
}

#[test]
fn rfc6581_s9_2_initiator_p2p_request_matches_siw_p2p_frame() {
    let now = Instant::now();
    let mut i = Startup::initiator(
        MpaConfig {
            ird: 1,
            ord: 1,
            p2p: p2p(false, true, true),
            ..MpaConfig::default()
        },
        now,
    );
    assert_eq!(
        tx(&mut i),
        frame(&REQ_KEY, 0x50, 2, &[0x80, 0x01, 0xc0, 0x01])
    );
}

#[test]
fn rfc6581_s6_responder_accepts_siw_request_and_replies_enhanced_same_rev() {
    let (rep, n) = respond(
        MpaConfig {
            crc: false,
            ird: 4,
            ord: 4,
            ..MpaConfig::default()
        },
        &frame(&REQ_KEY, 0x10, 2, &[0, 1, 0, 1]),
    );
    // IRD = max(4, initiator ORD 1) = 4, ORD = min(4, initiator IRD 1) = 1.
    assert_eq!(
        rep,
        frame(&REP_KEY, 0x10, 2, &enh(false, false, 4, false, false, 1))
    );
    assert_eq!(
        (n.ird, n.ord, n.peer_ird, n.peer_ord),
        (4, 1, Some(1), Some(1))
    );
    assert!(n.enhanced && n.revision == 2 && n.rtr.is_none());
}

#[test]
fn rfc6581_s6_responder_must_accept_rev1_requests() {
    let (rep, n) = respond(MpaConfig::default(), &frame(&REQ_KEY, 0x40, 1, b""));
    assert_eq!(rep, frame(&REP_KEY, 0x40, 1, b""));
    assert_eq!(n.revision, 1);
    assert!(!n.enhanced && n.peer_ird.is_none());
}

#[test]
fn rfc6581_s10_enhanced_responder_answers_unenhanced_request_unenhanced() {
    let (rep, n) = respond(MpaConfig::default(), &frame(&REQ_KEY, 0x40, 2, b"ulp"));
    assert_eq!(rep, frame(&REP_KEY, 0x40, 2, b""));
    assert!(!n.enhanced);
    assert_eq!(n.peer_private_data, b"ulp");
}

#[test]
fn rfc6581_s10_enhanced_responder_answers_enhanced_request_enhanced() {
    let (rep, _) = respond(
        MpaConfig::default(),
        &frame(&REQ_KEY, 0x50, 2, &[0, 2, 0, 3]),
    );
    assert_eq!(rep[16] & 0x10, 0x10);
    assert_eq!(u16::from_be_bytes([rep[18], rep[19]]), 4);
}

#[test]
fn rfc6581_s10_unenhanced_responder_closes_on_enhanced_request() {
    let now = Instant::now();
    let mut r = Startup::responder(
        MpaConfig {
            enhanced: false,
            ..MpaConfig::default()
        },
        now,
    );
    r.on_bytes(&frame(&REQ_KEY, 0x10, 2, &[0, 1, 0, 1]), now);
    assert!(matches!(
        r.poll_event(),
        Some(StartupEvent::Failed(StartupError::Malformed(_)))
    ));
    assert!(tx(&mut r).is_empty());
}

#[test]
fn rfc6581_s10_initiator_reports_enhanced_refused_for_fallback() {
    let now = Instant::now();
    let mut i = Startup::initiator(
        MpaConfig {
            fallback_rev1: true,
            ..MpaConfig::default()
        },
        now,
    );
    tx(&mut i);
    i.on_eof();
    assert_eq!(
        i.poll_event(),
        Some(StartupEvent::Failed(StartupError::EnhancedRefused))
    );
    // Without fallback it is a plain close.
    let mut i = Startup::initiator(MpaConfig::default(), now);
    i.on_eof();
    assert_eq!(
        i.poll_event(),
        Some(StartupEvent::Failed(StartupError::PeerClosed))
    );
}

#[test]
fn rfc6581_s10_initiator_without_enhanced_features_sends_unenhanced() {
    let now = Instant::now();
    let mut i = Startup::initiator(
        MpaConfig {
            enhanced: false,
            ..MpaConfig::default()
        },
        now,
    );
    assert_eq!(tx(&mut i), frame(&REQ_KEY, 0x40, 2, b""));
}

#[test]
fn rfc6581_s6_s_bit_with_short_private_data_is_malformed() {
    let now = Instant::now();
    let mut r = Startup::responder(MpaConfig::default(), now);
    r.on_bytes(&frame(&REQ_KEY, 0x10, 2, &[0, 1]), now);
    assert!(matches!(
        r.poll_event(),
        Some(StartupEvent::Failed(StartupError::Malformed(_)))
    ));
    assert!(tx(&mut r).is_empty());
}

#[test]
fn rfc6581_s6_s_bit_with_rev1_is_malformed() {
    let now = Instant::now();
    let mut r = Startup::responder(MpaConfig::default(), now);
    r.on_bytes(&frame(&REQ_KEY, 0x10, 1, &[0, 1, 0, 1]), now);
    assert!(matches!(
        r.poll_event(),
        Some(StartupEvent::Failed(StartupError::Malformed(_)))
    ));
}

#[test]
fn rfc6581_s7_private_data_limit_508_when_enhanced() {
    let now = Instant::now();
    let ok = Startup::initiator(
        MpaConfig {
            private_data: vec![1; 508],
            ..MpaConfig::default()
        },
        now,
    );
    let mut ok = ok;
    assert_eq!(tx(&mut ok).len(), 20 + 512);
    let mut bad = Startup::initiator(
        MpaConfig {
            private_data: vec![1; 509],
            ..MpaConfig::default()
        },
        now,
    );
    assert!(matches!(
        bad.poll_event(),
        Some(StartupEvent::Failed(StartupError::Malformed(_)))
    ));
    assert!(tx(&mut bad).is_empty());
}

#[test]
fn rfc6581_s9_enhanced_data_in_network_order_and_ulp_data_follows() {
    let (rep, n) = respond(
        MpaConfig {
            private_data: b"srv".to_vec(),
            ird: 0x123,
            ord: 0x2000,
            ..MpaConfig::default()
        },
        &frame(&REQ_KEY, 0x50, 2, &[0x3f, 0xfe, 0x00, 0x05, b'c', b'l']),
    );
    assert_eq!(
        &rep[20..24],
        &enh(false, false, 0x123, false, false, 0x2000)
    );
    assert_eq!(&rep[24..], b"srv");
    assert_eq!(n.peer_private_data, b"cl");
}

#[test]
fn rfc6581_s9_1_responder_ird_at_least_initiator_ord_and_ord_at_most_initiator_ird() {
    let (_, n) = respond(
        MpaConfig {
            ird: 2,
            ord: 8,
            ..MpaConfig::default()
        },
        &frame(&REQ_KEY, 0x50, 2, &enh(false, false, 3, false, false, 5)),
    );
    assert_eq!((n.ird, n.ord), (5, 3));
    assert_eq!((n.peer_ird, n.peer_ord), (Some(3), Some(5)));
}

#[test]
fn rfc6581_s9_1_responder_answers_0x3fff_ord_with_0x3fff_ird() {
    let (rep, n) = respond(
        MpaConfig {
            ird: 7,
            ord: 9,
            ..MpaConfig::default()
        },
        &frame(
            &REQ_KEY,
            0x50,
            2,
            &enh(false, false, 4, false, false, 0x3fff),
        ),
    );
    assert_eq!(&rep[20..24], &enh(false, false, 0x3fff, false, false, 4));
    assert_eq!(n.ird, 7, "local IRD unchanged");
    assert_eq!(n.peer_ord, Some(0x3fff));
}

#[test]
fn rfc6581_s9_1_responder_answers_0x3fff_ird_with_0x3fff_ord() {
    let (rep, n) = respond(
        MpaConfig {
            ird: 7,
            ord: 9,
            ..MpaConfig::default()
        },
        &frame(
            &REQ_KEY,
            0x50,
            2,
            &enh(false, false, 0x3fff, false, false, 2),
        ),
    );
    assert_eq!(&rep[20..24], &enh(false, false, 7, false, false, 0x3fff));
    assert_eq!(n.ord, 9, "local ORD unchanged");
}

#[test]
fn rfc6581_s9_1_initiator_ord_at_most_responder_ird_and_peer_values_passed() {
    let n = established(initiate(
        MpaConfig {
            ird: 8,
            ord: 6,
            ..MpaConfig::default()
        },
        &frame(&REP_KEY, 0x50, 2, &enh(false, false, 4, false, false, 3)),
    ));
    assert_eq!((n.ird, n.ord), (8, 4));
    assert_eq!((n.peer_ird, n.peer_ord), (Some(4), Some(3)));
}

#[test]
fn rfc6581_s9_1_initiator_leaves_values_unchanged_on_0x3fff() {
    let n = established(initiate(
        MpaConfig {
            ird: 8,
            ord: 6,
            ..MpaConfig::default()
        },
        &frame(
            &REP_KEY,
            0x50,
            2,
            &enh(false, false, 0x3fff, false, false, 0x3fff),
        ),
    ));
    assert_eq!((n.ird, n.ord), (8, 6));
}

#[test]
fn rfc6581_s9_1_initiator_insufficient_ird_terminates_code_6() {
    match initiate(
        MpaConfig {
            ird: 2,
            ord: 2,
            ..MpaConfig::default()
        },
        &frame(&REP_KEY, 0x50, 2, &enh(false, false, 2, false, false, 5)),
    ) {
        StartupEvent::Terminate { cause, negotiated } => {
            assert_eq!(cause, TermCause::MPA_INSUFFICIENT_IRD);
            assert_eq!((cause.layer as u8, cause.etype, cause.code), (2, 0, 6));
            assert_eq!(negotiated.peer_ord, Some(5));
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn rfc6581_s9_1_initiator_gets_peer_ird_ord_on_reject() {
    let e = initiate(
        MpaConfig::default(),
        &frame(&REP_KEY, 0x70, 2, &[0x00, 0x04, 0x00, 0x09, b'n', b'o']),
    );
    assert_eq!(
        e,
        StartupEvent::Rejected {
            private_data: b"no".to_vec(),
            peer_ird: Some(4),
            peer_ord: Some(9)
        }
    );
}

#[test]
fn rfc6581_s9_1_responder_reject_carries_enhanced_ird_ord() {
    let now = Instant::now();
    let mut r = Startup::responder(
        MpaConfig {
            ird: 3,
            ord: 12,
            ..MpaConfig::default()
        },
        now,
    );
    r.on_bytes(
        &frame(&REQ_KEY, 0x50, 2, &enh(false, false, 1, false, false, 1)),
        now,
    );
    assert!(matches!(r.poll_event(), Some(StartupEvent::Request(_))));
    r.reject(b"need ORD 12".to_vec());
    let mut pd = enh(false, false, 3, false, false, 12).to_vec();
    pd.extend_from_slice(b"need ORD 12");
    assert_eq!(tx(&mut r), frame(&REP_KEY, 0x70, 2, &pd));
    assert_eq!(
        r.poll_event(),
        Some(StartupEvent::Failed(StartupError::Rejected))
    );
}

#[test]
fn rfc6581_s9_2_responder_matches_a_and_sets_supported_offered_options() {
    // siw p2p request: Write and Read offered; we support all -> reply Write+Read.
    let (rep, n) = respond(
        MpaConfig {
            p2p: p2p(true, true, true),
            ..MpaConfig::default()
        },
        &frame(&REQ_KEY, 0x50, 2, &[0x80, 0x01, 0xc0, 0x01]),
    );
    assert_eq!(rep[20] & 0xc0, 0x80, "A=1, B=0");
    assert_eq!(rep[22] & 0xc0, 0xc0, "C=1, D=1");
    assert_eq!(n.rtr, Some(RtrKind::Write));
    assert_eq!(
        n.rtr_accept,
        RtrSet {
            send: false,
            write: true,
            read: true
        }
    );
}

#[test]
fn rfc6581_s9_2_responder_without_match_sets_an_option_it_supports() {
    let (rep, n) = respond(
        MpaConfig {
            ird: 1,
            ord: 1,
            p2p: p2p(false, false, true),
            ..MpaConfig::default()
        },
        &frame(&REQ_KEY, 0x50, 2, &enh(true, true, 1, false, false, 1)),
    );
    assert_eq!(&rep[20..24], &enh(true, false, 1, false, true, 1));
    assert_eq!(n.rtr, Some(RtrKind::Read));
}

#[test]
fn rfc6581_s9_2_client_server_responder_answers_a1_with_a1() {
    let (rep, n) = respond(
        MpaConfig::default(),
        &frame(&REQ_KEY, 0x50, 2, &enh(true, false, 1, true, false, 1)),
    );
    assert_eq!(rep[20] & 0x80, 0x80);
    assert_eq!(n.rtr, Some(RtrKind::Write));
}

#[test]
fn rfc6581_s9_2_responder_sets_a0_and_ignores_bcd_when_a0() {
    let (rep, n) = respond(
        MpaConfig {
            p2p: p2p(true, true, true),
            ..MpaConfig::default()
        },
        &frame(&REQ_KEY, 0x50, 2, &enh(false, true, 1, true, true, 1)),
    );
    assert_eq!(rep[20] & 0xc0, 0);
    assert_eq!(rep[22] & 0xc0, 0);
    assert_eq!(n.rtr, None);
}

#[test]
fn rfc6581_s9_1_read_rtr_gives_responder_ird_at_least_1() {
    let (_, n) = respond(
        MpaConfig {
            ird: 0,
            p2p: p2p(false, false, true),
            ..MpaConfig::default()
        },
        &frame(&REQ_KEY, 0x50, 2, &enh(true, false, 1, false, true, 0)),
    );
    assert_eq!(n.ird, 1);
    assert_eq!(n.rtr, Some(RtrKind::Read));
}

#[test]
fn rfc6581_s9_2_initiator_chooses_one_negotiated_rtr() {
    for (offer, resp, want) in [
        (p2p(true, true, true), p2p(true, true, true), RtrKind::Write),
        (p2p(true, false, true), p2p(true, true, true), RtrKind::Read),
        (
            p2p(true, false, false),
            p2p(true, true, true),
            RtrKind::Send,
        ),
        (
            p2p(false, true, true),
            p2p(false, false, true),
            RtrKind::Read,
        ),
    ] {
        let (ei, nr) = pair(
            MpaConfig {
                p2p: offer,
                ..MpaConfig::default()
            },
            MpaConfig {
                p2p: resp,
                ..MpaConfig::default()
            },
        );
        let ni = established(ei);
        assert_eq!(ni.rtr, Some(want));
        assert!(nr.rtr_accept.contains(want));
    }
}

#[test]
fn rfc6581_s9_2_no_matching_rtr_terminates_code_7() {
    let (ei, _) = pair(
        MpaConfig {
            p2p: p2p(true, false, false),
            ..MpaConfig::default()
        },
        MpaConfig {
            p2p: p2p(false, true, false),
            ..MpaConfig::default()
        },
    );
    match ei {
        StartupEvent::Terminate { cause, negotiated } => {
            assert_eq!(cause, TermCause::MPA_NO_MATCHING_RTR);
            assert_eq!(cause.code, 7);
            assert_eq!(negotiated.rtr, None);
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn rfc6581_s9_2_initiator_ignores_nothing_when_responder_drops_a() {
    // A responder that answers A=0 to A=1 cannot be given an RTR it expects: code 7.
    match initiate(
        MpaConfig {
            p2p: p2p(false, true, false),
            ..MpaConfig::default()
        },
        &frame(&REP_KEY, 0x50, 2, &enh(false, false, 1, false, false, 1)),
    ) {
        StartupEvent::Terminate { cause, .. } => assert_eq!(cause.code, 7),
        e => panic!("{e:?}"),
    }
}

#[test]
fn rfc6581_s10_unenhanced_reply_to_enhanced_request_is_malformed() {
    assert!(matches!(
        initiate(MpaConfig::default(), &frame(&REP_KEY, 0x40, 2, b"")),
        StartupEvent::Failed(StartupError::Malformed(_))
    ));
}

#[test]
fn rfc6581_siw_reply_accepted_by_our_initiator() {
    // siw responder: reply IRD = request ORD, ORD = request IRD; CRC echoed.
    let n = established(initiate(
        MpaConfig {
            crc: false,
            ird: 1,
            ord: 1,
            ..MpaConfig::default()
        },
        &frame(&REP_KEY, 0x10, 2, &[0, 1, 0, 1]),
    ));
    assert!(!n.crc_tx && !n.crc_rx);
    assert_eq!((n.ird, n.ord), (1, 1));
}

#[test]
fn rfc6581_s9_1_two_engines_default_parameters() {
    let (ei, nr) = pair(
        MpaConfig {
            ird: 3,
            ord: 5,
            ..MpaConfig::default()
        },
        MpaConfig {
            ird: 8,
            ord: 2,
            ..MpaConfig::default()
        },
    );
    let ni = established(ei);
    assert!(ni.ord <= nr.ird && nr.ord <= ni.ird);
    assert_eq!(ni.peer_ird, Some(nr.ird));
    assert_eq!(ni.peer_ord, Some(nr.ord));
    assert_eq!((nr.peer_ird, nr.peer_ord), (Some(3), Some(5)));
}

// RFC 6581 §5-§10 MUST/SHOULD/REQUIRED and the tests that cover them:
// §5  initiator MUST NOT send FULPDUs before the RTR: the QP engine / conn.rs (Established is
//     held until RtrComplete); here: Negotiated.rtr is set for both roles
//     (rfc6581_s9_2_initiator_chooses_one_negotiated_rtr).
// §6  Rev MUST be >= 2 for enhanced features: rfc6581_s6_initiator_sends_enhanced_request_with_rev2_and_s,
//     rfc6581_s6_s_bit_with_rev1_is_malformed.
// §6  Res MUST be zero on send / not checked: wire::mpa unit test reserved_bits_ignored_on_receive_and_zero_on_send.
// §6  host MUST continue to accept rev 1: rfc6581_s6_responder_must_accept_rev1_requests.
// §6  S=1: private data MUST begin with enhanced data: rfc6581_s6_s_bit_with_short_private_data_is_malformed,
//     rfc6581_s9_enhanced_data_in_network_order_and_ulp_data_follows.
// §7  (SCTP session control chunks): not applicable to MPA/TCP; the 512-octet limit including
//     the enhanced data applies: rfc6581_s7_private_data_limit_508_when_enhanced.
// §8  error codes 5/6/7 layer 2 type 0: rfc6581_s9_1_initiator_insufficient_ird_terminates_code_6,
//     rfc6581_s9_2_no_matching_rtr_terminates_code_7. Code 5 (local catastrophic) has no trigger
//     inside startup (no local resource failure exists in this engine).
// §9  enhanced data MUST be network byte order, 14-bit IRD/ORD: rfc6581_s9_enhanced_data_in_network_order_and_ulp_data_follows.
// §9.1 responder and initiator MUST pass the peer's IRD/ORD to the ULP: rfc6581_s9_1_two_engines_default_parameters,
//     rfc6581_s6_responder_accepts_siw_request_and_replies_enhanced_same_rev.
// §9.1 responder ORD SHOULD/MUST be <= initiator IRD; IRD MAY be increased:
//     rfc6581_s9_1_responder_ird_at_least_initiator_ord_and_ord_at_most_initiator_ird,
//     rfc6581_s9_1_read_rtr_gives_responder_ird_at_least_1.
// §9.1 responder MAY reject, specifying its ORD in the Reject: rfc6581_s9_1_responder_reject_carries_enhanced_ird_ord.
// §9.1 initiator MUST set IRD >= responder ORD, ORD <= responder IRD:
//     rfc6581_s9_1_initiator_ord_at_most_responder_ird_and_peer_values_passed; insufficient -> MUST
//     TERM code 6: rfc6581_s9_1_initiator_insufficient_ird_terminates_code_6.
// §9.1 initiator MUST pass responder IRD/ORD for Accept and Reject: rfc6581_s9_1_initiator_gets_peer_ird_ord_on_reject.
// §9.1 0x3FFF rules (four MUSTs): rfc6581_s9_1_responder_answers_0x3fff_ord_with_0x3fff_ird,
//     rfc6581_s9_1_responder_answers_0x3fff_ird_with_0x3fff_ord, rfc6581_s9_1_initiator_leaves_values_unchanged_on_0x3fff.
// §9.2 initiator MUST set A=1 and B/C/D for supported options: rfc6581_s9_2_initiator_p2p_request_matches_siw_p2p_frame;
//     A=0 for client-server: rfc6581_s6_initiator_sends_enhanced_request_with_rev2_and_s.
// §9.2 responder MUST support >= 1 option, MUST echo A=1: rfc6581_s9_2_client_server_responder_answers_a1_with_a1;
//     SHOULD set offered supported options: rfc6581_s9_2_responder_matches_a_and_sets_supported_offered_options;
//     MUST set one it supports if none match: rfc6581_s9_2_responder_without_match_sets_an_option_it_supports.
// §9.2 initiator MUST generate one negotiated RTR: rfc6581_s9_2_initiator_chooses_one_negotiated_rtr
//     (the RTR message itself is the QP engine's); none -> MUST TERM code 7: rfc6581_s9_2_no_matching_rtr_terminates_code_7,
//     rfc6581_s9_2_initiator_ignores_nothing_when_responder_drops_a.
// §9.2 responder MUST set A=0 if request A=0; B/C/D MUST be 0 then and ignored on receipt:
//     rfc6581_s9_2_responder_sets_a0_and_ignores_bcd_when_a0.
// §9.3 TERM code 5 on local errors before reset: not observable (no such local error path).
// §10 enhanced responder REQUIRED to answer enhanced: rfc6581_s10_enhanced_responder_answers_enhanced_request_enhanced;
//     all responders REQUIRED to answer unenhanced requests unenhanced:
//     rfc6581_s10_enhanced_responder_answers_unenhanced_request_unenhanced;
//     initiator MUST NOT use enhanced format when not desired: rfc6581_s10_initiator_without_enhanced_features_sends_unenhanced;
//     responder MUST accept unenhanced requests: rfc6581_s6_responder_must_accept_rev1_requests;
//     unenhanced responder MUST close on S=1: rfc6581_s10_unenhanced_responder_closes_on_enhanced_request;
//     initiator MAY fall back: rfc6581_s10_initiator_reports_enhanced_refused_for_fallback;
//     an enhanced request answered unenhanced violates the REQUIRED: rfc6581_s10_unenhanced_reply_to_enhanced_request_is_malformed.
