/* `wimm log append HOST,HOST,...`, `wimm log recover` and `wimm log tail
 * --ledger`: the replicated ledger of include/wimm/log.h as commands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <wimm/log.h>

#include "cli.h"
#include "log_cmd.h"

void log_hosts_add(struct log_hosts *h, const char *arg, int port)
{
	char buf[2048], *save = NULL;
	snprintf(buf, sizeof(buf), "%s", arg);
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (h->n == LOG_CMD_MAX_HOSTS)
			log_bad("more than 16 HOSTs at '%s'", t);
		log_cmd_addr(h->addr[h->n], sizeof(h->addr[0]), t, port);
		h->ptr[h->n] = h->addr[h->n];
		h->n++;
	}
}

static void close_ctxs(struct wimm_ctx **ctxs, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		wimm_ctx_close(&ctxs[i]);
}

/* Open the ledger on a context per server; NULL (said why) on failure. */
static struct wimm_log_ledger *ledger_open(const char *fabric, const struct log_hosts *h,
					   const struct append_opts *o, unsigned flags,
					   struct wimm_ctx **ctxs, const char *cmd, int *status)
{
	struct wimm_log_ledger *l;
	for (unsigned i = 0; i < h->n; i++)
		ctxs[i] = log_cmd_ctx(fabric);
	struct wimm_log_ledger_attr a = {.id = o->id,
					 .ack_quorum = o->ack_quorum,
					 .timeout_ms = o->timeout_ms,
					 .flags = flags,
					 .log = log_cmd_say,
					 .log_arg = (void *)cmd};
	int rc = wimm_log_ledger_open(ctxs, h->ptr, h->n, &a, &l);
	if (rc) {
		fprintf(stderr, "wimm: log %s: cannot open ledger %llx on %u servers: %s (%s)\n",
			cmd, (unsigned long long)o->id, h->n, wimm_strerror(rc), wimm_err_name(rc));
		close_ctxs(ctxs, h->n);
		*status = rc == WIMM_E_INVAL ? 2 : 1;
		return NULL;
	}
	return l;
}

static void say_recovered(struct wimm_log_ledger *l, uint64_t id, const char *cmd)
{
	struct wimm_log_ledger_state s;
	wimm_log_ledger_state(l, &s);
	printf("%s: ledger %llx fenced at epoch %u: settled at seq %llu, %llu entries copied, "
	       "%u of %u servers\n",
	       cmd, (unsigned long long)id, s.epoch, (unsigned long long)s.settled,
	       (unsigned long long)s.copied, s.live, s.members);
	fflush(stdout);
}

struct idle_state {
	struct wimm_log_ledger *l;
	uint64_t progress, shown;
};

/* Between stdin lines: heartbeats, and the LAC when it moved. */
static void ledger_idle(void *arg)
{
	struct idle_state *d = arg;
	struct wimm_log_ledger_state s;
	wimm_log_ledger_poll(d->l);
	wimm_log_ledger_state(d->l, &s);
	if (d->progress && s.lac != d->shown) {
		printf("committed %llu\n", (unsigned long long)s.lac);
		fflush(stdout);
		d->shown = s.lac;
	}
}

/* An append's error: its message, the exit status. */
static int append_failed(struct wimm_log_ledger *l, uint64_t id, uint64_t n, size_t len, int rc)
{
	if (rc == WIMM_E_REFUSED) {
		fprintf(stderr, "wimm: log append: ledger %llx: %s\n", (unsigned long long)id,
			wimm_log_ledger_error(l));
		return 2;
	}
	if (rc == WIMM_E_TOOBIG) {
		fprintf(stderr,
			"wimm: log append: entry %llu of %zu bytes is larger than the ring (with "
			"%u bytes of ledger header)\n",
			(unsigned long long)n + 1, len, WIMM_LOG_LEDGER_HEADER);
		return 2;
	}
	fprintf(stderr, "wimm: log append: ledger %llx: entry %llu: %s (%s) %s\n",
		(unsigned long long)id, (unsigned long long)n + 1, wimm_strerror(rc),
		wimm_err_name(rc), wimm_log_ledger_error(l));
	return 1;
}

