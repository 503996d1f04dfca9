//! Segmentation offload (`[tcp] gso`, on by default) on a trusted link: smoltcp builds TCP
//! segments of up to 64 frames and the device cuts them into frames of the MSS, each with
//! its own copy of the headers, IPv4 total length and sequence number. The stream of
//! tests/dpdk_align.rs (RDMA Writes whose last FPDU is short, small Sends, the transmit ring
//! wrapped several times) over a net_ring pair with `checksum = "trusted-link"`, every frame
//! of port a captured: the data must arrive intact, every frame must fit the MTU, every data
//! segment on the wire must still begin with an FPDU (RFC 5044 App. A: the device cuts where
//! smoltcp's per-segment path would have cut), the capture must reassemble with no gap (the
//! lengths and sequence numbers written per frame add up), and the device must actually have
//! cut segments. On the receiving side, nearly every frame must take smoltcp's header
//! prediction (no checksum to verify on a trusted link; docs/datapath.md "Header
//! prediction"), and the data still arrive intact. One EAL per process: the only EAL test of
//! this binary.

mod dp_common;

#[test]
fn segments_cut_by_the_device_stay_on_fpdu_boundaries() {
    let (a, stats, cfg) = dp_common::align::stream_writes("dpwgso", 4795, |c| {
        for p in c.ports.iter_mut() {
            p.checksum = "trusted-link".into();
        }
        assert!(c.tcp.gso, "gso is on by default");
    });
    dp_common::align::assert_all_aligned(&a, &cfg);
    let mtu = cfg.ports[0].mtu.max(1500) as u64;
    assert!(
        a.max_frame <= mtu + 14,
        "a {}-octet frame on a port with MTU {mtu}",
        a.max_frame
    );
    let segs: u64 = stats.iter().map(|s| s.device.tx_gso_segments).sum();
    let frames: u64 = stats.iter().map(|s| s.device.tx_gso_frames).sum();
    eprintln!("{segs} segments cut into {frames} frames by the device");
    assert!(segs > 0, "the device cut no segment");
    assert!(frames >= 2 * segs, "{frames} frames from {segs} segments");
    let rx: u64 = stats.iter().map(|s| s.device.rx_packets).sum();
    let predicted: u64 = stats.iter().map(|s| s.rx_predicted).sum();
    eprintln!("{predicted} of {rx} received frames predicted");
    assert!(
        predicted * 10 >= rx * 9,
        "only {predicted} of {rx} received frames took the header prediction"
    );
}
