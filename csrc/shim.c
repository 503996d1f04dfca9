/* dpwarp's C shim over DPDK 22.11: the static-inline fast-path functions (rx/tx burst, mbuf
 * alloc/free/append/mtod), the TLS rte_errno, and port setup that needs the large rte_eth_conf
 * structs (kept in C so the Rust bindings stay small and opaque). Built by build.rs. */
#define _GNU_SOURCE
/* rte_eth_dev_conf_get (the offloads a port was configured with) is experimental in 22.11. */
#define ALLOW_EXPERIMENTAL_API
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <sched.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stddef.h>
#include <string.h>
#include <stdio.h>
#include <time.h>
#include <rte_alarm.h>
#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_interrupts.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>
#include <rte_eth_ring.h>
#include <rte_lcore.h>
#include <rte_ip.h>
#include <rte_tcp.h>

#include "shim.h"

int dpw_errno(void) { return rte_errno; }

const char *dpw_strerror(int e) { return rte_strerror(e); }

/*
 * The region gate: net_memif's bursts against a peer's DISCONNECT (docs/dataplane.md "net_memif
 * and a peer that disconnects").
 *
 * DPDK 22.11's net_memif handles the peer's DISCONNECT (or the end of its control socket, when
 * the peer process exits) on the EAL interrupt thread: memif_disconnect() clears the port's
 * CONNECTED flag and then munmap()s the shared regions. rte_eth_rx_burst/tx_burst read that
 * flag once at their start and then use the regions with nothing shared with that thread, so a
 * burst that passed its check just before the flag went (and was descheduled, or copied long
 * enough) reads or writes unmapped memory: a segfault in librte_net_memif (seen in eth_memif_tx
 * of a dpperf server and in eth_memif_rx, reading the ring's head, of an rpc-server whose
 * client exited).
 *
 * The bursts also read the ring's address from the region table before they read the flag:
 * a burst descheduled between the two across a whole disconnect and reconnect (the region
 * unmapped, a new one mapped, the flag set again) reads the old, unmapped ring (seen in a
 * test that polls through 50 reconnects: a segfault reading the ring's flags).
 *
 * The PMD raises no event before it unmaps (no LSC callback in memif_disconnect), but it maps
 * and unmaps through its own imports of mmap64 and munmap. dpw_gate_hook_memif() points those
 * two entries of net_memif's GOT (and only net_memif's: the host program's mmap and munmap,
 * and every other library's, stay glibc's) at dpw_gate_mmap64/dpw_gate_munmap, which first wait
 * until no burst on a gated queue is still running. Each gated queue owns a slot whose
 * sequence number is odd while a burst runs. A burst makes it odd before the PMD reads
 * anything, with a full barrier between (made by the waiter's membarrier(2) where the kernel
 * offers it, else an xchg); munmap (after the PMD's store of the flag and the system calls
 * between) reads every slot after a full barrier: either it sees the burst (and waits for that
 * burst to end) or the burst sees the cleared flag (and touches no region). A connect maps the
 * new region (the server maps the client's file, the client creates its own) before it sets
 * the flag, so a burst that began before a reconnect ends before the reconnect can complete:
 * it cannot see the new flag with the old ring. Bursts never map or unmap, so the wait cannot
 * deadlock; a thread's own burst (a signal handler's call) is skipped.
 */
#define DPW_GATE_SLOTS 256

struct dpw_gate_slot {
	uint64_t seq;  /* odd while a burst runs; written by the owning queue's thread only */
	uint32_t used; /* claimed by a queue */
} __attribute__((aligned(64)));

static struct dpw_gate_slot dpw_gate[DPW_GATE_SLOTS];
static uint32_t dpw_gate_bound; /* slots ever claimed: munmap scans [0, bound) */
static uint32_t dpw_gate_live;  /* slots claimed now: munmap is plain when 0 */
static uint64_t dpw_gate_calls, dpw_gate_waits, dpw_gate_memif_unmaps, dpw_gate_memif_maps;
static __thread int dpw_gate_self = -1;
/* 1: membarrier(2)'s private expedited command is registered, and the barrier a burst needs
 * between its slot store and the PMD's flag load is made by the waiter for it (membarrier runs
 * a full barrier on every CPU running a thread of this process): a burst pays two plain stores.
 * 0: not available (a kernel before 4.14, a seccomp filter): each burst's store is an xchg. */
static int dpw_gate_asym;
static pthread_once_t dpw_gate_once = PTHREAD_ONCE_INIT;

