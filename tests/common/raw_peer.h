/* A raw peer: not wimm, but the provider a wimm listener uses, driven by
 * hand. It does wimm's handshake itself (or sends whatever bytes a test
 * gives it) and then writes wherever it likes, with any key, bypassing
 * every check the library makes on the sending side: what the server still
 * refuses is what the receiver enforces. One struct for every kind:
 *   RAW_PEER_OFI_MSG   a libfabric MSG endpoint (tcp), the handshake in
 *                      fi_connect's CM data;
 *   RAW_PEER_OFI_RDM   a libfabric RDM endpoint (shm) behind wimm's side
 *                      channel (a TCP socket carrying one length-prefixed
 *                      handshake each way);
 *   RAW_PEER_VERBS_CM  librdmacm + verbs, the handshake in the REQ's
 *                      private data.
 * Used by the conformance suite (hostile peers, malformed handshakes) and
 * by the services' tests (tests/common/raw_tcp_peer.h is its MSG face).
 * Built with RAW_PEER_HAVE_OFI and/or RAW_PEER_HAVE_VERBS (tests/common's
 * CMake sets them from what the build found). */
#ifndef WIMM_RAW_PEER_H
#define WIMM_RAW_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "core/handshake.h"

#ifdef RAW_PEER_HAVE_OFI
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#endif
#ifdef RAW_PEER_HAVE_VERBS
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#endif

enum raw_peer_kind {
	RAW_PEER_NONE = 0,
	RAW_PEER_OFI_MSG = 1,
	RAW_PEER_VERBS_CM = 2,
	RAW_PEER_OFI_RDM = 3,
};

/* Receive slots the server's sends land in (raw_peer_attr.rx_slots of
 * them, at most RAW_RX_SLOTS), posted at open and again as they are read. */
#define RAW_RX_SLOTS 16
#define RAW_RX_SIZE 512
/* The doorbells the server rang on us that a peer keeps (the last ones). */
#define RAW_IMM_KEPT 16
/* The most CM data (or private data) a raw peer sends or keeps of a reply. */
#define RAW_CM_MAX 1024

/* What one connection attempt came to (raw_peer_connect_bytes). */
enum raw_outcome {
	RAW_REFUSED,   /* the CM's reject */
	RAW_CONNECTED, /* the request was accepted */
	RAW_TIMEOUT,   /* no answer in time */
	RAW_ERROR,     /* anything else: text says what */
};

/* Called between two looks at the CM or the side channel, so that a wimm
 * server in this thread can run. */
typedef void (*raw_pump_fn)(void *arg);

struct raw_peer_attr {
	enum raw_peer_kind kind;
	const char *prov; /* ofi: the provider ("tcp", "shm") */
	/* ofi: where fi_getinfo looks at open (MSG: the server, whose address
	 * raw_peer_connect* then use when given no host); NULL, NULL: any. */
	const char *node, *service;
	void *src; /* what we write from (registered for local reads) */
	size_t src_len;
	void *win; /* the window we offer (registered for remote writes), or NULL */
	size_t win_len;
	unsigned rx_slots; /* receives posted for the server's sends (0..RAW_RX_SLOTS) */
};

struct raw_peer {
	enum raw_peer_kind kind;
	struct wimm_handshake srv; /* the server's handshake */
	int posted, done, failed;  /* our writes */
	int received;		   /* the server's sends */
	int last_error;		   /* ofi: the provider's error of the last failed completion */
	/* ofi: the doorbells the server rang on us (the low 32 bits of their
	 * remote CQ data), the last RAW_IMM_KEPT of them by count. */
	uint32_t imm[RAW_IMM_KEPT];
	int doorbells, imm_next; /* rung so far; the next one to look at */
	int shutdown;		 /* MSG: the server closed the connection (FI_SHUTDOWN) */
	char text[200];		 /* what went wrong, for failure messages */
	uint64_t ctl[16];	 /* credits and heartbeats come here (the credit word) */
	uint8_t rx[RAW_RX_SLOTS][RAW_RX_SIZE];
	unsigned rx_slots;
	void *src, *win; /* what we write; our window (NULL: none) */
	size_t src_len, win_len;
	uint8_t reply[RAW_CM_MAX]; /* the last CM reply's data (accept or reject) */
	size_t reply_len;
#ifdef RAW_PEER_HAVE_OFI
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_eq *eq; /* MSG */
	struct fid_av *av; /* RDM */
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fid_mr *ctl_mr, *src_mr, *win_mr, *rx_mr;
	/* MSG: key 0, as every wimm ofi context has: a wimm peer aims its pure
	 * doorbells (no data) there, and tcp drops a connection whose write
	 * names a key it does not know. */
	struct fid_mr *null_mr;
	uint64_t null_word;
	fi_addr_t srv_addr; /* RDM */
#endif
	int sock; /* RDM: the side channel (0: none) */
#ifdef RAW_PEER_HAVE_VERBS
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *vcq;
	struct ibv_mr *ctl_vmr, *src_vmr, *win_vmr;
#endif
};

/* The peer of a->kind, its memory registered (ofi: its endpoint open; verbs:
 * nothing yet, the device is known once an address resolves). 0 or a
 * negative errno; r->text says what failed. */
int raw_peer_open(struct raw_peer *r, const struct raw_peer_attr *a);
/* Connect to host:port (NULL host: the node given at open) with our
 * handshake: hs's rx_depth, recv_size, flags and private data, the rest
 * (credit word, window, RDM name) filled in here. pump(arg) runs between
 * looks at the CM. 0, or -ECONNREFUSED (refused), -ETIMEDOUT, -EINVAL (the
 * server's reply does not decode) or another negative errno; r->srv is the
 * server's handshake, r->text says what failed. */
int raw_peer_connect(struct raw_peer *r, const char *host, const char *port,
		     const struct wimm_handshake *hs, raw_pump_fn pump, void *arg, int timeout_ms);
/* One connection request carrying b[0..n) as its CM data, whatever it is
 * (MSG and verbs only): how it ended, the reply's data in r->reply. Without
 * a pump the wait blocks in slices (a server in another thread). */
enum raw_outcome raw_peer_connect_bytes(struct raw_peer *r, const char *host, const char *port,
					const uint8_t *b, size_t n, raw_pump_fn pump, void *arg,
					int timeout_ms);
/* The most CM data a request of this peer carries (at most RAW_CM_MAX). */
size_t raw_peer_cm_max(struct raw_peer *r);
/* One write of src[0..len) to addr with key; with a doorbell (immediate
 * data = len << 32 | imm, wimm's wire form) when doorbell. 0 or a negative
 * errno (-EINVAL: len is more than src). */
int raw_peer_write(struct raw_peer *r, uint64_t addr, uint64_t key, size_t len, int doorbell,
		   uint32_t imm);
/* Read our completions: done and failed count our writes (last_error the
 * provider's error of a failure), received the server's sends (each slot
 * posted again), doorbells and imm the server's doorbells; MSG: shutdown
 * once the server closed. */
void raw_peer_progress(struct raw_peer *r);
/* End the connection (the server sees it go); raw_peer_connect* may be
 * called again (the memory stays registered where the provider allows). */
void raw_peer_disconnect(struct raw_peer *r);
/* Everything, the peer zeroed (src and win stay the caller's). */
void raw_peer_close(struct raw_peer *r);
/* The provider's kind for a wimm fabric name ("ofi:tcp", "verbs:rxe0"), or
 * RAW_PEER_NONE with *why saying why there is none in this build. */
enum raw_peer_kind raw_peer_kind_of(const char *fabric, const char **why);

#endif
