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
	uint64_t ctl[16]; /* credits and heartbeats come here */
	/* Receive slots the server's sends land in (RAW_RX_SLOTS of
	 * RAW_RX_SIZE), posted at open and again as they are read. */
	uint8_t rx[16][512];
	int received;
	void *src, *win; /* what we write; our window (NULL: none) */
	size_t src_len, win_len;
	struct wimm_handshake srv; /* the server's handshake */
	int posted, done, failed;
};

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
 * counts the server's sends (each slot posted again). */
void raw_tcp_peer_progress(struct raw_tcp_peer *r);
void raw_tcp_peer_close(struct raw_tcp_peer *r);

#endif
