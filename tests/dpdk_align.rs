//! RFC 5044 Appendix A under streaming: a client streams RDMA Writes of several sizes (each
//! message's last FPDU is short) and small Sends back to back over a net_ring pair while a
//! net_pcap vdev captures every frame; the TCP data segments in the capture must begin with an
//! FPDU header. Before the worker fed smoltcp one segment of whole FPDUs at a time, a message's
//! short last FPDU shifted every later segment boundary (14.8 % aligned, docs/dataplane.md).
//! The ports compute checksums in software, so smoltcp cuts every segment itself (no
//! segmentation offload: tests/dpdk_gso.rs is the same stream with it) and verifies every
//! received frame's (no header prediction).
//! One EAL per process: the only EAL test of this binary.

mod dp_common;

#[test]
fn streaming_writes_keep_segments_on_fpdu_boundaries() {
    let (a, stats, cfg) = dp_common::align::stream_writes("dpwal", 4792, |_| {});
    // Every data segment, also those whose payload wraps around the end of the transmit ring
    // (the vendored smoltcp sends such a segment whole instead of cutting it at the wrap,
    // third_party/smoltcp/DPWARP.md).
    dp_common::align::assert_all_aligned(&a, &cfg);
    // Software checksums cover a whole segment: the device cuts none.
    let gso: u64 = stats.iter().map(|s| s.device.tx_gso_segments).sum();
    assert_eq!(gso, 0, "segmentation offload with software checksums");
    // Nor does smoltcp predict headers: every frame's checksums are verified.
    let predicted: u64 = stats.iter().map(|s| s.rx_predicted).sum();
    assert_eq!(predicted, 0, "header prediction with software checksums");
}