static void dpw_gate_init(void)
{
	dpw_gate_asym =
		syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

int dpw_gate_claim(void)
{
	pthread_once(&dpw_gate_once, dpw_gate_init);
	for (uint32_t i = 0; i < DPW_GATE_SLOTS; i++) {
		uint32_t free_ = 0;
		if (__atomic_compare_exchange_n(&dpw_gate[i].used, &free_, 1, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED)) {
			uint32_t b = __atomic_load_n(&dpw_gate_bound, __ATOMIC_RELAXED);
			while (b < i + 1 &&
			       !__atomic_compare_exchange_n(&dpw_gate_bound, &b, i + 1, 0,
							    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
				;
			__atomic_add_fetch(&dpw_gate_live, 1, __ATOMIC_SEQ_CST);
			return (int)i;
		}
	}
	return -1;
}

void dpw_gate_release(int slot)
{
	if (slot < 0 || slot >= DPW_GATE_SLOTS)
		return;
	__atomic_sub_fetch(&dpw_gate_live, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&dpw_gate[slot].used, 0, __ATOMIC_RELEASE);
}

void dpw_gate_enter(int slot)
{
	struct dpw_gate_slot *s = &dpw_gate[slot];
	uint64_t odd = __atomic_load_n(&s->seq, __ATOMIC_RELAXED) + 1;
	if (__atomic_load_n(&dpw_gate_asym, __ATOMIC_RELAXED)) {
		/* The store, and no reordering by the compiler; the CPU's store-load barrier comes
		 * from the waiter's membarrier. */
		__atomic_store_n(&s->seq, odd, __ATOMIC_RELAXED);
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
	} else {
		/* xchg: the store and a full barrier before the PMD reads its flag. */
		__atomic_exchange_n(&s->seq, odd, __ATOMIC_SEQ_CST);
	}
	dpw_gate_self = slot;
}

void dpw_gate_exit(int slot)
{
	struct dpw_gate_slot *s = &dpw_gate[slot];
	dpw_gate_self = -1;
	__atomic_store_n(&s->seq, __atomic_load_n(&s->seq, __ATOMIC_RELAXED) + 1,
			 __ATOMIC_RELEASE);
}

static void dpw_gate_wait(void)
{
	uint32_t bound = __atomic_load_n(&dpw_gate_bound, __ATOMIC_ACQUIRE);
	int waited = 0;

	/* A full barrier here and, with membarrier, on every CPU running one of this process's
	 * threads (a descheduled thread had one at its switch). */
	if (!__atomic_load_n(&dpw_gate_asym, __ATOMIC_RELAXED) ||
	    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
	for (uint32_t i = 0; i < bound; i++) {
		uint64_t seq = __atomic_load_n(&dpw_gate[i].seq, __ATOMIC_ACQUIRE);
		unsigned spins = 0;
		if (!(seq & 1) || (int)i == dpw_gate_self)
			continue;
		waited = 1;
		/* The burst's thread may be descheduled (the very case): yield after a short spin. */
		while (__atomic_load_n(&dpw_gate[i].seq, __ATOMIC_ACQUIRE) == seq) {
			if (++spins < 64)
				rte_pause();
			else
				sched_yield();
		}
	}
	__atomic_add_fetch(&dpw_gate_calls, 1, __ATOMIC_RELAXED);
	if (waited)
		__atomic_add_fetch(&dpw_gate_waits, 1, __ATOMIC_RELAXED);
}

/* What net_memif's mmap64 and munmap are once dpw_gate_hook_memif() has run: the PMD's own
 * calls (its regions, on a connect and a disconnect), each after the bursts in progress. */
static int dpw_gate_munmap(void *addr, size_t len)
{
	dpw_gate_wait();
	__atomic_add_fetch(&dpw_gate_memif_unmaps, 1, __ATOMIC_RELAXED);
	return munmap(addr, len);
}

static void *dpw_gate_mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	dpw_gate_wait();
	__atomic_add_fetch(&dpw_gate_memif_maps, 1, __ATOMIC_RELAXED);
	return mmap(addr, len, prot, flags, fd, off);
}

#if defined(__x86_64__)
#define DPW_R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define DPW_R_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define DPW_R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define DPW_R_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

/* What dpw_gate_hook_memif() found and did. */
struct dpw_memif_got {
	int found;       /* net_memif is loaded as a shared object */
	int hooked;      /* GOT entries now pointing at the gate */
	int error;       /* errno of a failed mprotect, or ENOSYS (an architecture without the table) */
	void **slots[8]; /* the entries, for dpw_gate_memif_hooked() */
};

static struct dpw_memif_got dpw_memif_got;
static pthread_mutex_t dpw_memif_got_lock = PTHREAD_MUTEX_INITIALIZER;

/* A dynamic-section address: glibc relocates most d_ptr values in place, some ports do not. */
static uintptr_t dpw_dyn_ptr(uintptr_t base, uintptr_t p) { return p < base ? base + p : p; }

/* Point one GOT entry at `to`. A full-RELRO object's GOT is read-only after relocation: made
 * writable for the store, read-only again after. */
static int dpw_got_store(struct dl_phdr_info *info, void **slot, void *to)
{
	uintptr_t a = (uintptr_t)slot;
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	int relro = 0;

	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_GNU_RELRO && a >= lo && a < lo + ph->p_memsz)
			relro = 1;
	}
	if (relro && mprotect((void *)(a & ~(page - 1)), page, PROT_READ | PROT_WRITE) != 0)
		return errno;
	__atomic_store_n(slot, to, __ATOMIC_SEQ_CST);
	if (relro)
		mprotect((void *)(a & ~(page - 1)), page, PROT_READ);
	return 0;
}

static int dpw_memif_got_visit(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct dpw_memif_got *got = arg;
	const ElfW(Dyn) *dyn = NULL;
	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;
	const ElfW(Rela) *rela[2] = {NULL, NULL};
	size_t relasz[2] = {0, 0};

	(void)size;
	if (info->dlpi_name == NULL || strstr(info->dlpi_name, "librte_net_memif") == NULL)
		return 0;
	got->found = 1;
#ifndef DPW_R_JUMP_SLOT
	got->error = ENOSYS;
	return 1;
#else
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
	if (dyn == NULL)
		return 1;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		uintptr_t p = dpw_dyn_ptr(info->dlpi_addr, dyn->d_un.d_ptr);
		switch (dyn->d_tag) {
		case DT_SYMTAB: symtab = (const ElfW(Sym) *)p; break;
		case DT_STRTAB: strtab = (const char *)p; break;
		case DT_JMPREL: rela[0] = (const ElfW(Rela) *)p; break;
		case DT_PLTRELSZ: relasz[0] = dyn->d_un.d_val; break;
		case DT_RELA: rela[1] = (const ElfW(Rela) *)p; break;
		case DT_RELASZ: relasz[1] = dyn->d_un.d_val; break;
		}
	}
	if (symtab == NULL || strtab == NULL)
		return 1;
	for (int t = 0; t < 2; t++) {
		for (size_t k = 0; rela[t] != NULL && k < relasz[t] / sizeof(ElfW(Rela)); k++) {
			const ElfW(Rela) *r = &rela[t][k];
			unsigned type = ELF64_R_TYPE(r->r_info);
			const char *name;
			void *to;
			void **slot;
			int e;
			if (type != DPW_R_JUMP_SLOT && type != DPW_R_GLOB_DAT)
				continue;
			name = strtab + symtab[ELF64_R_SYM(r->r_info)].st_name;
			if (strcmp(name, "munmap") == 0)
				to = (void *)dpw_gate_munmap;
			else if (strcmp(name, "mmap64") == 0 || strcmp(name, "mmap") == 0)
				to = (void *)dpw_gate_mmap64;
			else
				continue;
			slot = (void **)(info->dlpi_addr + r->r_offset);
			if (*slot == to)
				continue;
			e = dpw_got_store(info, slot, to);
			if (e != 0) {
				got->error = e;
				continue;
			}
			if (got->hooked < (int)(sizeof(got->slots) / sizeof(got->slots[0])))
				got->slots[got->hooked] = slot;
			got->hooked++;
		}
	}
	return 1;
#endif
}

