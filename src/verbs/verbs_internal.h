/* rdma-core verbs backend: the objects shared by verbs_ctx.c (device, PD, CQ,
 * control channels), verbs_conn.c (rdma_cm, QPs) and verbs_post.c (the post
 * builder and the completion decoder). Nothing here leaves src/verbs/.
 *
 * Environment: WIMM_VERBS_SRQ=1 makes every connection with zero-length
 * receive slots (recv_size 0) share one SRQ per context instead of having an
 * RQ of its own; WIMM_VERBS_SRQ=0 never does; unset, a context switches its
 * new recv_size-0 connections to the SRQ once it has VERBS_SRQ_AUTO_CONNS
 * connections (many windows of idle receives are then one shared pool).
 */
#ifndef WIMM_VERBS_INTERNAL_H
#define WIMM_VERBS_INTERNAL_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdatomic.h>
#include <stdint.h>

#include "backend.h"
#include "core/recv_slots.h"
#include "core/send_ring.h"

/* completions arm() may find after arming, or a poll could not return yet
 * (a batch cut short by a CONN_UP: see verbs_decode_all) */
#define VERBS_STASH 32
#define VERBS_ACK_BATCH 64  /* CQ events acknowledged per ibv_ack_cq_events */
#define VERBS_PDATA_MAX 256 /* largest cm private data we keep */
#define VERBS_SRQ_AUTO_CONNS 16
#define VERBS_SRQ_MAX 16384
/* Polls in a row that filled the caller's array before pending CONN_DOWN /
 * CONN_UP are reported anyway (the CQ never came back empty). */
#define VERBS_CTL_FULL_POLLS 8

/* wr_id layout: bit 63 = receive, bits 62..32 = connection generation (so a
 * completion of a deleted connection whose qp_num was reused is dropped),
 * bits 31..0 = send post counter or receive slot. */
#define VERBS_WRID_RECV (1ull << 63)
#define VERBS_WRID_GEN(w) ((uint32_t)(((w) >> 32) & 0x7fffffffu))
#define VERBS_WRID(gen, low) (((uint64_t)((gen)&0x7fffffffu) << 32) | (uint32_t)(low))

struct verbs_conn;

struct verbs_ctx {
	struct wimm_ctx *core;
	struct ibv_context **devs; /* rdma_get_devices(): cm_ids resolve into these */
	struct ibv_context *verbs;
	struct ibv_device_attr dattr;
	uint32_t max_msg;
	uint32_t max_inline;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;
	int cqe;
	unsigned cq_unacked;
	struct rdma_event_channel *cm_ch;
	int epfd;
	struct wimm_ctl_throttle ctl; /* cm, async and CQ channels */
	struct ibv_wc stash[VERBS_STASH];
	int stash_n, stash_pos;

	/* qp_num -> connection, open addressing with linear probing */
	struct verbs_conn **tab;
	uint32_t tab_size, tab_used;
	uint32_t gen_next;
	uint32_t down_pending; /* connections with a CONN_DOWN to report */
	uint32_t up_pending;   /* connections with a CONN_UP to report */
	unsigned full_polls;   /* polls in a row that filled the array */

	/* set by any context that reads a shared async event naming ours */
	atomic_int async_flag;
	atomic_int cq_err;
	unsigned port_gen_seen;

	int srq_mode; /* 1 always, 0 never, -1 auto (see above) */
	uint32_t cq_budget;
	struct ibv_srq *srq;
	uint32_t srq_max, srq_used, srq_spare;

	char fabric[80];
	char errbuf[160];
};

struct verbs_conn {
	struct verbs_ctx *vc;
	struct wimm_conn *core;
	struct rdma_cm_id *id;
	struct ibv_qp *qp;
	uint32_t qp_num;
	uint32_t gen;
	int in_tab;
	int established;
	int accepting;	       /* rdma_accept done, ESTABLISHED not yet seen */
	int dead;	       /* QP known to be in error: posting is refused */
	struct wimm_down down; /* backend.h's state machine */
	int up;		       /* 1 CONN_UP to report, 2 reported */
	atomic_int async_ev;   /* QP async event seen by some context, + 1 */
	atomic_int comm_est;   /* IBV_EVENT_COMM_EST seen: rdma_notify due */

