//! Network namespaces for tests that reach the kernel stack from DPDK (net_tap): made with a
//! name unique to the test process, deleted when dropped. Needs root.

#![allow(dead_code)]

use std::fs::File;
use std::process::Command;

/// Run `ip ARGS` and require success.
pub fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().expect("run ip");
    assert!(st.success(), "ip {args:?} failed");
}

/// Fail (not skip) without root: namespaces, taps and veths need it.
pub fn require_root() {
    let uid = Command::new("id").arg("-u").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "this test needs root (network namespace, tap)"
    );
}

/// A network namespace `<tag><pid>`, deleted on drop.
pub struct Netns(pub String);

impl Netns {
    /// Make the namespace (root required).
    pub fn new(tag: &str) -> Netns {
        require_root();
        let ns = Netns(format!("{tag}{}", std::process::id()));
        ip(&["netns", "add", &ns.0]);
        ns
    }

    /// Move the calling thread into the namespace: its sockets, and the threads it starts
    /// from now on (DPDK workers, a tap the EAL creates, QP driver threads), live there.
    pub fn enter(&self) {
        let fd = File::open(format!("/run/netns/{}", self.0)).unwrap();
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&fd),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .expect("setns into the test's namespace");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}