/* Point net_memif's own mmap/mmap64/munmap imports at the gate: the number of entries that
 * point there now (0 with *error 0: net_memif is not a loaded shared object, e.g. a static
 * DPDK), or -1 with *error set. Idempotent; safe from any thread. */
int dpw_gate_hook_memif(int *error)
{
	int n;
	pthread_mutex_lock(&dpw_memif_got_lock);
	if (dpw_memif_got.hooked == 0) {
		dpw_memif_got.found = 0;
		dpw_memif_got.error = 0;
		dl_iterate_phdr(dpw_memif_got_visit, &dpw_memif_got);
	}
	n = dpw_memif_got.hooked;
	*error = dpw_memif_got.error;
	pthread_mutex_unlock(&dpw_memif_got_lock);
	return *error != 0 && n == 0 ? -1 : n;
}

/* How many of net_memif's GOT entries point at the gate now (read from the table itself). */
int dpw_gate_memif_hooked(void)
{
	int n = 0;
	pthread_mutex_lock(&dpw_memif_got_lock);
	for (int i = 0; i < dpw_memif_got.hooked && i < 8; i++) {
		void *v = __atomic_load_n(dpw_memif_got.slots[i], __ATOMIC_RELAXED);
		n += v == (void *)dpw_gate_munmap || v == (void *)dpw_gate_mmap64;
	}
	pthread_mutex_unlock(&dpw_memif_got_lock);
	return n;
}

