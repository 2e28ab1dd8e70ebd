/* The verbs side of `wimm doctor`: one end of a raw RC pair on a device.
 * The receiving end (doctor_rx.c) is the same code in a loopback run and
 * behind `wimm doctor --serve`, so what a remote peer reports is what a
 * local one would. */
#ifndef WIMM_DOCTOR_VERBS_H
#define WIMM_DOCTOR_VERBS_H

#include <infiniband/verbs.h>

#include "doctor.h"
#include "hw_counters.h"

#define DV_PORT 1
#define DV_SQ_DEPTH 8	 /* send slots of each end */
#define DV_RX_DEPTH 8	 /* receives the healthy receiver posts */
#define DV_CQE 16	 /* CQ entries of each healthy end (>= DV_RX_DEPTH) */
#define DV_BUF_LEN 16384 /* window and source: 3 packets at MTU 4096 fit */
#define DV_MAX_LIVE 2	 /* the receiver's registrations: window, credit word */
#define DV_MAX_WC 16
#define DV_EVENT_TYPES 32    /* enum ibv_event_type fits */
#define DV_RECV_WRID 0x1000u /* wr_id bit of receives */
#define DV_TIMEOUT 14	     /* local ACK timeout 4.096 us * 2^14 = 67 ms */
#define DV_RETRY_CNT 3
#define DV_RNR_RETRY 1	   /* an RNR shows within milliseconds, not 7 * 655 ms */
#define DV_MIN_RNR_TIMER 1 /* 0.01 ms (0 would mean 655 ms) */

/* What one QP end tells the other (the out-of-band exchange). */
struct dv_id {
	uint32_t qpn;
	uint32_t psn;
	union ibv_gid gid;
	int mtu; /* enum ibv_mtu of the port */
};

/* Where the sender writes: what it holds after the handshake. */
struct dv_target {
	uint64_t addr;
	uint32_t rkey;
	uint32_t len;
};

struct dv_qp_attr {
	int ok; /* ibv_query_qp worked */
	int state, mtu, retry, rnr_retry, timeout, min_rnr;
	unsigned access; /* qp_access_flags */
};

/* A target checked against the receiver's live registrations. */
struct dv_key {
	int live;	 /* a live MR has this rkey */
	int in_bounds;	 /* and covers [addr, addr + len) */
	unsigned access; /* IBV_ACCESS_* it was registered with */
	uint64_t mr_addr, mr_len;
	int nlive; /* live registrations in all */
};

struct dv_cq {
	int cqe;	 /* entries the CQ really has */
	int recv_posted; /* receives posted and not yet completed */
	int outstanding; /* completions that can be pending at once */
	int cq_err;	 /* IBV_EVENT_CQ_ERR events seen */
	char async[256]; /* every async event seen, by name */
};

struct dv_wc {
	int status, opcode, with_imm;
	uint32_t imm, len;
};

struct dv_end {
	char dev[64];
	char netdev[32]; /* under the GID, "" if none */
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	int gid_index;
	union ibv_gid gid;
	int port_mtu;
	int hw; /* a PCI device (a NIC), not rxe/siw on a netdev */
	uint8_t *buf;
	struct ibv_mr *live[DV_MAX_LIVE]; /* [0] the window/source, [1] a credit word */
	unsigned live_access[DV_MAX_LIVE];
	uint64_t credit_word;
	int recv_posted;
	int cq_err;
	int events[DV_EVENT_TYPES]; /* async events seen, by type */
};

/* Open DEV, pick the GID (gid_index < 0: the first RoCEv2 IPv4 one). */
int dv_open(struct dv_end *e, const char *dev, int gid_index, char *err, size_t errlen);
void dv_close(struct dv_end *e);
/* CQ, buffer, registrations and an RC QP, taken to INIT. */
int dv_create(struct dv_end *e, int cqe, unsigned mr_access, char *err, size_t errlen);
int dv_to_rtr(struct dv_end *e, const struct dv_id *peer, int mtu, char *err, size_t errlen);
int dv_to_rts(struct dv_end *e, char *err, size_t errlen);
void dv_id_of(const struct dv_end *e, struct dv_id *out);

/* The receiver of a probe pair, with the receiver-side faults applied:
 * set up against the sender's id, return its own id and the target. */
int dv_rx_setup(struct dv_end *rx, enum dr_fault fault, const struct dv_id *tx, struct dv_id *id,
		struct dv_target *t, char *err, size_t errlen);
void dv_query(struct dv_end *e, struct dv_qp_attr *a);
void dv_rx_key(const struct dv_end *rx, const struct dv_target *t, struct dv_key *k);
void dv_cq_info(struct dv_end *e, struct dv_cq *c);
/* Completions within timeout_ms (stops early once max arrived). */
int dv_poll(struct dv_end *e, int timeout_ms, int want, struct dv_wc *wc, int max);

const char *dv_qp_state_name(int state);
const char *dv_wc_opcode_name(int opcode);
/* "REMOTE_WRITE|LOCAL_WRITE" */
void dv_access_text(unsigned access, char *buf, size_t cap);

#endif
