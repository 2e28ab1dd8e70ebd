/* kv.raw_peer: a client that talks to the provider directly (a raw
 * libfabric tcp endpoint doing wimm's handshake, tests/common) gets its
 * arena as its window like any client, and then writes outside it: into
 * the arena of a client that holds a published key, across its own
 * window's ends, at the pool's start. The server's transport refuses them
 * all: every byte of the pool outside the raw client's arena stays as it
 * was, and the other client reads its value back whole. Its own write
 * inside its arena lands (the control). The server runs in this process so
 * the test can look at its memory (kv_server.h); the honest client is a
 * child process. Only on ofi:tcp: libfabric's shm does not check a write's
 * range at the target, so there windows are the honest sender's promise
 * (docs/design.md). */
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kv_server.h"
#include <rdma/fi_errno.h>

#include "raw_tcp_peer.h"
#include "svc_test.h"

#define VICTIM_LEN 1000u
#define ARENA ((size_t)1 << 20)

static int fails;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			SVC_FAIL(__VA_ARGS__);                                                     \
			fails++;                                                                   \
		}                                                                                  \
	} while (0)

static void victim_value(unsigned char *v)
{
	for (uint32_t i = 0; i < VICTIM_LEN; i++)
		v[i] = (unsigned char)(i * 7 + 13);
}

/* The honest client: put "victim", say so, stay connected (polling) until
 * the test closes the pipe, then read the value back. Exit 0 if whole. */
static int victim(const char *addr, int cmd_fd, int report_fd)
{
	struct wimm_kv_client_attr a = {.fabric = "ofi:tcp", .timeout_ms = 20000};
	struct wimm_kv_client *c;
	unsigned char v[VICTIM_LEN], got[VICTIM_LEN];
	size_t len = 0;
	int rc = wimm_kv_connect(addr, &a, &c);
	victim_value(v);
	if (rc == 0)
		rc = wimm_kv_put(c, "victim", 6, v, sizeof(v), WIMM_KV_PIN);
	if (rc < 0) {
		fprintf(stderr, "victim: %s\n", wimm_kv_strerror(rc));
		return 1;
	}
	if (write(report_fd, "p", 1) != 1)
		return 1;
	fcntl(cmd_fd, F_SETFL, O_NONBLOCK);
	for (;;) {
		char b;
		ssize_t r = read(cmd_fd, &b, 1);
		if (r == 0)
			break;
		if (wimm_kv_client_poll(c) < 0)
			return 1;
		usleep(20000);
	}
	rc = wimm_kv_get(c, "victim", 6, got, sizeof(got), &len);
	if (rc < 0 || len != sizeof(v) || memcmp(got, v, len) != 0) {
		fprintf(stderr, "victim: get after the raw peer: %s, %zu bytes\n",
			wimm_kv_strerror(rc), len);
		return 1;
	}
	wimm_kv_close(&c);
	return 0;
}

static void say(void *arg, enum wimm_log_level lvl, const char *msg)
{
	(void)arg;
	if (lvl <= WIMM_LOG_INFO)
		fprintf(stderr, "server: %s\n", msg);
}

static void pump(void *arg)
{
	wimm_kv_server_run(arg, 1);
}

static void pump_for(struct wimm_kv_server *s, struct raw_tcp_peer *r, int ms)
{
	for (int64_t until = now_ms() + ms; now_ms() < until;) {
		wimm_kv_server_run(s, 1);
		if (r)
			raw_tcp_peer_progress(r);
	}
}

