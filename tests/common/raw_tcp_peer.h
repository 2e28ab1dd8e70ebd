/* A hostile wimm peer for the services' tests: a raw libfabric tcp (MSG)
 * endpoint that does wimm's handshake itself and then writes wherever it
 * likes, with the key the server handed it, bypassing every check the
 * library makes on the sending side. What the server's transport refuses
 * is what the receiver enforces. The MSG-only face of raw_peer.h: the
 * struct is raw_peer.h's (srv, posted, done, failed, received, rx, ...). */
#ifndef WIMM_RAW_TCP_PEER_H
#define WIMM_RAW_TCP_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "raw_peer.h"

/* The services' tests name the struct after what it is to them. */
#define raw_tcp_peer raw_peer

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
