/* ps_test hostile: a raw libfabric tcp endpoint that does wimm's handshake
 * itself, with the ps hello as its private data, joins as worker 1 and then
 * writes, with the key of its own window, into worker 0's receive region
 * (just before its window, straddling its start, and with a doorbell that
 * claims worker 0). The transport refuses every one: the server's memory
 * there stays as it was, no doorbell reaches the service, nothing is
 * applied; its own write inside its window lands and counts. The server
 * runs in this process (one thread drives both) so the test can look at
 * its memory through ps_server.h.
 *
 * Only on ofi:tcp: libfabric's shm provider does not check a write's range
 * at the target (tests/conformance/conf_hostile.c measured it), so there a
 * window is the honest sender's promise, as docs/design.md says. */
#include <string.h>

#include "ps_server.h"
#include "ps_test.h"

#ifdef PS_TEST_HAVE_OFI
#include <rdma/fi_errno.h>

#include "raw_tcp_peer.h"

#define SHARDS 4
#define SHARD 1024u
#define SRC 4096

static float src[SRC / 4];	      /* what we write */
static float win[SHARDS * SHARD / 4]; /* our window: the server's parameters */

static void run_server(void *arg)
{
	wimm_ps_server_run(arg, 1);
}

/* Drive the server and the raw peer for ms. */
static void pump(struct wimm_ps_server *s, struct raw_tcp_peer *r, int ms)
{
	int64_t until = now_ms() + ms;
	do {
		wimm_ps_server_run(s, 1);
		raw_tcp_peer_progress(r);
	} while (now_ms() < until);
}

static void say(void *arg, enum wimm_log_level lvl, const char *msg)
{
	(void)arg;
	if (lvl <= WIMM_LOG_INFO)
		fprintf(stderr, "server: %s\n", msg);
}

int t_hostile(void)
{
	static struct raw_tcp_peer r;
	struct wimm_ps_server *s = NULL;
	struct wimm_ps_stats st;
	if (strcmp(fabric, "ofi:tcp") != 0)
		die("hostile runs on ofi:tcp only (libfabric shm does not enforce windows)");
	struct wimm_ps_server_attr a = {.fabric = fabric,
					.addr = "127.0.0.1:0",
					.shards = SHARDS,
					.shard_size = SHARD,
					.workers = 2,
					.liveness_ms = 30000,
					.log = say};
	int rc = wimm_ps_server_new(&a, &s);
	if (rc < 0)
		die("server: %s", wimm_strerror(rc));
	uint8_t hello[PS_HELLO_LEN];
	ps_hello_encode(hello, &(struct ps_hello){.role = PS_ROLE_WORKER, .rank = 1, .world = 2});
	int ret = raw_tcp_peer_open(&r, src, sizeof(src), win, sizeof(win));
	if (!ret)
		ret = raw_tcp_peer_connect(&r, test_host(), wimm_ps_server_port(s), hello,
					   sizeof(hello), run_server, s, 10000 * scale());
	if (ret)
		die("raw tcp peer: %s", fi_strerror(ret < 0 ? -ret : ret));
	CHECK(r.srv.window_len == SHARDS * SHARD, "the server's window for us: %llu bytes",
	      (unsigned long long)r.srv.window_len);
	pump(s, &r, 300);
	/* Worker 0's region: zero, for nobody has written it. */
	const unsigned char *w0 = (const unsigned char *)s->recv;
	size_t region = SHARDS * SHARD;
	/* The control: our own shard 0, inside our window, with its doorbell. */
	for (size_t j = 0; j < SRC / 4; j++)
		src[j] = 3.0f;
	CHECK(raw_tcp_peer_write(&r, r.srv.window_addr, SHARD, 1, ps_imm_in(1, 0, 0)) == 0,
	      "write");
	pump(s, &r, 300);
	wimm_ps_server_stats(s, &st);
	CHECK(st.pushes == 1 && ((float *)(w0 + region))[0] == 3.0f,
	      "our own push did not land (pushes %llu, live %llu; raw: %d posted, %d done, %d "
	      "failed)",
	      (unsigned long long)st.pushes, (unsigned long long)st.workers_live, r.posted, r.done,
	      r.failed);
	/* Into worker 0's region: before our window, straddling its start,
	 * and with a doorbell that claims worker 0 and its shard 1. */
	for (size_t j = 0; j < SRC / 4; j++)
		src[j] = 1e30f;
	raw_tcp_peer_write(&r, r.srv.window_addr - region, SHARD, 0, 0);
	raw_tcp_peer_write(&r, r.srv.window_addr - SHARD / 2, SHARD, 0, 0);
	raw_tcp_peer_write(&r, r.srv.window_addr - region + SHARD, SHARD, 1, ps_imm_in(0, 1, 0));
	pump(s, &r, 1500);
	size_t damaged = 0;
	for (size_t i = 0; i < region; i++)
		damaged += w0[i] != 0;
	wimm_ps_server_stats(s, &st);
	printf("hostile: %d posted, %d completed, %d failed; server: pushes %llu, bad_worker %llu, "
	       "applied %llu, worker 0's region: %zu bytes changed\n",
	       r.posted, r.done, r.failed, (unsigned long long)st.pushes,
	       (unsigned long long)st.bad_worker, (unsigned long long)st.applied, damaged);
	CHECK(damaged == 0, "%zu bytes of worker 0's region changed", damaged);
	CHECK(st.pushes == 1 && st.bad_worker == 0 && st.applied == 0,
	      "a write outside the window reached the service");
	raw_tcp_peer_close(&r);
	wimm_ps_server_delete(&s);
	return 0;
}
#else
static void say(void *arg, enum wimm_log_level lvl, const char *msg)
{
	(void)arg;
	if (lvl <= WIMM_LOG_INFO)
		fprintf(stderr, "server: %s\n", msg);
}

int t_hostile(void)
{
	die("built without libfabric: no raw tcp peer");
}
#endif