int log_cmd_ledger_append(const char *fabric, const struct log_hosts *h, struct append_opts *o)
{
	struct wimm_ctx *ctxs[LOG_CMD_MAX_HOSTS];
	int status = 0;
	if (!o->id)
		o->id = log_gen_mix((uint64_t)getpid() << 32 ^ cli_now_ns()) | 1;
	struct wimm_log_ledger *l = ledger_open(
	    fabric, h, o, o->recover ? WIMM_LOG_LEDGER_RECOVER : 0, ctxs, "append", &status);
	if (!l)
		return status;
	if (o->recover)
		say_recovered(l, o->id, "append");
	struct idle_state idle = {.l = l, .progress = o->progress};
	struct log_lines in = {0};
	unsigned char *buf = o->gen ? malloc(o->max ? o->max : 1) : NULL;
	const unsigned char *data = NULL;
	uint64_t first = 0, seq = 0, n = 0;
	if (o->gen && !buf)
		cli_die("out of memory");
	for (;; n++) {
		size_t len;
		if (o->gen) {
			struct wimm_log_ledger_state s;
			if (n == o->gen)
				break;
			wimm_log_ledger_state(l, &s);
			len = log_gen_size(o->id, s.appended + 1, o->min, o->max);
			log_gen_fill(buf, len, o->id, s.appended + 1);
			data = buf;
		} else if (!log_next_line(&in, ledger_idle, &idle, &data, &len)) {
			break;
		}
		log_cmd_crash_point();
		int rc = wimm_log_ledger_append(l, data, len, &seq);
		if (rc) {
			status = append_failed(l, o->id, n, len, rc);
			break;
		}
		if (!first)
			first = seq;
		if (o->progress && (n + 1) % o->progress == 0)
			ledger_idle(&idle);
	}
	if (!status && seq) {
		int rc = wimm_log_ledger_wait(l, seq, log_cmd_final_wait_ms(o));
		if (rc)
			status = append_failed(l, o->id, n, 0, rc);
	}
	if (!status) {
		struct wimm_log_ledger_state s;
		wimm_log_ledger_state(l, &s);
		if (o->progress)
			printf("committed %llu\n", (unsigned long long)s.lac);
		printf(
		    "ledger %llx: appended %llu entries, seq %llu..%llu, committed %llu on %u of "
		    "%u servers (ack quorum %u, epoch %u)\n",
		    (unsigned long long)o->id, (unsigned long long)n, (unsigned long long)first,
		    (unsigned long long)seq, (unsigned long long)s.lac, s.live, s.members,
		    s.ack_quorum, s.epoch);
	}
	wimm_log_ledger_close(&l, status ? 0 : 5000);
	close_ctxs(ctxs, h->n);
	free(buf);
	free(in.buf);
	return status;
}

int log_cmd_recover(const char *fabric, const struct log_hosts *h, const struct append_opts *o)
{
	struct wimm_ctx *ctxs[LOG_CMD_MAX_HOSTS];
	int status = 0;
	struct wimm_log_ledger *l =
	    ledger_open(fabric, h, o, WIMM_LOG_LEDGER_RECOVER, ctxs, "recover", &status);
	if (!l)
		return status;
	say_recovered(l, o->id, "recover");
	int rc = wimm_log_ledger_close(&l, log_cmd_final_wait_ms(o));
	close_ctxs(ctxs, h->n);
	if (rc) {
		fprintf(stderr, "wimm: log recover: closing the ledger: %s\n", wimm_strerror(rc));
		return 1;
	}
	return 0;
}

int log_cmd_ledger_tail(const char *fabric, const struct log_hosts *h, uint64_t id, uint64_t from,
			uint64_t count)
{
	struct wimm_ctx *ctxs[LOG_CMD_MAX_HOSTS] = {0};
	struct wimm_log_reader *r[LOG_CMD_MAX_HOSTS] = {0};
	struct log_tail_state t = {.count = count, .by_seq = 1};
	unsigned open = 0;
	int status = 0;
	if (from == 0)
		log_bad("--from of a ledger counts from 1%s", "");
	/* A server that is down is left out: the quorum rule needs one. */
	for (unsigned i = 0; i < h->n; i++) {
		ctxs[i] = log_cmd_ctx(fabric);
		int rc = wimm_log_reader_open(ctxs[i], h->addr[i], 0, 3000, &r[i]);
		if (rc)
			fprintf(stderr, "wimm: log tail: %s: %s (left out)\n", h->addr[i],
				wimm_strerror(rc));
		open += rc == 0;
	}
	if (!open) {
		fprintf(stderr, "wimm: log tail: no server of the ledger answers\n");
		status = 1;
	}
	while (!status && (!count || t.printed < count)) {
		uint64_t left = count ? count - t.printed : 0;
		int n =
		    wimm_log_ledger_read(r, h->n, id, from, left > 100000 ? 100000 : (uint32_t)left,
					 log_cmd_print_entry, &t, 10000);
		if (n < 0) {
			fprintf(stderr, "wimm: log tail: ledger %llx from seq %llu: %s (%s)\n",
				(unsigned long long)id, (unsigned long long)from, wimm_strerror(n),
				wimm_err_name(n));
			status = n == WIMM_E_RANGE ? 2 : 1;
			break;
		}
		from += (uint64_t)n;
		fflush(stdout);
		if (n == 0) {
			struct timespec ts = {0, 20 * 1000000};
			nanosleep(&ts, NULL);
		}
	}
	for (unsigned i = 0; i < h->n; i++) {
		wimm_log_reader_close(&r[i]);
		wimm_ctx_close(&ctxs[i]);
	}
	return status;
}
