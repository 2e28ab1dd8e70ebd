/* The ipc fabric's shared-memory layout: what two processes on one host
 * map, and the one way a writer tells a reader that something arrived.
 * Everything here is read by a process that must not trust the other, so
 * every reader copies what it reads before checking it (ipc_poll.c). The
 * conformance suite's hostile peer writes these structures directly.
 *
 * Per process and context, the wake page (one memfd, sealed against
 * resizing, mapped writable by every peer of the context):
 *   armed    set by arm() before the owner sleeps on its eventfd
 *   summary  bit i: bits[i] may have something
 *   bits     bit k: connection k of the owner may have something
 *
 * Per connection and direction, the producer's tx memfd (sealed too):
 *   line 0   geometry {magic, entries, data bytes} (read once at set-up),
 *            and where the producer has this header mapped (self)
 *   line 1   watch: the consumer polls this ring; direct: the consumer can
 *            read the producer's memory (both written by the consumer)
 *   line 2   cons: entries consumed, written by the consumer (release)
 *            when it consumed an entry marked IPC_F_NOTIFY or
 *            IPC_F_PUBLISH, and before it stops watching the ring: the
 *            producer marks what it needs back (a signaled operation, a
 *            read, an internal one, data-area bytes, or any entry once
 *            half its ring is outstanding), so a ping-pong moves one line
 *            per message, the entry, not two
 *   4096     entries[n], 64 bytes each; an entry is published by its seq
 *            (position + 1, stored last, release): no shared producer index
 *   ...      data area: payloads longer than an entry's inline bytes
 *
 * Large payloads (IPC_DIRECT_MIN and up) of a producer whose consumer set
 * direct stay where they are: the entry carries their address in the
 * producer's memory (IPC_F_DIRECT) and the consumer copies them from
 * there into its window with process_vm_readv, after its own checks: one
 * copy, by the kernel, instead of two (into the data area and out of it).
 * The consumer offers it only to a peer of its own user id whose memory it
 * could read at set-up (the probe of `self`), and reads only from the pid
 * the kernel names for the connection's socket (SO_PEERCRED).
 *
 * A window in memory of wimm_mr_alloc (a sealed memfd) is offered to a
 * peer of the owner's user id with the handshake: its memfd as a fourth
 * fd, its offset in it in the ipc address (IPC_ADDR_WIN_LEN). That peer
 * maps the window and stores its writes' bytes into it itself, then
 * publishes an entry with IPC_F_MAPPED and no payload; the owner checks
 * the entry (its key, range and access) as any other and copies nothing.
 * The gate line of the producer's header keeps "nothing lands once the
 * owner closed": the producer sets busy, fences, stores only if closed is
 * still 0, clears busy; the owner sets closed, fences, and waits for busy
 * to clear before it calls the connection closed. Where the owner has
 * announced (barrier) that its close runs membarrier(GLOBAL_EXPEDITED), a
 * producer registered for it orders busy before closed with a compiler
 * barrier instead of its fence (ipc_gate.c).
 *
 * A producer tells the consumer with ipc_notify() only when the consumer
 * does not watch the ring (it polls a recently busy connection's next
 * entry directly), so a stream costs one cache line per message.
 */
#ifndef WIMM_IPC_WIRE_H
#define WIMM_IPC_WIRE_H

#include <stdint.h>
#include <unistd.h>

#define IPC_MAGIC 0x5749504334ull /* "WIPC4" */
#define IPC_LINE 64
#define IPC_HDR_BYTES 4096
#define IPC_INLINE 24
#define IPC_MAX_CONNS 4096	   /* 64 summary bits x 64 bits */
#define IPC_ADDR_LEN 8		   /* conn_addr: magic (4) + our connection index (4) */
#define IPC_ADDR_MAGIC 0x49504331u /* "IPC1" */
#define IPC_NFDS 3		   /* tx memfd, wake page memfd, eventfd */
#define IPC_NFDS_MAX 4		   /* + the memfd of a window offered for mapping */
#define IPC_ADDR_WIN_LEN 16	   /* conn_addr + the window's offset in its memfd (8) */

enum ipc_op {
	IPC_OP_WRITE = 1,
	IPC_OP_WRITE_IMM,
	IPC_OP_SEND_IMM,
	IPC_OP_READ,
	IPC_OP_FETCH_ADD, /* inline: operand at 0, compare at 8, the old value at 16 */
	IPC_OP_CMP_SWAP,
};
#define IPC_ATOMIC_OPERAND 0
#define IPC_ATOMIC_COMPARE 8
#define IPC_ATOMIC_RESULT 16
/* The consumer sets the producer's bit after consuming an entry with it. */
#define IPC_F_NOTIFY 1u
/* The payload is in the producer's memory at u.doff (see above). */
#define IPC_F_DIRECT 2u
/* The bytes are in the consumer's window already (a mapped window). */
#define IPC_F_MAPPED 4u
/* The consumer publishes cons once it has consumed this entry (without
 * waking the producer): the producer wants its slots or its data area
 * back. Without it, and without IPC_F_NOTIFY, cons waits: a store the
 * producer would read as a cache miss on every message (see cons). */