/* For the gate's own test: one anonymous page mapped and unmapped through the gate's entries,
 * as net_memif now calls them. */
void *dpw_gate_test_map_page(void)
{
	void *p = dpw_gate_mmap64(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				  -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

int dpw_gate_test_unmap_page(void *page) { return dpw_gate_munmap(page, 4096); }

int dpw_gate_uses_membarrier(void) { return __atomic_load_n(&dpw_gate_asym, __ATOMIC_RELAXED); }

void dpw_gate_stats(uint64_t *calls, uint64_t *waits, uint64_t *memif_unmaps,
		    uint64_t *memif_maps)
{
	*memif_maps = __atomic_load_n(&dpw_gate_memif_maps, __ATOMIC_RELAXED);
	*calls = __atomic_load_n(&dpw_gate_calls, __ATOMIC_RELAXED);
	*waits = __atomic_load_n(&dpw_gate_waits, __ATOMIC_RELAXED);
	*memif_unmaps = __atomic_load_n(&dpw_gate_memif_unmaps, __ATOMIC_RELAXED);
}

/* `call` (a burst) with the region gate's slot `gate` held around it; plain when gate < 0. */
#define DPW_GATED_BURST(gate, call)                                                            \
	({                                                                                     \
		uint16_t n_;                                                                   \
		if ((gate) < 0) {                                                              \
			n_ = (call);                                                           \
		} else {                                                                       \
			dpw_gate_enter(gate);                                                  \
			n_ = (call);                                                           \
			dpw_gate_exit(gate);                                                   \
		}                                                                              \
		n_;                                                                            \
	})

uint16_t dpw_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n,
		      int gate)
{
	return DPW_GATED_BURST(gate, rte_eth_rx_burst(port, queue, pkts, n));
}

uint16_t dpw_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n,
		      int gate)
{
	return DPW_GATED_BURST(gate, rte_eth_tx_burst(port, queue, pkts, n));
}

struct rte_mbuf *dpw_pktmbuf_alloc(struct rte_mempool *mp) { return rte_pktmbuf_alloc(mp); }

int dpw_mbuf_raw_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **out, unsigned n)
{
	return rte_mempool_get_bulk(mp, (void **)out, n);
}

void dpw_pktmbuf_reset(struct rte_mbuf *m) { rte_pktmbuf_reset(m); }

unsigned dpw_pool_data_offset(struct rte_mempool *mp)
{
	return sizeof(struct rte_mbuf) + rte_pktmbuf_priv_size(mp) + RTE_PKTMBUF_HEADROOM;
}

void dpw_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }

const struct dpw_mbuf_layout dpw_mbuf_layout = {
	.buf_addr = offsetof(struct rte_mbuf, buf_addr),
	.data_off = offsetof(struct rte_mbuf, data_off),
	.nb_segs = offsetof(struct rte_mbuf, nb_segs),
	.data_len = offsetof(struct rte_mbuf, data_len),
	.next = offsetof(struct rte_mbuf, next),
};

uint32_t dpw_pkt_len(const struct rte_mbuf *m) { return m->pkt_len; }

uint8_t *dpw_pktmbuf_append(struct rte_mbuf *m, uint16_t len)
{
	return (uint8_t *)rte_pktmbuf_append(m, len);
}

uint16_t dpw_tailroom(const struct rte_mbuf *m) { return rte_pktmbuf_tailroom(m); }

uint64_t dpw_ol_flags(const struct rte_mbuf *m) { return m->ol_flags; }

struct rte_mempool *dpw_pool_create(const char *name, unsigned n, unsigned cache,
				    uint16_t data_room, int socket)
{
	return rte_pktmbuf_pool_create(name, n, cache, 0, data_room, socket);
}

void dpw_pool_free(struct rte_mempool *mp) { rte_mempool_free(mp); }

unsigned dpw_pool_avail(const struct rte_mempool *mp) { return rte_mempool_avail_count(mp); }

unsigned dpw_lcore_id(void) { return rte_lcore_id(); }

/* The CPU the calling thread runs on, -1 on error: glibc's sched_getcpu, which works under
 * valgrind (rustix's reads the vDSO's ELF image, which valgrind does not map). */
int dpw_current_cpu(void) { return sched_getcpu(); }

/* A thread DPDK did not create gets an lcore id (and so per-lcore mempool caches); -1 when none
 * is left (RTE_MAX_LCORE). */
int dpw_thread_register(void) { return rte_thread_register(); }

void dpw_thread_unregister(void) { rte_thread_unregister(); }

int dpw_port_by_name(const char *name, uint16_t *port)
{
	return rte_eth_dev_get_port_by_name(name, port);
}

