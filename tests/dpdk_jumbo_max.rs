//! The largest MTU a port takes (`dpwarp::config::MAX_MTU`, 65389: a frame fills one mbuf's
//! 16-bit data room) on a net_ring pair: a 1 MiB RDMA Write and Read (data verified) in
//! segments of 65349 octets, 33 or so for the 2 MiB, as the kernel's loopback (MTU 65536)
//! carries a stream. One EAL per process: the only EAL test of this binary.

mod dp_common;

#[test]
fn the_largest_mtu_carries_write_and_read_in_segments_of_its_emss() {
    const MTU: u16 = 65389;
    assert_eq!(dpwarp::config::MAX_MTU, MTU);
    // 1023 mbufs of 64 KiB data room per port: 2 x 66 MiB within the config's `-m 512`.
    dp_common::jumbo::jumbo_write_read("dpwjm", MTU, 1023, 4794);
}
