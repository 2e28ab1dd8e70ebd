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

#define OFI_API_VERSION FI_VERSION(1, 9)
#define OFI_STASH 32 /* completions read ahead by post() / arm() */
#define OFI_DEFAULT_TIMEOUT_MS 10000
/* Ordering credits and doorbells rely on (see ofi_hints). */
#define OFI_ORDER (FI_ORDER_WAW | FI_ORDER_SAW)
#define OFI_CTRL_PERIOD_NS 1000000 /* control-plane checks in poll(): 1 ms */

struct ofi_conn;

struct ofi_ctx {
	struct wimm_ctx *core;
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_mr *null_mr; /* key 0: target of window-less doorbells */
	uint64_t null_word;
	int msg;	/* FI_EP_MSG (provider CM) vs FI_EP_RDM (TCP OOB) */
	int prov_key;	/* provider picks MR keys */
	int cq_wait_fd; /* CQs support FI_WAIT_FD */
	char fabric_name[64];
	int epfd;
	int timerfd; /* wakes sleepers where CQs have no wait fd */
	struct ofi_conn *conns;
	struct ofi_conn *graveyard; /* deleted, endpoint kept: see ofi_conn_delete */
	struct ofi_conn *rr;	    /* where the next poll() starts */
	uint32_t nconns;
	uint64_t ctrl_next_ns;
	uint32_t empty_polls; /* see ofi_poll */
	struct fid **fids;    /* CQs and EQs for fi_trywait */
	size_t nfids;
};

struct ofi_tx {
	uint64_t seq; /* absolute position in the tx stream */
	uint64_t op_seq;
	uint32_t len;
	enum wimm_op op;
	int signal;
	int internal;
};

struct ofi_slot {
	uint8_t *buf;
};

struct ofi_conn {
	struct ofi_ctx *ctx;
	struct ofi_conn *next, *prev;
	struct wimm_conn *core;
	struct fi_info *info; /* MSG: from the connreq or the resolved peer */
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_eq *eq; /* MSG: CM events of this endpoint */
	struct fid_av *av; /* RDM: holds exactly the peer */
	fi_addr_t peer;
	int sock; /* RDM: handshake + liveness channel, else -1 */
	int cq_fd, eq_fd;
	int in_epoll_sock;
	int enabled;
	int connected;
	int down_pending; /* CONN_DOWN found, not yet returned */
	int down_reported;
	int down_status, down_prov;
	int same_proc; /* RDM peer lives in this process */

	uint32_t sq_depth, tx_max, force_every, unsig;
	uint64_t tx_head, tx_tail; /* posted / retired positions */
	struct ofi_tx *tx;

	uint32_t rx_depth, recv_size;
	uint8_t *rx_buf;
	struct fid_mr *rx_mr;
	struct ofi_slot *slots;
	uint64_t rx_delivered, rx_reposted; /* slots handed out / posted again */

	struct wimm_cqe stash[OFI_STASH];
	unsigned stash_head, stash_len;
};

struct ofi_req {
	struct fi_info *info; /* MSG: the FI_CONNREQ's info */
	struct fid_pep *pep;
	int sock; /* RDM: the accepted TCP socket */
};

struct ofi_lis {
	struct ofi_ctx *ctx;
	struct fid_pep *pep;
	struct fid_eq *eq;
	struct fi_info *info;
	int fd; /* EQ wait fd or the listening socket */
};

/* ofi_ctx.c */
int ofi_err(struct ofi_ctx *x, int fi_ret, const char *what);
int ofi_errno_err(struct ofi_ctx *x, int err, const char *what, int code);
struct fi_info *ofi_hints(const char *prov, enum fi_ep_type type);
int ofi_ctx_track(struct ofi_ctx *x);
/* fi_mr_reg with a key of wimm's choosing where the provider wants one. */
int ofi_reg(struct ofi_ctx *x, void *addr, size_t len, uint64_t acc, struct fid_mr **mr);

/* ofi_cm.c */
int ofi_listen(void *bctx, const char *host, const char *port, void **blis, int *port_out);
void ofi_listener_close(void *blis);
int ofi_listener_fd(void *blis);
int ofi_get_request(void *blis, int timeout_ms, void **breq, uint8_t *hs, size_t *hs_len);
void ofi_reject(void *breq, int why);
int ofi_connect(void *bconn, const char *host, const char *port, const uint8_t *hs, size_t hs_len,
		uint8_t *reply, size_t *reply_len, int timeout_ms);
int ofi_accept(void *bconn, const uint8_t *hs, size_t hs_len, int timeout_ms);
int ofi_conn_ready(void *bconn, const struct wimm_handshake *peer);

/* ofi_conn.c */
int ofi_conn_new(void *bctx, void *breq, const struct wimm_conn_cfg *cfg, void **bconn);
int ofi_conn_addr(void *bconn, uint8_t *buf, size_t *len);
int ofi_conn_open_ep(struct ofi_conn *c, struct fi_info *info);
void ofi_conn_delete(void *bconn);
void ofi_conn_free(struct ofi_conn *c);
int ofi_post(void *bconn, const struct wimm_wr *wr);
int ofi_rx_release(void *bconn, uint32_t n);

/* ofi_poll.c */
int ofi_conn_read_cq(struct ofi_conn *c, struct wimm_cqe *out, int n);
void ofi_conn_stash_cq(struct ofi_conn *c);
void ofi_conn_down(struct ofi_conn *c, int status, int prov_err);
int ofi_poll(void *bctx, struct wimm_cqe *out, int n);
int ofi_fd(void *bctx);
int ofi_arm(void *bctx);
int ofi_epoll_add(struct ofi_ctx *x, int fd);
void ofi_epoll_del(struct ofi_ctx *x, int fd);

#endif
