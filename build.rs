//! Build script: dpwarp's own DPDK FFI (the `dpdk-sys` role).
//!
//! 1. Finds the system libdpdk with pkg-config (a clear error when it is missing).
//! 2. Compiles `csrc/shim.c`: DPDK's fast path is static inline (rx/tx burst, mbuf alloc/free,
//!    `rte_errno` is TLS), so Rust reaches it through small C functions. Every token of
//!    `pkg-config --cflags libdpdk` goes to the compiler, including `-include rte_config.h` and
//!    `-march=...` which the `pkg-config` crate would drop (docs/dataplane.md).
//! 3. Generates bindings for `csrc/shim.h` only (allowlisted `dpw_*` and `rte_eal_*`, mbuf and
//!    mempool opaque), so bindgen never parses the full DPDK headers.
//!
//! All of this only with the `dpdk` cargo feature (on by default). Without it the script does
//! nothing: no pkg-config, no C compiler, no libclang, no DPDK.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "dpdk")]
    dpdk::build();
}

#[cfg(feature = "dpdk")]
mod dpdk {
    use std::env;
    use std::path::PathBuf;
    use std::process::Command;

    /// The DPDK libraries the shim and bindings use (dynamic: EAL then dlopens the PMDs it ships).
    const LIBS: &[&str] = &[
        "rte_net_ring",
        "rte_ethdev",
        "rte_mbuf",
        "rte_mempool",
        "rte_ring",
        "rte_eal",
        "rte_kvargs",
    ];

    fn pkg_config(args: &[&str]) -> Result<String, String> {
        let out = Command::new("pkg-config")
            .args(args)
            .arg("libdpdk")
            .output()
            .map_err(|e| format!("cannot run pkg-config: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    pub fn build() {
        println!("cargo:rerun-if-changed=csrc/shim.c");
        println!("cargo:rerun-if-changed=csrc/shim.h");
        println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

        let version = match pkg_config(&["--modversion"]) {
            Ok(v) => v,
            Err(e) => panic!(
                "\n\ndpwarp needs the system DPDK (libdpdk >= 22.11) for its dataplane, and \
             pkg-config cannot find it ({e}).\nOn Debian 12: apt-get install dpdk-dev libdpdk-dev \
             pkg-config libclang-dev   (scripts/test and scripts/demo do this for you)\n\n"
            ),
        };
        let major: u32 = version
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        if major < 22 {
            panic!("dpwarp needs DPDK >= 22.11; pkg-config found libdpdk {version}");
        }
        let cflags =
            pkg_config(&["--cflags"]).unwrap_or_else(|e| panic!("pkg-config --cflags: {e}"));
        let libdirs = pkg_config(&["--libs-only-L"]).unwrap_or_default();

        let mut cc = cc::Build::new();
        cc.file("csrc/shim.c").include("csrc").warnings(true);
        // `-include rte_config.h` is two tokens and must stay a pair.
        let toks: Vec<&str> = cflags.split_whitespace().collect();
        let mut i = 0;
        while i < toks.len() {
            if toks[i] == "-include" && i + 1 < toks.len() {
                cc.flag("-include").flag(toks[i + 1]);
                i += 2;
            } else {
                cc.flag(toks[i]);
                i += 1;
            }
        }
        cc.compile("dpwarp_dpdk_shim");

        for d in libdirs.split_whitespace() {
            if let Some(p) = d.strip_prefix("-L") {
                println!("cargo:rustc-link-search=native={p}");
            }
        }
        // --no-as-needed: the PMD libraries register their drivers from constructors; keep them.
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        for l in LIBS {
            println!("cargo:rustc-link-lib=dylib={l}");
        }

        let bindings = bindgen::Builder::default()
            .header("csrc/shim.h")
            .allowlist_function("dpw_.*")
            .allowlist_function("rte_eal_init")
            .allowlist_function("rte_eal_cleanup")
            .allowlist_type("dpw_.*")
            .allowlist_var("dpw_.*")
            .opaque_type("rte_mbuf")
            .opaque_type("rte_mempool")
            .derive_default(true)
            .layout_tests(false)
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
            .generate()
            .expect("bindgen over csrc/shim.h (needs libclang: apt-get install libclang-dev)");
        let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("dpdk_bindings.rs");
        bindings.write_to_file(&out).expect("write bindings");
        println!("cargo:rustc-env=DPWARP_DPDK_VERSION={version}");
    }
}
