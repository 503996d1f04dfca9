//! Jumbo frames on the dataplane: a net_ring pair with `mtu = 9000` on both ports. TCP's EMSS
//! and with it MULPDU follow the MTU (RFC 5044 §4.2, App. A), so a 1 MiB RDMA Write and Read
//! (data verified) travel in ~8960-octet segments: far fewer frames than a 1500-octet MTU needs.
//! One EAL per process: the only EAL test of this binary.

mod dp_common;

#[test]
fn mtu_9000_jumbo_segments_carry_write_and_read() {
    dp_common::jumbo::jumbo_write_read("dpwj", 9000, 4095, 4793);
}
