/* What conf_hostile.c and conf_hostile_ipc.c share: the raw peers (one
 * struct for every kind: tests/common/raw_peer.h's and ipc's), what the
 * server saw, the arena, and the helpers both files' tests use. */
#ifndef CONF_HOSTILE_H
#define CONF_HOSTILE_H

#include <stddef.h>
#include <stdint.h>

#include "conf.h"
#include "core/handshake.h"
#include "ipc/ipc_wire.h"

#include "raw_peer.h"

/* Beside raw_peer.h's kinds: the ipc fabric's raw peer (conf_hostile_ipc.c). */
#define RAW_IPC 4
/* The raw ipc peer's ring: room for every doorbell of the overdraft test. */
#define RAW_IPC_ENTRIES 256
#define RAW_IPC_DATA 65536

struct hostile_peer {
	/* kind, the server's handshake, counters, text, the credit word (ctl)
	 * and src; the provider's objects of the ofi and verbs kinds. */
	struct raw_peer raw;
	/* RAW_IPC: our ring and wake page, the server's (mapped from its fds). */
	int ipc_sock, ipc_fd[IPC_NFDS];
	/* The server's window, when it offered it for mapping (ipc_wire.h):
	 * its memfd (-1: not offered) and the window's offset in it. */
	int srv_win_fd;
	uint64_t srv_win_off;
	struct ipc_ring_hdr *ring, *srv_ring;
	size_t srv_ring_len;
	struct ipc_page *page, *srv_page;
	int srv_efd;
	uint32_t srv_idx;
	uint64_t prod;
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
void pump_both(struct wimm_ctx *ctx, struct hostile_peer *r, struct seen *s, int ns, int ms);
int raw_alloc(struct hostile_peer *r, int kind);
int raw_reply(struct hostile_peer *r, const uint8_t *b, size_t n);
void raw_close(struct hostile_peer *r);
/* Connect the raw peer r (opened here for uri's provider) to the listener
 * at addr with our half of the handshake hs; the server's side of it into
 * *sconn. 0, or -1 with r->raw.text saying why. */
int raw_connect_hs(struct hostile_peer *r, const char *uri, const char *addr, struct wimm_ctx *ctx,
		   struct wimm_listener *l, struct wimm_conn **sconn,
		   const struct wimm_handshake *hs);
/* A server whose listener exposes [0, HALF) of a 2 x HALF region (the
 * second half a canary, 0xCC) with receive window rx_depth, and an honest
 * client connected to it (alloc: the region is wimm_mr_alloc memory). */
int arena_open(struct arena *a, const char *uri, uint32_t rx_depth, int alloc);
/* hostile_open's need_windows: 1, the fabric must enforce windows; with
 * HOSTILE_ALLOC the arena's window is wimm_mr_alloc memory. */
#define HOSTILE_ALLOC 2
/* The arena, a raw peer of the fabric's kind, connected: 0, or 1 when the
 * test does not apply here (skipped), or -1 (a failure is recorded); in
 * every case hostile_close then undoes what it reached. */
int hostile_open(const char *uri, uint32_t depth, int need_windows, struct arena *a,
		 struct hostile_peer *r, struct wimm_conn **hc, int *kind);
void hostile_close(struct wimm_conn **hc, struct hostile_peer *r, struct arena *a);
/* The honest client still gets its doorbells through. */
int honest_ok(struct arena *a);
/* 0, or 1 + the first byte past the window that changed. */
size_t canary_damage(const struct arena *a);

/* conf_hostile_ipc.c: the raw ipc peer and the ipc fabric's own tests. */
int raw_ipc_connect(struct hostile_peer *r, const char *addr, struct wimm_ctx *ctx,
		    struct wimm_listener *l, struct wimm_conn **sconn);
int raw_ipc_write(struct hostile_peer *r, uint64_t addr, uint64_t key, size_t len, int doorbell,
		  uint32_t imm);
void raw_ipc_progress(struct hostile_peer *r);
void raw_ipc_close(struct hostile_peer *r);
void t_hostile_ipc_ring(const char *uri);
void t_hostile_ipc_direct(const char *uri);
void t_hostile_ipc_mapped(const char *uri);
void t_hostile_ipc_fds(const char *uri);
void t_ipc_addresses(const char *uri);

/* conf_hostile_ring.c: forged entries in ofi:tcp's doorbell ring. */
void t_hostile_ring_entries(const char *uri);
void t_hostile_ring_offer(const char *uri);

#endif