#define IPC_F_PUBLISH 8u
/* Below this a payload is copied through the data area: for small ones
 * two memcpy cost less than the system call (measured: docs/performance.md). */
#define IPC_DIRECT_MIN (16u << 10)

struct ipc_entry {
	uint32_t seq; /* (uint32_t)(position + 1) once published */
	uint16_t op;
	uint16_t flags;
	uint32_t len;
	uint32_t imm;
	uint64_t raddr;
	uint64_t rkey;
	int32_t status; /* written by the consumer: 0 or a WIMM_E_* */
	uint32_t reserved;
	union {
		uint64_t doff; /* len > IPC_INLINE: offset in the data area;
				* IPC_F_DIRECT: address in the producer */
		uint8_t inl[IPC_INLINE];
	} u;
};
_Static_assert(sizeof(struct ipc_entry) == 64, "one entry, one cache line");

struct ipc_ring_hdr {
	_Alignas(IPC_LINE) uint64_t magic;
	uint64_t entries; /* a power of two */
	uint64_t data_bytes;
	uint64_t self; /* the producer's address of this header */
	_Alignas(IPC_LINE) uint32_t watch;
	uint32_t direct;
	_Alignas(IPC_LINE) uint64_t cons;
	/* The gate of a mapped window (above): busy written by the producer,
	 * closed by the consumer; barrier, set by the consumer before it ever
	 * closes: its close runs membarrier(GLOBAL_EXPEDITED), so a producer
	 * registered for it may order busy before closed with a compiler
	 * barrier instead of a fence (ipc_gate.c). */
	_Alignas(IPC_LINE) uint32_t busy;
	uint32_t closed;
	uint32_t barrier;
};
_Static_assert(sizeof(struct ipc_ring_hdr) <= IPC_HDR_BYTES, "header fits its page");

struct ipc_page {
	_Alignas(IPC_LINE) uint32_t armed;
	_Alignas(IPC_LINE) uint64_t summary;
	_Alignas(IPC_LINE) uint64_t bits[IPC_MAX_CONNS / 64];
};
#define IPC_PAGE_BYTES 4096
_Static_assert(sizeof(struct ipc_page) <= IPC_PAGE_BYTES, "wake page fits a page");

static inline struct ipc_entry *ipc_entries(struct ipc_ring_hdr *h)
{
	return (struct ipc_entry *)((char *)h + IPC_HDR_BYTES);
}

static inline size_t ipc_ring_bytes(uint64_t entries, uint64_t data_bytes)
{
	return IPC_HDR_BYTES + (size_t)entries * sizeof(struct ipc_entry) + (size_t)data_bytes;
}

/* The consumer of a ring watches it (watch = 1) while it polls it, or
 * needs telling: then a producer sets the bits of its wake page. */
static inline void ipc_wake_bits(struct ipc_page *page, uint32_t idx)
{
	uint64_t bit = 1ull << (idx % 64), sbit = 1ull << ((idx / 64) % 64);
	uint64_t *w = &page->bits[(idx / 64) % (IPC_MAX_CONNS / 64)];

	if (!(__atomic_load_n(w, __ATOMIC_RELAXED) & bit))
		__atomic_fetch_or(w, bit, __ATOMIC_SEQ_CST);
	if (!(__atomic_load_n(&page->summary, __ATOMIC_RELAXED) & sbit))
		__atomic_fetch_or(&page->summary, sbit, __ATOMIC_SEQ_CST);
}

/* Tell the owner of `page` that its connection `idx` has something: the
 * entry (or the consumption) is published before this is called; `watch`
 * is the owner's watch flag of that connection. Full fence, then the
 * watch flag and the bits, then the armed flag: against the owner's store
 * of watch = 0 (or armed = 1), fence, look at the ring (or the summary),
 * one of the two sides sees the other (no lost wake-up). The eventfd
 * write is the only system call, and only towards a sleeper. */
static inline void ipc_notify(struct ipc_page *page, const uint32_t *watch, int efd, uint32_t idx)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!__atomic_load_n(watch, __ATOMIC_RELAXED)) {
		ipc_wake_bits(page, idx);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
	}
	if (__atomic_load_n(&page->armed, __ATOMIC_RELAXED)) {
		uint64_t one = 1;
		/* Nonblocking (set at set-up): a full counter already wakes. */
		ssize_t r = write(efd, &one, sizeof(one));
		(void)r;
	}
}

#endif
