/* Private declarations of the libfabric backend. The objects are split by
 * file: ofi_ctx.c (fabric, domain, regions, describe), ofi_cm.c (listen,
 * connect, accept over the provider's CM or an out-of-band TCP socket),
 * ofi_conn.c (endpoints, receive slots, posting), ofi_poll.c (completions,
 * liveness, wait fd). */
#ifndef WIMM_OFI_INTERNAL_H
#define WIMM_OFI_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "backend.h"
#include "core/handshake.h"
#include "core/recv_slots.h"
#include "core/send_ring.h"
#include "core/sidechan.h"
#include "ofi/ofi_ring_wire.h"

#define OFI_API_VERSION FI_VERSION(1, 9)
#define OFI_STASH 32 /* MSG: completions read ahead by post() / arm() */
#define OFI_DEFAULT_TIMEOUT_MS 10000
/* Ordering credits and doorbells rely on (see ofi_hints). */
#define OFI_ORDER (FI_ORDER_WAW | FI_ORDER_SAW)
#define OFI_SCAN_EVERY 8   /* MSG: readiness scan at least every 8th poll */
#define OFI_LINGER 4	   /* MSG: empty reads before a busy conn goes cold */
#define OFI_LANE_PEERS 256 /* shm: SMR_MAX_PEERS, what one endpoint maps */
/* shm: distinct peers a lane ever takes (its AV only grows, ofi_lane.c);
 * fewer than OFI_LANE_PEERS bounds the departed peers' regions it maps. */
#define OFI_LANE_NAMES 64
_Static_assert(OFI_LANE_NAMES <= OFI_LANE_PEERS, "a lane's AV holds at most SMR_MAX_PEERS");
#define OFI_LANE_CQ_MIN 4096
#define OFI_LANE_CQ_MAX 65536
#define OFI_NAME_MAX 192 /* WIMM_HS_MAX_ADDR: an RDM name fits the handshake */

/* Tags in the low bits of x->epfd's epoll data: what became readable. */
enum ofi_tag { OFI_TAG_TIMER = 0, OFI_TAG_CQ = 1, OFI_TAG_SOCK = 2, OFI_TAG_EQ = 3 };
#define OFI_MSG_CM_DATA 256 /* CM data the tcp provider carries */

struct ofi_conn;

/* RDM (shm): one endpoint, AV and CQ shared by the connections of up to
 * OFI_LANE_NAMES peers, so a poll reads one CQ per lane, not one per connection.
 * Completions are attributed to connections by op_context (our own
 * operations, cookies) or by source address (the peer's remote CQ data,
 * FI_SOURCE), resolved when read and kept in `ring` until returned. */
struct ofi_rent {
	uint32_t idx, gen; /* the connection, as in a cookie */
	struct wimm_cqe e;
};

struct ofi_lane_name {
	uint8_t name[OFI_NAME_MAX];
	size_t len;
};

struct ofi_lane {
	struct ofi_lane *next;
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
	uint8_t name[OFI_NAME_MAX];
	size_t name_len;
	struct ofi_conn *peer[OFI_LANE_NAMES]; /* by fi_addr */
	struct ofi_lane_name *names;	       /* by fi_addr: whose entry it is */
	uint8_t draining[OFI_LANE_NAMES];      /* a cut connection's, CQ not yet read */
	uint32_t naddr, ndraining;
	uint32_t unnamed;	    /* members whose peer is not in the AV yet */
	size_t rx_cap, rx_reserved; /* posted receives: the endpoint's pool */
	uint32_t members;	    /* connections placed here */
	int outgoing;		    /* one of them is an active side's */
	int retired;		    /* takes no new connections */
	size_t cq_size, cq_reserved;
	struct ofi_rent *ring;
	uint32_t ring_cap, ring_head, ring_len;
};

