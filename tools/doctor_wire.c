/* Capture of RoCEv2 on the netdev under the sender's GID, with a plain
 * AF_PACKET socket: no libpcap, and the frames go through the doctor's own
 * decoder (doctor_roce.c). The socket queues every frame that passes the
 * device from the moment it is bound, so it is opened before the probes
 * and read empty after them: no capture thread. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "doctor_wire.h"

int dw_open(struct dw_cap *c, const char *netdev, char *err, size_t errlen)
{
	struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL)};
	int rcvbuf = 4 << 20;

	c->fd = -1;
	sll.sll_ifindex = (int)if_nametoindex(netdev);
	if (!sll.sll_ifindex) {
		snprintf(err, errlen, "no network interface '%s'", netdev);
		return -1;
	}
	c->fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, htons(ETH_P_ALL));
	if (c->fd < 0) {
		snprintf(err, errlen, "socket(AF_PACKET): %s%s", strerror(errno),
			 errno == EPERM ? " (capturing needs CAP_NET_RAW: run as root)" : "");
		return -1;
	}
	/* A 3-packet probe at MTU 4096 and its ACKs fit many times over. */
	setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	if (bind(c->fd, (struct sockaddr *)&sll, sizeof(sll))) {
		snprintf(err, errlen, "bind(AF_PACKET, %s): %s", netdev, strerror(errno));
		close(c->fd);
		c->fd = -1;
		return -1;
	}
	return 0;
}

static void hexdump(FILE *f, int n, const uint8_t *p, size_t len)
{
	fprintf(f, "frame %d (%zu bytes):", n, len);
	for (size_t i = 0; i < len; i++)
		fprintf(f, "%s%02x", i % 16 ? " " : "\n  ", p[i]);
	fputc('\n', f);
}

int dw_drain(struct dw_cap *c, struct roce_pkt *pkts, int max, int *other, FILE *dump)
{
	uint8_t frame[256]; /* headers are all the decoder needs */
	int n = 0, frames = 0;

	*other = 0;
	if (c->fd < 0)
		return 0;
	for (;;) {
		ssize_t got = recv(c->fd, frame, sizeof(frame), MSG_TRUNC);
		size_t have;

		if (got < 0)
			break;
		have = (size_t)got < sizeof(frame) ? (size_t)got : sizeof(frame);
		if (n < max && roce_decode(frame, have, &pkts[n]) == 0) {
			/* Dump the RoCE frames only, truncated to the headers. */
			if (dump)
				hexdump(dump, frames, frame, have < 96 ? have : 96);
			n++;
		} else {
			(*other)++;
		}
		frames++;
	}
	return n;
}

void dw_close(struct dw_cap *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}
