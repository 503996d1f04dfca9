//! `[tcp] header_prediction = false`: the stream of tests/dpdk_gso.rs (RDMA Writes of several
//! sizes and small Sends over a trusted-link net_ring pair, where the prediction would apply
//! to nearly every frame) with the prediction off: no frame takes it, and the data still
//! arrive intact and aligned (the full path alone carries the connection). One EAL per
//! process: the only EAL test of this binary.

mod dp_common;

#[test]
fn header_prediction_off_sends_every_frame_down_the_full_path() {
    let (a, stats, cfg) = dp_common::align::stream_writes("dpwnopred", 4798, |c| {
        for p in c.ports.iter_mut() {
            p.checksum = "trusted-link".into();
        }
        assert!(
            c.tcp.header_prediction,
            "header prediction is on by default"
        );
        c.tcp.header_prediction = false;
    });
    dp_common::align::assert_all_aligned(&a, &cfg);
    let rx: u64 = stats.iter().map(|s| s.device.rx_packets).sum();
    let predicted: u64 = stats.iter().map(|s| s.rx_predicted).sum();
    eprintln!("{predicted} of {rx} received frames predicted");
    assert!(rx > 1000, "only {rx} frames received");
    assert_eq!(predicted, 0, "frames took the prediction with it off");
}