struct ofi_ctx {
	struct wimm_ctx *core;
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_mr *null_mr; /* key 0: target of window-less doorbells */
	uint64_t null_word;
	int msg; /* FI_EP_MSG (provider CM) vs FI_EP_RDM (TCP OOB) */
	/* From info, read on every post and completion: kept here, one load
	 * away instead of three. */
	int data_wide;	    /* CQ data of 8 bytes: the length rides in it */
	size_t inject_size; /* tx_attr->inject_size */
	int prov_key;	    /* provider picks MR keys */
	int cq_wait_fd;	    /* CQs support FI_WAIT_FD */
	uint32_t cq_budget;
	char fabric_name[64];
	int epfd;	   /* the wait fd, and the readiness set poll() scans */
	int timerfd;	   /* wakes sleepers where CQs have no wait fd */
	struct fid_eq *eq; /* MSG: CM events of every connection */
	int eq_fd;
	struct ofi_conn *conns;
	uint32_t nconns;
	/* Live connections by index; cookies name (index, generation). */
	struct ofi_conn **tab;
	uint32_t tab_cap, gen;
	uint32_t *free_idx, nfree;
	/* MSG: circular list of connections whose CQ may hold something. */
	struct ofi_conn *hot;
	uint32_t nhot;
	struct ofi_lane *lanes, *lane_rr;
	uint32_t nkick; /* RDM: connections with kicking set */
	uint32_t polls;
	struct wimm_ctl_throttle ctl; /* RDM: the liveness sockets */
	struct fid **fids;	      /* scratch for fi_trywait */
	size_t fids_cap;
	/* tcp: doorbells between wimm peers go through a ring, not remote CQ
	 * data (ofi_ring_wire.h); WIMM_OFI_RING=0 turns it off. */
	int ring;
	int atomics;	      /* 64-bit fetch-add and compare-swap usable */
	char atomic_why[160]; /* ... else why not (ofi_atomic_probe) */
};

struct ofi_conn {
	struct ofi_ctx *ctx;
	struct ofi_conn *next, *prev;
	struct wimm_conn *core;
	uint32_t idx, gen;
	struct ofi_conn *hot_next, *hot_prev;
	int in_hot;
	unsigned linger;
	struct fi_info *info;  /* MSG: from the connreq or the resolved peer */
	struct fid_ep *ep;     /* MSG: its own; RDM: the lane's */
	struct fid_cq *cq;     /* MSG only */
	struct ofi_lane *lane; /* RDM only */
	int active;	       /* the connecting side */
	fi_addr_t peer;
	int sock; /* RDM: handshake + liveness channel, else -1 */
	int cq_fd;
	int in_epoll_sock;
	int enabled;
	int connected;
	int cm_err;	   /* MSG: set-up failed (EQ error), -fi_errno */
	uint8_t *cm_reply; /* MSG connect: where FI_CONNECTED's data goes */
	size_t *cm_reply_len;
	int cm_refused;			 /* ... by a wimm listener, its reason in cm_reply */
	int accepting;			 /* MSG: fi_accept done, FI_CONNECTED not yet seen */
	int up_pending;			 /* CONN_UP found, not yet returned */
	struct wimm_down down;		 /* backend.h's state machine */
	uint8_t peer_name[OFI_NAME_MAX]; /* RDM: the peer's endpoint */
	size_t peer_name_len;
	int kicking; /* RDM passive: our name not yet taken (ofi_kick_pending) */
	int64_t kick_deadline;
	uint8_t *frame; /* RDM accept: our handshake, sent by conn_ready */
	size_t frame_len;

	uint32_t tx_max;	  /* operations outstanding at most (CQ sizing) */
	struct wimm_send_ring sq; /* slot index = cookie position */

	uint32_t rx_depth, recv_size;
	uint8_t *rx_buf;
	struct fid_mr *rx_mr;
	int slots_posted;
	struct wimm_recv_slots rx; /* send-with-imm slots: a write-with-imm takes none */

	struct wimm_cqe stash[OFI_STASH];
	unsigned stash_head, stash_len;

	uint64_t *atom; /* atomic operands, two per send slot (ofi_atomic.c) */
	struct fid_mr *atom_mr;

	/* ofi_ring.c (tcp). Ours, which the peer writes: */
	struct ofi_ring_entry *ring; /* NULL: we offer none */
	struct fid_mr *ring_mr;
	uint32_t ring_entries;
	uint32_t ring_slot;    /* the next entry to read: its slot ... */
	uint8_t ring_seal;     /* ... and the seal it must carry */
	uint64_t ring_max_len; /* our window's length: no entry claims more */
	uint32_t cq_bells;     /* doorbells delivered from the CQ, mod 2^32 */
	int ring_broken;       /* the peer broke its rules: read no more */
	/* The peer's, which we write (ring_out NULL: it offered none): */
	struct ofi_ring_entry *ring_out; /* the entry of each send slot */
	uint64_t peer_ring_addr, peer_ring_key;
	uint32_t peer_ring_entries;
	uint32_t peer_ring_slot; /* where the next entry goes ... */
	uint8_t peer_ring_seal;	 /* ... and its seal */
	uint32_t sends_posted;	 /* doorbells posted through its CQ, mod 2^32 */
};

