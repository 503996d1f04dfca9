//! Thread placement (`sched_getaffinity`/`sched_setaffinity` through rustix): used by the DPDK
//! dataplane to place workers and by the tools to pin benchmark threads.

/// The CPUs the calling thread may run on (`sched_getaffinity`); empty if unknown.
pub fn thread_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Restrict the calling thread to `cpus` (`sched_setaffinity`).
pub fn set_thread_cpus(cpus: &[usize]) -> std::io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    for &c in cpus {
        if c < rustix::thread::CpuSet::MAX_CPU {
            set.set(c);
        }
    }
    rustix::thread::sched_setaffinity(None, &set).map_err(std::io::Error::from)
}
