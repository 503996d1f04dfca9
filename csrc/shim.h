/* Declarations bindgen reads: the dpwarp shim over DPDK (see shim.c). */
#ifndef DPWARP_SHIM_H
#define DPWARP_SHIM_H
#include <stdint.h>

struct rte_mbuf;
struct rte_mempool;

struct dpw_port_info {
	uint8_t mac[6];
	uint16_t max_rx_queues;
	uint16_t max_tx_queues;
	uint16_t min_mtu;
	uint16_t max_mtu;
	uint64_t tx_offload_capa;
	uint64_t rx_offload_capa;
	uint16_t reta_size;
	uint8_t hash_key_size;
	char driver[64];
	/* Largest frame the device receives (rte_eth_dev_info::max_rx_pktlen): with max_mtu, what
	 * rte_eth_dev_set_mtu accepts. */
	uint32_t max_rx_pktlen;
	/* Most segments of one transmitted packet, and of one MTU-sized frame of a TSO packet
	 * (rte_eth_dev_info::tx_desc_lim; UINT16_MAX when the PMD sets no limit). */
	uint16_t nb_seg_max;
	uint16_t nb_mtu_seg_max;
};

/* What a configured port reports back: the device as the EAL knows it, the queues and offloads
 * in force (rte_eth_dev_conf_get), the RSS hash functions and key (rte_eth_dev_rss_hash_conf_get). */
struct dpw_port_grant {
	char name[64]; /* rte_dev_name(): a PCI address such as 0000:00:05.0, a vdev name */
	char bus[32];  /* rte_bus_name(rte_dev_bus()): pci, vdev, ... */
	uint16_t nb_rx_queues;
	uint16_t nb_tx_queues;
	uint64_t rx_offloads;
	uint64_t tx_offloads;
	int rss_mq;    /* rxmode.mq_mode asks for RSS */
	int rss_rc;    /* rte_eth_dev_rss_hash_conf_get: 0, or a negative errno (-ENOTSUP: no RSS) */
	uint64_t rss_hf;
	uint8_t rss_key[128];
	uint8_t rss_key_len;
};

struct dpw_port_stats {
	uint64_t ipackets, opackets, ibytes, obytes, imissed, ierrors, oerrors, rx_nombuf;
};

int rte_eal_init(int argc, char **argv);
int rte_eal_cleanup(void);
int dpw_errno(void);
const char *dpw_strerror(int e);
/* Bursts; gate >= 0: a slot of the region gate (shim.c), held for the burst. */
uint16_t dpw_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n,
		      int gate);
uint16_t dpw_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n,
		      int gate);
/* The region gate (shim.c): a slot for a queue (-1: none free), its release, a burst's hold of
 * it; net_memif's mmap64/munmap imports pointed at the gate (entries hooked, or -1 and error)
 * and how many point there now; the counts: gate waits, of those made to wait, munmaps and
 * mmaps net_memif made. */
int dpw_gate_claim(void);
void dpw_gate_release(int slot);
void dpw_gate_enter(int slot);
void dpw_gate_exit(int slot);
int dpw_gate_hook_memif(int *error);
int dpw_gate_memif_hooked(void);
/* 1: bursts' barrier made by the waiter's membarrier(2); 0: an xchg per burst. */
int dpw_gate_uses_membarrier(void);
/* For the gate's test: a page mapped / unmapped through the gate's mmap64 / munmap. */
void *dpw_gate_test_map_page(void);
int dpw_gate_test_unmap_page(void *page);
void dpw_gate_stats(uint64_t *calls, uint64_t *waits, uint64_t *memif_unmaps,
		    uint64_t *memif_maps);
struct rte_mbuf *dpw_pktmbuf_alloc(struct rte_mempool *mp);
/* n mbufs from mp, not reset (rte_mempool_get_bulk): 0, or nonzero and none taken. */
int dpw_mbuf_raw_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **out, unsigned n);
/* rte_pktmbuf_reset: an mbuf from dpw_mbuf_raw_alloc_bulk made ready as rte_pktmbuf_alloc's. */
void dpw_pktmbuf_reset(struct rte_mbuf *m);
/* Offset from an mbuf of mp to its data after a reset (header, private area, headroom). */
unsigned dpw_pool_data_offset(struct rte_mempool *mp);
void dpw_pktmbuf_free(struct rte_mbuf *m);
/* Where the fields read for every frame lie in struct rte_mbuf (offsetof, this DPDK's ABI):
 * the Rust side reads them inline instead of calling a shim function per field and frame. */
struct dpw_mbuf_layout {
	uint16_t buf_addr;
	uint16_t data_off;
	uint16_t nb_segs;
	uint16_t data_len;
	uint16_t next;
};
extern const struct dpw_mbuf_layout dpw_mbuf_layout;