struct ofi_req {
	struct fi_info *info; /* MSG: the FI_CONNREQ's info */
	struct fid_pep *pep;
	int sock; /* RDM: the accepted TCP socket */
	uint8_t peer_name[OFI_NAME_MAX];
	size_t peer_name_len;
};

struct ofi_lis {
	struct ofi_ctx *ctx;
	struct fid_pep *pep;
	struct fid_eq *eq;
	struct fi_info *info;
	int fd;			 /* MSG: the EQ wait fd; RDM: sc.epfd */
	struct wimm_sidechan sc; /* RDM: the listening socket and connectors */
};

/* op_context of our operations: (generation, index, slot?, position), never
 * a pointer, so a completion of a deleted connection names nothing. */
static inline void *ofi_cookie(const struct ofi_conn *c, int slot, uint32_t pos)
{
	return (void *)(uintptr_t)(((uint64_t)c->gen << 40) | ((uint64_t)c->idx << 20) |
				   ((uint64_t) !!slot << 19) | (pos & 0x7ffffu));
}

static inline int ofi_cookie_is_slot(const void *k)
{
	return (int)(((uintptr_t)k >> 19) & 1);
}

static inline uint32_t ofi_cookie_pos(const void *k)
{
	return (uint32_t)((uintptr_t)k & 0x7ffffu);
}

/* ofi_ctx.c */
int ofi_err(struct ofi_ctx *x, int fi_ret, const char *what);
int ofi_errno_err(struct ofi_ctx *x, int err, const char *what, int code);
struct fi_info *ofi_hints(const char *prov, enum fi_ep_type type);
/* fi_mr_reg with a key of wimm's choosing where the provider wants one. */
int ofi_reg(struct ofi_ctx *x, void *addr, size_t len, uint64_t acc, struct fid_mr **mr);
/* The live connection a cookie (or its index and generation) names. */
struct ofi_conn *ofi_conn_lookup(struct ofi_ctx *x, uint32_t idx, uint32_t gen);
struct ofi_conn *ofi_cookie_conn(struct ofi_ctx *x, const void *k);
int ofi_fids_reserve(struct ofi_ctx *x, size_t n);

/* ofi_cm.c */
int ofi_sockaddr_port(const struct sockaddr *sa);
int ofi_listen(void *bctx, const char *host, const char *port, void **blis, int *port_out);
void ofi_listener_close(void *blis);
int ofi_listener_fd(void *blis);
int ofi_get_request(void *blis, int timeout_ms, void **breq, uint8_t *hs, size_t *hs_len);
void ofi_reject(void *breq, const uint8_t *msg, size_t len);
int ofi_request_peer(void *breq, char *buf, size_t len);
int ofi_listener_pending(void *blis);
void ofi_conn_shutdown(void *bconn);
int ofi_connect(void *bconn, const char *host, const char *port, const uint8_t *hs, size_t hs_len,
		uint8_t *reply, size_t *reply_len, int timeout_ms);
int ofi_accept(void *bconn, const uint8_t *hs, size_t hs_len);
int ofi_conn_ready(void *bconn, const struct wimm_handshake *peer);
/* MSG: one CM event of the shared EQ, to the connection it names. */
void ofi_eq_dispatch(struct ofi_ctx *x, uint32_t event, const struct fi_eq_cm_entry *e, size_t len);
void ofi_eq_drain(struct ofi_ctx *x);

/* ofi_sock.c (RDM) */
int ofi_sock_listen(struct ofi_lis *l, const char *host, const char *port, int *port_out);
int ofi_sock_request(struct ofi_lis *l, int timeout_ms, struct ofi_req *req, uint8_t *hs,
		     size_t *hs_len);
void ofi_req_peer_name(struct ofi_req *req, const uint8_t *hs, size_t len);
int ofi_sock_connect(struct ofi_conn *c, const char *host, const char *port, const uint8_t *hs,
		     size_t hs_len, uint8_t *reply, size_t *reply_len, int64_t deadline);
int ofi_sock_conn_ready(struct ofi_conn *c, const struct wimm_handshake *peer);
void ofi_kick_pending(struct ofi_ctx *x);