	/* last rdma_cm event while connecting or accepting */
	int cm_ev, cm_status;
	uint8_t pdata[VERBS_PDATA_MAX];
	size_t pdata_len;
	uint8_t resp_res, init_depth; /* from the request (passive side) */

	/* send queue: sq_depth + sq_reserve slots, freed in order */
	uint32_t sq_size;
	struct wimm_send_ring sq;
	uint32_t max_inline;

	/* receive window */
	uint32_t rx_depth, recv_size;
	int use_srq;
	int srq_counted; /* its rx_depth is in srq_used */
	uint8_t *rx_buf;
	struct ibv_mr *rx_mr;
	struct ibv_recv_wr *rx_wr;
	struct ibv_sge *rx_sge;
	struct wimm_recv_slots rx;
};

/* verbs_ctx.c */
int verbs_err(struct verbs_ctx *vc, int werr, int prov, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int verbs_tab_add(struct verbs_ctx *vc, struct verbs_conn *c);
void verbs_tab_del(struct verbs_ctx *vc, struct verbs_conn *c);
struct verbs_conn *verbs_tab_find(const struct verbs_ctx *vc, uint32_t qp_num);
void verbs_conn_mark_down(struct verbs_conn *c, int status, int prov);
void verbs_conn_mark_up(struct verbs_conn *c);
void verbs_control(struct verbs_ctx *vc);
int verbs_cm_drain(struct verbs_ctx *vc);
uint32_t verbs_probe_inline(struct ibv_pd *pd, struct ibv_cq *cq);
struct ibv_srq *verbs_srq_for(struct verbs_ctx *vc, uint32_t rx_depth);

/* verbs_conn.c */
int verbs_listen(void *bctx, const char *host, const char *port, void **blis, int *port_out);
void verbs_listener_close(void *blis);
int verbs_listener_fd(void *blis);
int verbs_get_request(void *blis, int timeout_ms, void **breq, uint8_t *hs, size_t *hs_len);
void verbs_reject(void *breq, const uint8_t *msg, size_t len);
int verbs_request_peer(void *breq, char *buf, size_t len);
void verbs_conn_shutdown(void *bconn);
int verbs_conn_new(void *bctx, void *breq, const struct wimm_conn_cfg *cfg, void **bconn);
int verbs_conn_addr(void *bconn, uint8_t *buf, size_t *len);
int verbs_connect(void *bconn, const char *host, const char *port, const uint8_t *hs, size_t hs_len,
		  uint8_t *reply, size_t *reply_len, int timeout_ms);
int verbs_accept(void *bconn, const uint8_t *hs, size_t hs_len);
int verbs_conn_ready(void *bconn, const struct wimm_handshake *peer);
void verbs_conn_delete(void *bconn);

/* verbs_post.c */
int verbs_post(void *bconn, const struct wimm_wr *wr);
int verbs_prep_new(void *bconn, const struct wimm_wr *wr, void **bprep);
int verbs_prep_post(void *bconn, void *bprep, const struct wimm_wr *wr);
void verbs_prep_delete(void *bprep);
int verbs_post_atomic(void *bconn, const struct wimm_wr *wr);
int verbs_rx_post(struct verbs_conn *c, uint32_t n);
int verbs_rx_release(void *bconn, uint32_t n);
int verbs_poll(void *bctx, struct wimm_cqe *out, int n);
int verbs_status_to_wimm(enum ibv_wc_status st);

/* verbs_info.c */
int verbs_describe(FILE *f, int json, int *first);
int verbs_auto_probe(char *spec, size_t spec_len);

#endif