int dpw_port_info(uint16_t port, struct dpw_port_info *out)
{
	struct rte_eth_dev_info info;
	struct rte_ether_addr mac;
	int rc = rte_eth_dev_info_get(port, &info);
	if (rc != 0)
		return rc;
	rc = rte_eth_macaddr_get(port, &mac);
	if (rc != 0)
		return rc;
	memset(out, 0, sizeof(*out));
	memcpy(out->mac, mac.addr_bytes, 6);
	out->max_rx_queues = info.max_rx_queues;
	out->max_tx_queues = info.max_tx_queues;
	out->min_mtu = info.min_mtu;
	out->max_mtu = info.max_mtu;
	out->tx_offload_capa = info.tx_offload_capa;
	out->rx_offload_capa = info.rx_offload_capa;
	out->reta_size = info.reta_size;
	out->hash_key_size = info.hash_key_size;
	snprintf(out->driver, sizeof(out->driver), "%s", info.driver_name ? info.driver_name : "?");
	out->max_rx_pktlen = info.max_rx_pktlen;
	out->nb_seg_max = info.tx_desc_lim.nb_seg_max;
	out->nb_mtu_seg_max = info.tx_desc_lim.nb_mtu_seg_max;
	return 0;
}

int dpw_port_grant(uint16_t port, struct dpw_port_grant *out)
{
	struct rte_eth_dev_info info;
	struct rte_eth_conf conf;
	struct rte_eth_rss_conf rss;
	int rc = rte_eth_dev_info_get(port, &info);
	if (rc != 0)
		return rc;
	/* A copy of the port's rte_eth_conf as rte_eth_dev_configure stored it (and the PMD's
	 * configure may have amended it); its rss_key pointer is the caller's stale one, unread. */
	rc = rte_eth_dev_conf_get(port, &conf);
	if (rc != 0)
		return rc;
	memset(out, 0, sizeof(*out));
	if (info.device != NULL) {
		const struct rte_bus *bus = rte_dev_bus(info.device);
		const char *name = rte_dev_name(info.device);
		const char *bus_name = bus != NULL ? rte_bus_name(bus) : NULL;
		snprintf(out->name, sizeof(out->name), "%s", name ? name : "?");
		snprintf(out->bus, sizeof(out->bus), "%s", bus_name ? bus_name : "?");
	}
	out->nb_rx_queues = info.nb_rx_queues;
	out->nb_tx_queues = info.nb_tx_queues;
	out->rx_offloads = conf.rxmode.offloads;
	out->tx_offloads = conf.txmode.offloads;
	out->rss_mq = (conf.rxmode.mq_mode & RTE_ETH_MQ_RX_RSS_FLAG) != 0;
	memset(&rss, 0, sizeof(rss));
	/* The key is read back only into a buffer of at least hash_key_size octets (ethdev refuses
	 * a shorter one). */
	if (info.hash_key_size > 0 && info.hash_key_size <= sizeof(out->rss_key)) {
		rss.rss_key = out->rss_key;
		rss.rss_key_len = info.hash_key_size;
	}
	out->rss_rc = rte_eth_dev_rss_hash_conf_get(port, &rss);
	if (out->rss_rc == 0) {
		out->rss_hf = rss.rss_hf;
		out->rss_key_len = rss.rss_key != NULL ? rss.rss_key_len : 0;
	}
	return 0;
}

const char *dpw_offload_name(int tx, uint64_t bit)
{
	return tx ? rte_eth_dev_tx_offload_name(bit) : rte_eth_dev_rx_offload_name(bit);
}

