/* remote_log: the remote log building block (include/wimm/log.h) in one
 * process: a log server on a fresh directory in one thread, a writer and a
 * reader in the other, each with a wimm context of its own.
 *
 * Each append is ONE write-with-imm into the writer's own ring in the
 * server's memory (imm = {len:16, seq:12, flag:4}, a CRC32C trailer, a
 * wrap flag when an entry starts over at the ring's start); the server
 * learns of it from the completion, gives it a global position, writes it
 * to a segment file and fsyncs in groups. The writer can wait for either
 * acknowledgement: visible (the server took the completion) or durable (in
 * the file and fsynced). The reader gets entries back by position, every
 * CRC checked.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <wimm/log.h>

#include "common.h"

#define MAX_BODY 2000

struct run {
	const char *fabric;
	char dir[64];
	unsigned entries;
	atomic_int port, stop;
};

static void *server_main(void *arg)
{
	struct run *run = arg;
	struct wimm_ctx *ctx = ex_open(run->fabric, "server");
	struct wimm_log_server *s;
	/* A 64 KiB ring per writer: 5000 entries wrap it many times. */
	struct wimm_log_server_attr a = {.dir = run->dir, .ring_size = 64 * 1024};
	char addr[80];
	snprintf(addr, sizeof(addr), "%s:0", ex_host());
	int rc = wimm_log_server_open(ctx, addr, &a, &s);
	if (rc)
		ex_fail(ctx, rc, "server: open the log in %s", run->dir);
	atomic_store(&run->port, wimm_log_server_port(s));
	while (!atomic_load(&run->stop))
		if ((rc = wimm_log_server_run(s, 10)) < 0)
			ex_fail(ctx, rc, "server: loop");
	wimm_log_server_close(&s);
	wimm_ctx_close(&ctx);
	return NULL;
}

static uint32_t entry_bytes(unsigned i, unsigned char *buf)
{
	uint32_t len = 1 + (i * 2654435761u) % MAX_BODY;
	for (uint32_t k = 0; k < len; k++)
		buf[k] = (unsigned char)(i + k * 31);
	return len;
}

struct check {
	unsigned next;
	uint64_t bytes;
	unsigned char buf[MAX_BODY];
};

static int check_entry(void *arg, const struct wimm_log_entry *e)
{
	struct check *c = arg;
	uint32_t len = entry_bytes(c->next, c->buf);
	if (e->pos != c->next || e->seq != c->next + 1 || e->len != len ||
	    memcmp(e->data, c->buf, len) != 0)
		ex_fatal("reader: entry %u is not what was appended", c->next);
	c->next++;
	c->bytes += len;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s FABRIC [ENTRIES]   e.g. %s ofi:tcp\n", argv[0], argv[0]);
		return 2;
	}
	struct run run = {.fabric = argv[1], .entries = ex_count(argc, argv, 5000)};
	snprintf(run.dir, sizeof(run.dir), "/tmp/wimm-remote-log-%d", (int)getpid());
	pthread_t server;
	if (pthread_create(&server, NULL, server_main, &run) != 0)
		ex_fatal("cannot start the server thread");
	double give_up = ex_now() + EX_TIMEOUT_MS / 1000.0;
	while (!atomic_load(&run.port))
		if (ex_now() > give_up)
			ex_fatal("the server did not start");
	char addr[80];
	snprintf(addr, sizeof(addr), "%s:%d", ex_host(), atomic_load(&run.port));

	/* The writer: one operation per append; WIMM_LOG_WAIT rides out a full
	 * ring (space comes back as entries become durable). */
	struct wimm_ctx *ctx = ex_open(run.fabric, "writer");
	struct wimm_log_writer *w;
	int rc = wimm_log_writer_open(ctx, addr, &(struct wimm_log_writer_attr){.id = 42}, &w);
	if (rc)
		ex_fail(ctx, rc, "writer: connect");
	unsigned char buf[MAX_BODY];
	uint64_t seq = 0;
	double start = ex_now();
	for (unsigned i = 0; i < run.entries; i++) {
		uint32_t len = entry_bytes(i, buf);
		if ((rc = wimm_log_append(w, buf, len, WIMM_LOG_WAIT, &seq)) != 0)
			ex_fail(ctx, rc, "writer: append entry %u", i);
	}
	/* Too big for the ring: refused, nothing appended. */
	static unsigned char big[70000];
	if ((rc = wimm_log_append(w, big, sizeof(big), 0, NULL)) != WIMM_E_TOOBIG)
		ex_fatal("writer: a 70000-byte entry was not refused (%s)", wimm_err_name(rc));
	if ((rc = wimm_log_wait(w, seq, WIMM_LOG_DURABLE, EX_TIMEOUT_MS)) != 0)
		ex_fail(ctx, rc, "writer: wait until durable");
	double secs = ex_now() - start;
	wimm_log_writer_close(&w, EX_TIMEOUT_MS);

	/* The reader: everything back, in order, CRC32C checked. */
	struct wimm_log_reader *r;
	struct check c = {0};
	if ((rc = wimm_log_reader_open(ctx, addr, 0, EX_TIMEOUT_MS, &r)) != 0)
		ex_fail(ctx, rc, "reader: connect");
	while (c.next < run.entries)
		if ((rc = wimm_log_read(r, c.next, 0, check_entry, &c, EX_TIMEOUT_MS)) <= 0)
			ex_fail(ctx, rc, "reader: read from %u", c.next);
	struct wimm_log_stat st;
	if ((rc = wimm_log_reader_stat(r, &st, EX_TIMEOUT_MS)) != 0)
		ex_fail(ctx, rc, "reader: stat");
	wimm_log_reader_close(&r);
	/* The server first: on ofi:shm in one process the server's side of a
	 * connection touches the peer context's memory until it is closed. */
	atomic_store(&run.stop, 1);
	pthread_join(server, NULL);
	wimm_ctx_close(&ctx);
	char cmd[96];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", run.dir);
	if (system(cmd) != 0)
		fprintf(stderr, "remote_log: cannot remove %s\n", run.dir);

	if (st.entries != run.entries || st.durable != run.entries)
		ex_fatal("remote_log: the server holds %llu entries (%llu durable), not %u",
			 (unsigned long long)st.entries, (unsigned long long)st.durable,
			 run.entries);
	printf("remote_log: %s: %u entries (%llu bytes) appended in %.3f s (%.0f entries/s), "
	       "durable after %llu fsyncs, read back in order with their CRC32C\n",
	       run.fabric, run.entries, (unsigned long long)c.bytes, secs, run.entries / secs,
	       (unsigned long long)st.fsyncs);
	return 0;
}
