/* The services' hostile peer (raw_tcp_peer.h): waiting for the server's
 * doorbells and for one write's completion, on top of its progress. */
#include <time.h>

#include <rdma/fi_errno.h>

#include "raw_tcp_peer.h"

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long raw_tcp_peer_await(struct raw_tcp_peer *r, int (*match)(uint32_t imm, void *arg), void *arg,
			int timeout_ms)
{
	for (int64_t until = now_ms() + timeout_ms;;) {
		/* A close seen before this progress: what came before it has
		 * been read by now. */
		int closed = r->shutdown;
		raw_tcp_peer_progress(r);
		if (r->imm_next < r->doorbells - RAW_IMM_KEPT)
			r->imm_next = r->doorbells - RAW_IMM_KEPT;
		while (r->imm_next < r->doorbells) {
			uint32_t imm = r->imm[r->imm_next++ % RAW_IMM_KEPT];
			if (match(imm, arg))
				return imm;
		}
		if (closed)
			return -FI_ECONNRESET;
		if (now_ms() >= until)
			return -FI_ETIMEDOUT;
	}
}

int raw_tcp_peer_write_wait(struct raw_tcp_peer *r, uint64_t addr, size_t len, int doorbell,
			    uint32_t imm, int timeout_ms)
{
	int done = r->done, failed = r->failed;
	int ret = raw_tcp_peer_write(r, addr, len, doorbell, imm);
	for (int64_t until = now_ms() + timeout_ms; !ret;) {
		raw_tcp_peer_progress(r);
		if (r->failed != failed)
			return r->last_error > 0 ? -r->last_error : -FI_EIO;
		if (r->done != done)
			return 0;
		if (r->shutdown)
			return -FI_ECONNRESET;
		if (now_ms() >= until)
			return -FI_ETIMEDOUT;
	}
	return ret;
}
