//! net_pcap capture: the demo over a net_ring pair with every frame of one port copied to a
//! `net_pcap` vdev (`tx_pcap=FILE`), in a child process (its own EAL). The pcap must decode in
//! tshark as iWARP with good CRCs (scripts/check-capture), and - the demo waits for each
//! operation - TCP data segments must begin on FPDU boundaries (RFC 5044 App. A).

use std::process::Command;

#[test]
fn pcap_capture_decodes_as_iwarp_and_segments_start_with_fpdus() {
    let dir = std::env::temp_dir().join(format!("dpwarp-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("dpdk.pcap");
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/configs/net_pcap.toml")).unwrap();
    let text = text.replace("target/demo/dpdk.pcap", pcap.to_str().unwrap());
    assert!(text.contains(pcap.to_str().unwrap()));
    let cfg = dir.join("net_pcap.toml");
    std::fs::write(&cfg, text).unwrap();

    let o = Command::new(env!("CARGO_BIN_EXE_dpwarp"))
        .args([
            "demo",
            "--transport",
            "dpdk",
            "--no-perf",
            "--size",
            "100000",
            "--config",
        ])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "demo failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    let bytes = std::fs::read(&pcap).expect("the capture was written");
    let a = dpwarp::capture::analyse(&bytes, 1 << 28).unwrap();
    assert!(a.data_segments > 100, "{a:?}");
    assert_eq!(a.skipped_flows, 0, "{a:?}");
    assert!(a.fraction() >= 0.95, "{a:?}");

    assert!(
        Command::new("tshark").arg("--version").output().is_ok(),
        "tshark is needed to decode the capture (apt-get install tshark)"
    );
    let o = Command::new(format!("{root}/scripts/check-capture"))
        .arg(&pcap)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "check-capture: {out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("good CRC32"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