int dpw_port_setup(uint16_t port, uint16_t nq, uint16_t nb_rxd, uint16_t nb_txd,
		   struct rte_mempool *pool, uint16_t mtu, uint64_t rx_offloads,
		   uint64_t tx_offloads)
{
	struct rte_eth_conf conf;
	uint8_t rss_key[128];
	uint16_t q;
	int rc;
	memset(&conf, 0, sizeof(conf));
	conf.rxmode.offloads = rx_offloads;
	conf.txmode.offloads = tx_offloads;
	if (nq > 1) {
		/* One queue per worker: RSS spreads flows (vdevs without RSS ignore it). */
		struct rte_eth_dev_info info;
		rc = rte_eth_dev_info_get(port, &info);
		if (rc != 0)
			return rc;
		if (info.flow_type_rss_offloads != 0) {
			conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
			conf.rx_adv_conf.rss_conf.rss_hf =
				(RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP) & info.flow_type_rss_offloads;
			/*
			 * The symmetric Toeplitz key (6d5a repeated, src/dataplane/steer.rs): both
			 * directions of a connection hash alike, and dpwarp computes the same hash
			 * to pick which worker owns a connection, so the NIC delivers each
			 * connection's frames to the queue of the worker holding its socket.
			 */
			if (info.hash_key_size > 0 && info.hash_key_size <= sizeof(rss_key)) {
				for (unsigned i = 0; i < info.hash_key_size; i++)
					rss_key[i] = (i % 2) ? 0x5a : 0x6d;
				conf.rx_adv_conf.rss_conf.rss_key = rss_key;
				conf.rx_adv_conf.rss_conf.rss_key_len = info.hash_key_size;
			}
		}
	}
	/* rte_eth_dev_configure checks the MTU against the driver's max_rx_pktlen. */
	conf.rxmode.mtu = mtu;
	rc = rte_eth_dev_configure(port, nq, nq, &conf);
	if (rc != 0)
		return rc;
	if (mtu != 0 && mtu != RTE_ETHER_MTU) {
		rc = rte_eth_dev_set_mtu(port, mtu);
		/* -ENOTSUP: the driver has no MTU to set (net_ring passes any mbuf). */
		if (rc != 0 && rc != -ENOTSUP)
			return rc;
	}
	int socket = rte_eth_dev_socket_id(port);
	if (socket < 0)
		socket = 0;
	for (q = 0; q < nq; q++) {
		rc = rte_eth_rx_queue_setup(port, q, nb_rxd, socket, NULL, pool);
		if (rc != 0)
			return rc;
		rc = rte_eth_tx_queue_setup(port, q, nb_txd, socket, NULL);
		if (rc != 0)
			return rc;
	}
	return 0;
}

int dpw_port_start(uint16_t port) { return rte_eth_dev_start(port); }

/*
 * Fill the port's RSS redirection table round robin over its first nq queues (entry i ->
 * queue i % nq), the table dpwarp's owner function assumes (src/dataplane/steer.rs). Most
 * PMDs fill it so by default; this makes it so. Returns 0, or the PMD's error (-ENOTSUP
 * for ports without a table, which then keep whatever spreading they do).
 */
int dpw_port_reta_round_robin(uint16_t port, uint16_t nq)
{
	struct rte_eth_dev_info info;
	struct rte_eth_rss_reta_entry64 reta[2048 / RTE_ETH_RETA_GROUP_SIZE];
	int rc = rte_eth_dev_info_get(port, &info);
	if (rc != 0)
		return rc;
	if (info.reta_size == 0 || nq == 0)
		return -ENOTSUP;
	if (info.reta_size > 2048)
		return -E2BIG;
	memset(reta, 0, sizeof(reta));
	for (unsigned i = 0; i < info.reta_size; i++) {
		reta[i / RTE_ETH_RETA_GROUP_SIZE].mask |= 1ULL << (i % RTE_ETH_RETA_GROUP_SIZE);
		reta[i / RTE_ETH_RETA_GROUP_SIZE].reta[i % RTE_ETH_RETA_GROUP_SIZE] = i % nq;
	}
	return rte_eth_dev_rss_reta_update(port, reta, info.reta_size);
}

/*
 * Stop and close run on the EAL interrupt thread, one after another with the PMDs' own
 * control-channel handlers. DPDK 22.11's net_memif tears a connection down in
 * memif_disconnect(), from rte_eth_dev_stop() on the caller's thread and from the handler of
 * the peer's DISCONNECT message on the interrupt thread, with only the control channel under
 * a lock: when the peer disconnected while this process stopped its port (both ends of a
 * dpperf run finishing together), both closed the same queue fds and freed the same regions
 * ("EAL: Error: Invalid memory", then a segfault in rte_eth_dev_stop; tests/
 * dpdk_memif_stop_race.rs). An alarm callback runs on that thread, so the two cannot overlap.
 */
struct dpw_port_job {
	uint16_t port;
	int close;
	int rc;
	int done;
};

static int dpw_port_job_call(const struct dpw_port_job *j)
{
	return j->close ? rte_eth_dev_close(j->port) : rte_eth_dev_stop(j->port);
}

static void dpw_port_job_run(void *arg)
{
	struct dpw_port_job *j = arg;

	j->rc = dpw_port_job_call(j);
	__atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
}

