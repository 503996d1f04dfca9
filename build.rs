//! Build script. The DPDK FFI (bindgen over the system libdpdk plus a C shim) is added here by the
//! dataplane issue; for now it only declares that nothing outside the crate affects the build.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
}