int main(int argc, char **argv)
{
	static unsigned char src[8192], *before;
	static struct raw_tcp_peer r;
	struct wimm_kv_server *s = NULL;
	char addr[64];
	int cmd[2], rep[2];

	if (argc != 2 || strcmp(argv[1], "ofi:tcp") != 0) {
		fprintf(stderr, "usage: kv_test_raw ofi:tcp (libfabric shm does not enforce "
				"windows at the target)\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	struct wimm_kv_server_attr a = {.fabric = argv[1],
					.addr = "127.0.0.1:0",
					.memory = 4 * ARENA,
					.max_clients = 4,
					.liveness_ms = 30000,
					.log = say};
	int rc = wimm_kv_server_new(&a, &s);
	if (rc < 0) {
		fprintf(stderr, "server: %s\n", wimm_kv_strerror(rc));
		return 1;
	}
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", wimm_kv_server_port(s));
	if (pipe(cmd) || pipe(rep))
		return 1;
	fflush(stderr);
	pid_t pid = fork();
	if (pid == 0) {
		close(cmd[1]);
		close(rep[0]);
		_exit(victim(addr, cmd[0], rep[1]));
	}
	close(cmd[0]);
	close(rep[1]);
	fcntl(rep[0], F_SETFL, O_NONBLOCK);
	char b = 0;
	for (int64_t until = now_ms() + 20000; b != 'p' && now_ms() < until;) {
		wimm_kv_server_run(s, 1);
		if (read(rep[0], &b, 1) == 0)
			break;
	}
	CHECK(b == 'p', "the honest client did not put its value");
	if (b != 'p')
		goto out_kill;

	rc = raw_tcp_peer_open(&r, src, sizeof(src), NULL, 0);
	if (!rc)
		rc = raw_tcp_peer_connect(&r, "127.0.0.1", wimm_kv_server_port(s), NULL, 0, pump, s,
					  10000);
	CHECK(rc == 0, "raw tcp peer: %s", fi_strerror(rc < 0 ? -rc : rc));
	if (rc)
		goto out_kill;
	uintptr_t pool = (uintptr_t)s->pool, mine = (uintptr_t)r.srv.window_addr;
	CHECK(r.srv.window_len == s->arena_len && mine >= pool &&
		  mine + r.srv.window_len <= pool + s->pool_len,
	      "the raw client's window: %llu bytes at pool + %lld",
	      (unsigned long long)r.srv.window_len, (long long)(mine - pool));
	pump_for(s, &r, 200);
	before = malloc(s->pool_len);
	if (!before)
		goto out_kill;
	memcpy(before, s->pool, s->pool_len);

	/* The control: 256 bytes at the start of its own arena land. */
	memset(src, 0x5a, sizeof(src));
	CHECK(raw_tcp_peer_write(&r, mine, 256, 0, 0) == 0, "own write not posted");
	pump_for(s, &r, 300);
	CHECK(s->pool[mine - pool] == 0x5a && s->pool[mine - pool + 255] == 0x5a,
	      "its write inside its own arena did not land (%d posted, %d done, %d failed)",
	      r.posted, r.done, r.failed);
	memcpy(before + (mine - pool), s->pool + (mine - pool), s->arena_len);

	/* Outside: every other arena's start (the honest client's among
	 * them), across both ends of its window, a doorbell into another
	 * arena. */
	memset(src, 0xee, sizeof(src));
	for (size_t k = 0; k < s->narenas; k++) {
		uintptr_t at = pool + k * s->arena_len;
		if (at != mine)
			raw_tcp_peer_write(&r, at, 4096, 0, 0);
	}
	if (mine > pool)
		raw_tcp_peer_write(&r, mine - 2048, 4096, 0, 0);
	if (mine + r.srv.window_len < pool + s->pool_len) {
		raw_tcp_peer_write(&r, mine + r.srv.window_len - 2048, 4096, 0, 0);
		raw_tcp_peer_write(&r, mine + r.srv.window_len, 512, 1, KV_WIMM(0, 0, 1));
	}
	pump_for(s, &r, 1500);
	size_t changed = 0;
	for (size_t i = 0; i < s->pool_len; i++)
		changed += s->pool[i] != before[i];
	printf("raw peer: %d posted, %d completed, %d failed; pool bytes changed outside its "
	       "arena: %zu\n",
	       r.posted, r.done, r.failed, changed);
	CHECK(changed == 0, "%zu bytes of the pool outside the raw client's arena changed",
	      changed);
	raw_tcp_peer_close(&r);

	/* The honest client reads its value back whole. */
	close(cmd[1]);
	cmd[1] = -1;
	int status = -1;
	for (int64_t until = now_ms() + 20000; now_ms() < until;) {
		wimm_kv_server_run(s, 1);
		if (waitpid(pid, &status, WNOHANG) == pid)
			break;
	}
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "the honest client's value did not survive (status %d)", status);
	pid = -1;
out_kill:
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	free(before);
	wimm_kv_server_delete(&s);
	printf("kv_test_raw ofi:tcp: %s\n", fails ? "FAILED" : "pass");
	return fails ? 1 : 0;
}