static int dpw_port_on_intr_thread(uint16_t port, int close)
{
	struct dpw_port_job j = { .port = port, .close = close, .rc = 0, .done = 0 };
	const struct timespec nap = { .tv_sec = 0, .tv_nsec = 100 * 1000 };
	long waited_us = 0;

	if (rte_thread_is_intr() || rte_eal_alarm_set(1, dpw_port_job_run, &j) != 0)
		return dpw_port_job_call(&j);
	while (!__atomic_load_n(&j.done, __ATOMIC_ACQUIRE)) {
		if (waited_us >= 10 * 1000 * 1000) {
			/* A cancel from another thread waits for a callback already running. */
			if (rte_eal_alarm_cancel(dpw_port_job_run, &j) > 0) {
				RTE_LOG(WARNING, EAL, "dpwarp: port %u: the interrupt thread did not "
					"run the %s within 10 s; doing it here\n", port,
					close ? "close" : "stop");
				return dpw_port_job_call(&j);
			}
			waited_us = 0;
			continue;
		}
		nanosleep(&nap, NULL);
		waited_us += 100;
	}
	return j.rc;
}

int dpw_port_stop(uint16_t port) { return dpw_port_on_intr_thread(port, 0); }

int dpw_port_close(uint16_t port) { return dpw_port_on_intr_thread(port, 1); }

int dpw_port_promisc(uint16_t port) { return rte_eth_promiscuous_enable(port); }

int dpw_port_mtu(uint16_t port, uint16_t *mtu) { return rte_eth_dev_get_mtu(port, mtu); }

int dpw_port_stats(uint16_t port, struct dpw_port_stats *out)
{
	struct rte_eth_stats s;
	int rc = rte_eth_stats_get(port, &s);
	if (rc != 0)
		return rc;
	out->ipackets = s.ipackets;
	out->opackets = s.opackets;
	out->ibytes = s.ibytes;
	out->obytes = s.obytes;
	out->imissed = s.imissed;
	out->ierrors = s.ierrors;
	out->oerrors = s.oerrors;
	out->rx_nombuf = s.rx_nombuf;
	return 0;
}

int dpw_port_link(uint16_t port, uint32_t *speed_mbps, int *up)
{
	struct rte_eth_link l;
	int rc = rte_eth_link_get_nowait(port, &l);
	if (rc != 0)
		return rc;
	*speed_mbps = l.link_speed;
	*up = l.link_status;
	return 0;
}

