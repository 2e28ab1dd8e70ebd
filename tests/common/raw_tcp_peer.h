/* A hostile wimm peer for the services' tests: a raw libfabric tcp (MSG)
 * endpoint that does wimm's handshake itself and then writes wherever it
 * likes, with the key the server handed it, bypassing every check the
 * library makes on the sending side. What the server's transport refuses
 * is what the receiver enforces. */
#ifndef WIMM_RAW_TCP_PEER_H
#define WIMM_RAW_TCP_PEER_H

#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>

#include "core/handshake.h"

struct raw_tcp_peer {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_eq *eq;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fid_mr *ctl_mr, *src_mr, *win_mr, *rx_mr;
	/* Key 0, as every wimm ofi context has: a wimm peer aims its pure
	 * doorbells (no data) there, and tcp drops a connection whose write
	 * names a key it does not know. */
	struct fid_mr *null_mr;
	uint64_t null_word;
	uint64_t ctl[16]; /* credits and heartbeats come here */
	/* Receive slots the server's sends land in (RAW_RX_SLOTS of
	 * RAW_RX_SIZE), posted at open and again as they are read. */
	uint8_t rx[16][512];
	int received;
	void *src, *win; /* what we write; our window (NULL: none) */
	size_t src_len, win_len;
	struct wimm_handshake srv; /* the server's handshake */
	int posted, done, failed;
	int last_error; /* the provider's error of the last failed completion */
	/* The doorbells the server rang on us (the low 32 bits of their
	 * remote CQ data), the last RAW_IMM_KEPT of them by count. */
	uint32_t imm[16];
	int doorbells, imm_next; /* rung so far; the next one to look at */
	int shutdown;		 /* the server closed the connection (FI_SHUTDOWN) */
};

#define RAW_IMM_KEPT 16

#define RAW_RX_SLOTS 16
#define RAW_RX_SIZE 512

/* Open the endpoint and register src (what we write) and win (the window
 * we offer, may be NULL). 0 or a negative fi_errno. */
int raw_tcp_peer_open(struct raw_tcp_peer *r, void *src, size_t src_len, void *win, size_t win_len);
/* Connect to host:port with our handshake (priv as its private data),
 * calling pump(arg) between looks at the CM so a server in this process
 * can run; 0, or a negative fi_errno (-FI_ECONNREFUSED when refused). */
int raw_tcp_peer_connect(struct raw_tcp_peer *r, const char *host, int port, const void *priv,
			 size_t priv_len, void (*pump)(void *), void *arg, int timeout_ms);
/* One write of src[0..len) to the server's addr with its window key; with
 * a doorbell (remote CQ data = len << 32 | imm) when doorbell. */
int raw_tcp_peer_write(struct raw_tcp_peer *r, uint64_t addr, size_t len, int doorbell,
		       uint32_t imm);
/* Read our completions: done and failed count them (writes), received
 * counts the server's sends (each slot posted again), doorbells and imm
 * its doorbells; and the CM: shutdown once the server closed. */
void raw_tcp_peer_progress(struct raw_tcp_peer *r);
/* Progress until the server rang a doorbell for which match(imm, arg) is
 * true (its imm), or until timeout_ms: -FI_ETIMEDOUT, or -FI_ECONNRESET
 * once the server closed without one. Doorbells are looked at in the
 * order they came, each once (those rung before the call too). */
long raw_tcp_peer_await(struct raw_tcp_peer *r, int (*match)(uint32_t imm, void *arg), void *arg,
			int timeout_ms);
/* Post one write like raw_tcp_peer_write and progress until it completes
 * (0), fails at the provider (its negative error) or timeout_ms passes
 * (-FI_ETIMEDOUT): src may be refilled afterwards. */
int raw_tcp_peer_write_wait(struct raw_tcp_peer *r, uint64_t addr, size_t len, int doorbell,
			    uint32_t imm, int timeout_ms);
void raw_tcp_peer_close(struct raw_tcp_peer *r);

#endif