uint32_t dpw_pkt_len(const struct rte_mbuf *m);
int dpw_pktmbuf_linearize(struct rte_mbuf *m);
/* rte_pktmbuf_chain: `tail` behind the last segment of `head`; 0, or -1 (nothing chained) when
 * the chain would exceed RTE_MBUF_MAX_NB_SEGS. */
int dpw_pktmbuf_chain(struct rte_mbuf *head, struct rte_mbuf *tail);
/* Mark the Ethernet/IPv4/TCP packet `m` (its headers in the first segment) for TCP segmentation
 * offload into segments of tso_segsz payload octets (rte_mbuf_core.h RTE_MBUF_F_TX_TCP_SEG). */
void dpw_tx_tso(struct rte_mbuf *m, uint16_t l2_len, uint16_t l3_len, uint16_t l4_len,
		uint16_t tso_segsz);
/* rte_eth_tx_prepare of n packets: how many are ready to send (the first one that is not
 * stops it; rte_errno says why). */
uint16_t dpw_tx_prepare(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
/* An external buffer's free callback (rte_mbuf_extbuf_free_callback_t). */
typedef void (*dpw_extbuf_free_cb)(void *addr, void *opaque);
/* Bytes and alignment of struct rte_mbuf_ext_shared_info (storage the caller provides). */
unsigned dpw_shinfo_size(void);
unsigned dpw_shinfo_align(void);
int dpw_chain_extbuf(struct rte_mbuf *head, struct rte_mbuf *ext, void *addr, uint16_t len,
		     void *shinfo, dpw_extbuf_free_cb free_cb, void *opaque);
struct rte_mbuf *dpw_pktmbuf_copy(const struct rte_mbuf *m, struct rte_mempool *mp);
uint8_t *dpw_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
uint16_t dpw_tailroom(const struct rte_mbuf *m);
uint64_t dpw_ol_flags(const struct rte_mbuf *m);
struct rte_mempool *dpw_pool_create(const char *name, unsigned n, unsigned cache,
				    uint16_t data_room, int socket);
void dpw_pool_free(struct rte_mempool *mp);
unsigned dpw_pool_avail(const struct rte_mempool *mp);
unsigned dpw_lcore_id(void);
int dpw_current_cpu(void);
int dpw_thread_register(void);
void dpw_thread_unregister(void);
int dpw_port_by_name(const char *name, uint16_t *port);
int dpw_port_info(uint16_t port, struct dpw_port_info *out);
int dpw_port_grant(uint16_t port, struct dpw_port_grant *out);
/* rte_eth_dev_tx_offload_name (tx != 0) or rte_eth_dev_rx_offload_name of one offload bit. */
const char *dpw_offload_name(int tx, uint64_t bit);
int dpw_port_setup(uint16_t port, uint16_t nq, uint16_t nb_rxd, uint16_t nb_txd,
		   struct rte_mempool *pool, uint16_t mtu, uint64_t rx_offloads,
		   uint64_t tx_offloads);
int dpw_port_start(uint16_t port);
int dpw_port_reta_round_robin(uint16_t port, uint16_t nq);
int dpw_port_stop(uint16_t port);
int dpw_port_close(uint16_t port);
int dpw_port_promisc(uint16_t port);
int dpw_port_mtu(uint16_t port, uint16_t *mtu);
int dpw_port_stats(uint16_t port, struct dpw_port_stats *out);
int dpw_port_link(uint16_t port, uint32_t *speed_mbps, int *up);
int dpw_ring_pair(const char *name, uint16_t nq, unsigned ring_size, uint16_t *port_a,
		  uint16_t *port_b);
/* Receive checksum verdicts of a PMD (RTE_MBUF_F_RX_{IP,L4}_CKSUM_*). */
enum dpw_cksum {
	DPW_CKSUM_UNKNOWN = 0,
	DPW_CKSUM_BAD = 1,
	DPW_CKSUM_GOOD = 2,
	DPW_CKSUM_NONE = 3,
};
void dpw_rx_cksum(const struct rte_mbuf *m, int *ip, int *l4);
/* Write the IPv4 pseudo-header checksum (rte_ipv4_phdr_cksum) into the TCP checksum field of the
 * IPv4 packet at `ip` whose header is l3_len bytes: what DPDK's TCP checksum offload expects. */
void dpw_ipv4_tcp_phdr(uint8_t *ip, uint16_t l3_len, uint64_t ol_flags);
/* Ask the PMD to fill the IPv4 header and/or TCP checksums of `m` (an Ethernet frame with an
 * l2_len-byte link header and an l3_len-byte IPv4 header). */
void dpw_tx_cksum_offload(struct rte_mbuf *m, uint16_t l2_len, uint16_t l3_len, int ip_cksum,
			  int tcp_cksum);
#endif
