/* What conf_hostile.c and conf_hostile_ipc.c share: the raw peers (one
 * struct for every kind), what the server saw, the arena, and the helpers
 * both files' tests use. */
#ifndef CONF_HOSTILE_H
#define CONF_HOSTILE_H

#include <stddef.h>
#include <stdint.h>

#include "conf.h"
#include "core/handshake.h"
#include "ipc/ipc_wire.h"

#ifdef CONF_HAVE_OFI
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#endif
#ifdef CONF_HAVE_VERBS
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#endif

#define RAW_MSG 1
#define RAW_CM 2
#define RAW_RDM 3
#define RAW_IPC 4
/* The raw ipc peer's ring: room for every doorbell of the overdraft test. */
#define RAW_IPC_ENTRIES 256
#define RAW_IPC_DATA 65536

struct raw_peer {
	int kind;
	struct wimm_handshake srv; /* the server's reply */
	uint64_t *ctl;		   /* where the server returns credits (128 B) */
	uint8_t *src;		   /* what we write from */
	int posted, done, failed;
	char text[200];
#ifdef CONF_HAVE_OFI
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_eq *eq;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fid_mr *ctl_mr, *src_mr;
	struct fid_av *av; /* RDM */
	fi_addr_t srv_addr;
	int sock; /* RDM: the side channel */
#endif
	/* RAW_IPC: our ring and wake page, the server's (mapped from its fds). */
	int ipc_sock, ipc_fd[IPC_NFDS];
	struct ipc_ring_hdr *ring, *srv_ring;
	size_t srv_ring_len;
	struct ipc_page *page, *srv_page;
	int srv_efd;
	uint32_t srv_idx;
	uint64_t prod;
#ifdef CONF_HAVE_VERBS
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *vcq;
	struct ibv_mr *ctl_vmr, *src_vmr;
#endif
};

#define RAW_SRC 4096

/* What the server saw, per connection of interest. */
struct seen {
	struct wimm_conn *conn;
	int doorbells;
	int down, down_status;
};

struct arena {
	struct pair p;
	struct region *win; /* 2 x HALF: the window is the first half */
	char addr[300];
};

#define HALF 4096

/* conf_hostile.c */
/* Drive the server for ms (taking requests and accepting them with the
 * listener's attributes), counting events of the tracked connections. */
void pump(struct wimm_ctx *ctx, struct wimm_listener *l, struct wimm_conn **accepted,
	  struct seen *s, int ns, int ms);
/* Pump the server and the raw peer together for ms. */
void pump_both(struct wimm_ctx *ctx, struct raw_peer *r, struct seen *s, int ns, int ms);
int raw_alloc(struct raw_peer *r, int kind);
int raw_reply(struct raw_peer *r, const uint8_t *b, size_t n);
void raw_close(struct raw_peer *r);
/* The arena, a raw peer of the fabric's kind, connected: 0, or 1 when the
 * test does not apply here (skipped), or -1 (a failure is recorded). */
int hostile_open(const char *uri, uint32_t depth, int need_windows, struct arena *a,
		 struct raw_peer *r, struct wimm_conn **hc, int *kind);
void hostile_close(struct wimm_conn **hc, struct raw_peer *r, struct arena *a);
/* The honest client still gets its doorbells through. */
int honest_ok(struct arena *a);
/* 0, or 1 + the first byte past the window that changed. */
size_t canary_damage(const struct arena *a);

/* conf_hostile_ipc.c: the raw ipc peer and the ipc fabric's own tests. */
int raw_ipc_connect(struct raw_peer *r, const char *addr, struct wimm_ctx *ctx,
		    struct wimm_listener *l, struct wimm_conn **sconn);
int raw_ipc_write(struct raw_peer *r, uint64_t addr, uint64_t key, size_t len, int doorbell,
		  uint32_t imm);
void raw_ipc_progress(struct raw_peer *r);
void raw_ipc_close(struct raw_peer *r);
void t_hostile_ipc_ring(const char *uri);
void t_hostile_ipc_fds(const char *uri);
void t_ipc_addresses(const char *uri);

#endif
