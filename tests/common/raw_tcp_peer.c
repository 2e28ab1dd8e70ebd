/* The services' hostile peer: raw_peer.h's libfabric tcp MSG kind, with
 * receive slots for the server's sends and the server's window key. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "raw_tcp_peer.h"

int raw_tcp_peer_open(struct raw_tcp_peer *r, void *src, size_t src_len, void *win, size_t win_len)
{
	struct raw_peer_attr a = {.kind = RAW_PEER_OFI_MSG,
				  .prov = "tcp",
				  .node = "127.0.0.1",
				  .src = src,
				  .src_len = src_len,
				  .win = win,
				  .win_len = win_len,
				  .rx_slots = RAW_RX_SLOTS};
	return raw_peer_open(r, &a);
}

int raw_tcp_peer_connect(struct raw_tcp_peer *r, const char *host, int port, const void *priv,
			 size_t priv_len, void (*pump)(void *), void *arg, int timeout_ms)
{
	struct wimm_handshake hs = {
	    .rx_depth = RAW_RX_SLOTS, .recv_size = RAW_RX_SIZE, .priv_len = (uint32_t)priv_len};
	char service[16];

	if (priv_len > sizeof(hs.priv))
		return -EINVAL;
	if (priv_len)
		memcpy(hs.priv, priv, priv_len);
	snprintf(service, sizeof(service), "%d", port);
	return raw_peer_connect(r, host, service, &hs, pump, arg, timeout_ms);
}

int raw_tcp_peer_write(struct raw_tcp_peer *r, uint64_t addr, size_t len, int doorbell,
		       uint32_t imm)
{
	return raw_peer_write(r, addr, r->srv.window_key, len, doorbell, imm);
}

void raw_tcp_peer_progress(struct raw_tcp_peer *r)
{
	raw_peer_progress(r);
}

void raw_tcp_peer_close(struct raw_tcp_peer *r)
{
	raw_peer_close(r);
}