/* ofi_lane.c (RDM) */
int ofi_lane_join(struct ofi_conn *c, const struct ofi_req *req);
void ofi_lane_leave(struct ofi_conn *c);
int ofi_lane_insert(struct ofi_conn *c, const uint8_t *name, size_t len);
void ofi_lane_close_all(struct ofi_ctx *x);
/* Reads the lane's CQ into its ring: 1 if the ring holds entries. */
int ofi_lane_fill(struct ofi_lane *l, struct ofi_ctx *x);
/* The lanes' completions into out[0..n), round robin from the last one. */
int ofi_lane_poll(struct ofi_ctx *x, struct wimm_cqe *out, int n);
void ofi_lane_push_down(struct ofi_conn *c);
void ofi_lane_push_up(struct ofi_conn *c);
/* Stop the peer's traffic reaching the connection (shutdown, leave). */
void ofi_lane_cut(struct ofi_conn *c);

/* ofi_conn.c */
int ofi_conn_new(void *bctx, void *breq, const struct wimm_conn_cfg *cfg, void **bconn);
int ofi_conn_addr(void *bconn, uint8_t *buf, size_t *len);
int ofi_conn_open_ep(struct ofi_conn *c, struct fi_info *info);
int ofi_conn_post_slots(struct ofi_conn *c);
void ofi_conn_delete(void *bconn);
int ofi_post(void *bconn, const struct wimm_wr *wr);
int ofi_rx_release(void *bconn, uint32_t n);

/* ofi_atomic.c */
/* After the domain is open: can atomics be used, and if not, why. */
void ofi_atomic_probe(struct ofi_ctx *x);
int ofi_post_atomic(void *bconn, const struct wimm_wr *wr);
/* One try of an atomic in send slot pos (ofi_post's retry loop). */
ssize_t ofi_atomic_post_once(struct ofi_conn *c, const struct wimm_wr *wr, uint32_t pos,
			     uint64_t flags);
void ofi_atomic_free(struct ofi_conn *c);

/* ofi_ring.c (tcp: the doorbell ring, ofi_ring_wire.h) */
/* Our ring, of one slot per receive-window doorbell (none unless x->ring). */
int ofi_ring_open(struct ofi_conn *c, const struct wimm_bmr *window);
void ofi_ring_free(struct ofi_conn *c);
/* The offer for our handshake's transport address (*len 0: none). */
int ofi_ring_offer(const struct ofi_conn *c, uint8_t *buf, size_t *len);
/* Take the peer's offer from its handshake; PROTO when malformed. */
int ofi_ring_take_offer(struct ofi_conn *c, const struct wimm_handshake *peer);
/* A write-with-imm as payload + entry, in send slot pos. */
ssize_t ofi_ring_post_once(struct ofi_conn *c, const struct wimm_wr *wr, uint32_t pos,
			   uint64_t flags);
/* wr was posted (through the ring when `ringed`): count it. */
void ofi_ring_posted(struct ofi_conn *c, const struct wimm_wr *wr, int ringed);
/* 1 when the next entry of our ring is there; *ahead: how many CQ
 * doorbells must be delivered before it (negative: a broken peer). */
int ofi_ring_peek(const struct ofi_conn *c, int32_t *ahead);
/* The next entry as a cqe; 0 when it claims more than our window. */
int ofi_ring_take(struct ofi_conn *c, struct wimm_cqe *e);
/* 1 when ofi_ring_peek would find an entry. */
int ofi_ring_pending(const struct ofi_conn *c);
/* The peer broke the ring's rules: cut it, report PROTO. */
void ofi_ring_violation(struct ofi_conn *c, const char *what);

/* ofi_poll.c */
/* One CQ entry (or error entry) of c into at most one cqe; 1 if filled. */
int ofi_convert(struct ofi_conn *c, const struct fi_cq_data_entry *d, struct wimm_cqe *e);
int ofi_convert_err(struct ofi_conn *c, const struct fi_cq_err_entry *err, struct fid_cq *cq,
		    struct wimm_cqe *e);
void ofi_conn_stash_cq(struct ofi_conn *c);
void ofi_conn_down(struct ofi_conn *c, int status, int prov_err);
/* RDM: has the peer closed its liveness socket? (conn_down if so) */
void ofi_check_sock(struct ofi_conn *c);
void ofi_hot_add(struct ofi_conn *c);
void ofi_hot_del(struct ofi_conn *c);
int ofi_poll(void *bctx, struct wimm_cqe *out, int n);
int ofi_fd(void *bctx);
int ofi_arm(void *bctx);
int ofi_epoll_add(struct ofi_ctx *x, int fd, void *ptr, enum ofi_tag tag);
void ofi_epoll_del(struct ofi_ctx *x, int fd);

#endif