int dpw_ring_pair(const char *name, uint16_t nq, unsigned ring_size, uint16_t *port_a,
		  uint16_t *port_b)
{
	struct rte_ring *ab[RTE_MAX_QUEUES_PER_PORT], *ba[RTE_MAX_QUEUES_PER_PORT];
	char rn[RTE_RING_NAMESIZE];
	char pn[64];
	uint16_t q;
	int a, b;
	if (nq == 0 || nq > 64)
		return -EINVAL;
	for (q = 0; q < nq; q++) {
		snprintf(rn, sizeof(rn), "%s_ab%u", name, q);
		ab[q] = rte_ring_create(rn, ring_size, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
		snprintf(rn, sizeof(rn), "%s_ba%u", name, q);
		ba[q] = rte_ring_create(rn, ring_size, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
		if (ab[q] == NULL || ba[q] == NULL)
			return -rte_errno;
	}
	/* Port A transmits into ab and receives from ba; port B the other way round. */
	snprintf(pn, sizeof(pn), "%s_a", name);
	a = rte_eth_from_rings(pn, ba, nq, ab, nq, SOCKET_ID_ANY);
	if (a < 0)
		return -rte_errno;
	snprintf(pn, sizeof(pn), "%s_b", name);
	b = rte_eth_from_rings(pn, ab, nq, ba, nq, SOCKET_ID_ANY);
	if (b < 0)
		return -rte_errno;
	*port_a = (uint16_t)a;
	*port_b = (uint16_t)b;
	return 0;
}

/* --- Checksum offload (RTE_ETH_{RX,TX}_OFFLOAD_{IPV4,TCP}_CKSUM) ------------------------------ */

static int cksum_class(uint64_t f, uint64_t mask, uint64_t bad, uint64_t good)
{
	uint64_t v = f & mask;
	if (v == mask)
		return DPW_CKSUM_NONE;
	if (v == bad)
		return DPW_CKSUM_BAD;
	if (v == good)
		return DPW_CKSUM_GOOD;
	return DPW_CKSUM_UNKNOWN;
}

void dpw_rx_cksum(const struct rte_mbuf *m, int *ip, int *l4)
{
	*ip = cksum_class(m->ol_flags, RTE_MBUF_F_RX_IP_CKSUM_MASK, RTE_MBUF_F_RX_IP_CKSUM_BAD,
			  RTE_MBUF_F_RX_IP_CKSUM_GOOD);
	*l4 = cksum_class(m->ol_flags, RTE_MBUF_F_RX_L4_CKSUM_MASK, RTE_MBUF_F_RX_L4_CKSUM_BAD,
			  RTE_MBUF_F_RX_L4_CKSUM_GOOD);
}

void dpw_ipv4_tcp_phdr(uint8_t *ip, uint16_t l3_len, uint64_t ol_flags)
{
	struct rte_tcp_hdr *tcp = (struct rte_tcp_hdr *)(ip + l3_len);
	/* Stored as computed: rte_raw_cksum sums the header's network-order words natively. */
	tcp->cksum = rte_ipv4_phdr_cksum((const struct rte_ipv4_hdr *)ip, ol_flags);
}

void dpw_tx_cksum_offload(struct rte_mbuf *m, uint16_t l2_len, uint16_t l3_len, int ip_cksum,
			  int tcp_cksum)
{
	uint8_t *ip = rte_pktmbuf_mtod_offset(m, uint8_t *, l2_len);
	m->l2_len = l2_len;
	m->l3_len = l3_len;
	m->ol_flags |= RTE_MBUF_F_TX_IPV4;
	if (ip_cksum) {
		((struct rte_ipv4_hdr *)ip)->hdr_checksum = 0;
		m->ol_flags |= RTE_MBUF_F_TX_IP_CKSUM;
	}
	if (tcp_cksum) {
		m->ol_flags |= RTE_MBUF_F_TX_TCP_CKSUM;
		dpw_ipv4_tcp_phdr(ip, l3_len, m->ol_flags);
	}
}

int dpw_pktmbuf_linearize(struct rte_mbuf *m) { return rte_pktmbuf_linearize(m); }

int dpw_pktmbuf_chain(struct rte_mbuf *head, struct rte_mbuf *tail)
{
	return rte_pktmbuf_chain(head, tail) == 0 ? 0 : -1;
}

/*
 * TCP segmentation offload as rte_mbuf_core.h prescribes for IPv4: RTE_MBUF_F_TX_TCP_SEG (which
 * implies the TCP checksum), RTE_MBUF_F_TX_IPV4 and RTE_MBUF_F_TX_IP_CKSUM (every segment gets an
 * IPv4 header of its own length, hence its own checksum), l2/l3/l4_len and tso_segsz; the TCP
 * checksum field holds the pseudo-header checksum without the length (rte_ipv4_phdr_cksum with
 * the TCP_SEG flag), which a PMD whose device wants it with the length (virtio, as Linux)
 * adjusts in its tx_prepare. The IPv4 total length stays the whole packet's, as librte_gso's
 * segmenter and testpmd's csum engine leave it: the device writes each segment's.
 */
void dpw_tx_tso(struct rte_mbuf *m, uint16_t l2_len, uint16_t l3_len, uint16_t l4_len,
		uint16_t tso_segsz)
{
	uint8_t *ip = rte_pktmbuf_mtod_offset(m, uint8_t *, l2_len);
	m->l2_len = l2_len;
	m->l3_len = l3_len;
	m->l4_len = l4_len;
	m->tso_segsz = tso_segsz;
	m->ol_flags |= RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
	((struct rte_ipv4_hdr *)ip)->hdr_checksum = 0;
	dpw_ipv4_tcp_phdr(ip, l3_len, m->ol_flags);
}

uint16_t dpw_tx_prepare(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_tx_prepare(port, queue, pkts, n);
}

unsigned dpw_shinfo_size(void) { return sizeof(struct rte_mbuf_ext_shared_info); }

unsigned dpw_shinfo_align(void) { return _Alignof(struct rte_mbuf_ext_shared_info); }

/* Make `ext` (a fresh mbuf from a pool) point at `len` octets at `addr` instead of its own
 * buffer (rte_pktmbuf_attach_extbuf; no IOVA: only for PMDs that copy or pass mbufs in
 * software), with `shinfo` initialised here (refcnt 1, free_cb(addr, opaque) when the last
 * reference goes), and chain it behind `head`. On error (-1: too many segments) nothing is
 * chained and `ext` still owns the attachment: freeing it runs the callback. */
int dpw_chain_extbuf(struct rte_mbuf *head, struct rte_mbuf *ext, void *addr, uint16_t len,
		     void *shinfo, dpw_extbuf_free_cb free_cb, void *opaque)
{
	struct rte_mbuf_ext_shared_info *si = shinfo;
	si->free_cb = free_cb;
	si->fcb_opaque = opaque;
	rte_mbuf_ext_refcnt_set(si, 1);
	rte_pktmbuf_attach_extbuf(ext, addr, RTE_BAD_IOVA, len, si);
	ext->data_len = len;
	ext->pkt_len = len;
	return rte_pktmbuf_chain(head, ext) == 0 ? 0 : -1;
}

/* A copy of every segment of `m` into new mbufs from `mp` (one when it fits). */
struct rte_mbuf *dpw_pktmbuf_copy(const struct rte_mbuf *m, struct rte_mempool *mp)
{
	return rte_pktmbuf_copy(m, mp, 0, UINT32_MAX);
}
