# Sourced by scripts/ab and scripts/pgo: the dataplane configs of a dpperf server and client
# over DPDK net_memif, two processes, as scripts/bench writes them for its headline runs
# (MTU 1500, driven workers' batch, the 2 MiB receive and 1 MiB transmit rings, IPv4/TCP
# checksums skipped on this shared-memory link: checksum = "trusted-link"; MPA CRC32c stays).
#
#   memif_pair_configs DIR NET   write DIR/server.toml (10.NET.0.1, core 0) and DIR/client.toml
#                                (10.NET.0.2, core 1; core 0 on a one-CPU machine), the memif
#                                socket DIR/memif.sock (remove it before each server start)

# memif_config FILE ROLE IP MAC CORE SOCKET
memif_config() {
    cat >"$1" <<EOT
[eal]
args = ["-l", "$5", "--no-huge", "-m", "512", "--no-shconf", "--no-pci", "--log-level=*:warning",
        "--vdev=net_memif0,role=$2,id=0,socket=$6,socket-abstract=no"]
[[port]]
device = "net_memif0"
ip = "$3/24"
mac = "$4"
cores = [$5]
mbufs = 16383
checksum = "trusted-link"
[worker]
batch = 32
[tcp]
rx_buffer = 2097152
tx_buffer = 1048576
EOT
}

memif_pair_configs() {
    local dir=$1 net=$2 ccore=0
    [[ $(nproc) -gt 1 ]] && ccore=1
    memif_config "$dir/server.toml" server "10.$net.0.1" "02:00:00:$net:00:01" 0 "$dir/memif.sock"
    memif_config "$dir/client.toml" client "10.$net.0.2" "02:00:00:$net:00:02" "$ccore" "$dir/memif.sock"
}
