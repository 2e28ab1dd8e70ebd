/* `wimm log serve | append | tail | stat | bench`. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <wimm/log.h>

#include "cli.h"
#include "log_cmd.h"

static void log_usage(FILE *f)
{
	fputs("usage: wimm log serve --dir DIR [-f FABRIC] [--port P] [--host H]\n"
	      "                      [--ring BYTES] [--max-conns N] [--segment BYTES]\n"
	      "                      [--retain ENTRIES] [--shared-ring BYTES [--hole-ms MS]]\n"
	      "       wimm log append HOST[:PORT][,HOST...] [-f FABRIC] [--port P] [--id ID]\n"
	      "                      [--first-seq N] [--gen N --size S|MIN-MAX] [--visible]\n"
	      "                      [--reconnect] [--progress K] [--inband-hello]\n"
	      "                      [--ack-quorum Q] [--recover] [--timeout MS] [--shared]\n"
	      "                      (stdin lines without --gen)\n"
	      "       wimm log recover HOST,HOST... --id ID [--ack-quorum Q] [-f FABRIC]\n"
	      "                      [--timeout MS]\n"
	      "       wimm log tail HOST[:PORT] --from POS [--count N] [-f FABRIC] [--port P]\n"
	      "       wimm log tail HOST,HOST... --ledger ID [--from SEQ] [--count N]\n"
	      "       wimm log truncate HOST[:PORT] --before POS [-f FABRIC] [--port P]\n"
	      "       wimm log stat HOST[:PORT] [-f FABRIC] [--port P]\n"
	      "       wimm log bench [-f FABRIC] [-n ITERS] [--rounds R] [--spin]\n"
	      "\n"
	      "serve   the log server: segment files in DIR, a ring per writer; SIGTERM stops it\n"
	      "        (prints 'listening port=P' when ready); default port 7480.\n"
	      "        --shared-ring: also one ring all its writers share, places reserved\n"
	      "        by fetch-and-add (asked of the server on fabrics without atomics), on\n"
	      "        port P+1 (the line says shared=PORT); a place not written within\n"
	      "        --hole-ms (default 1000) while later ones are is skipped\n"
	      "append  one entry per stdin line, or N generated entries of S bytes (or a\n"
	      "        random size in MIN-MAX); waits until every entry is durable (--visible:\n"
	      "        visible); --reconnect resumes after a server restart; --progress K\n"
	      "        prints 'durable SEQ' every K entries; --inband-hello says hello with\n"
	      "        the first doorbell, as on verbs (no private data); --timeout MS: how\n"
	      "        long to wait for the server (connect, ring space, acknowledgements)\n"
	      "        before failing, default 15000 (the last wait at least 30000);\n"
	      "        --shared: append into the shared ring, HOST:PORT its port (default 7481)\n"
	      "        Several HOSTs (comma-separated or repeated): a replicated ledger, each\n"
	      "        entry committed once --ack-quorum servers (default a majority) hold it\n"
	      "        durable; --recover fences the ledger first (an older writer is refused)\n"
	      "recover fence ledger ID on its servers and settle its last entry\n"
	      "tail    one line per entry: position, length, CRC32C, writer:seq, the text if\n"
	      "        printable; follows the log until --count entries were printed; with\n"
	      "        --ledger, the ledger's committed entries from its servers (SEQ from 1)\n"
	      "truncate  delete the segment files wholly before position POS\n"
	      "stat    what the server holds and did\n"
	      "bench   append latency, visible and durable, against write + separate send\n"
	      "        and the shared ring; throughput of 1, 8 and 64 writers (rings of their\n"
	      "        own, the shared ring) and of a ledger E=3, Qa=2\n",
	      f);
}

_Noreturn void log_bad(const char *fmt, const char *arg)
{
	fputs("wimm: log: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\n", stderr);
	log_usage(stderr);
	exit(2);
}

static unsigned long long parse_num(const char *s, const char *what)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s)
		log_bad("bad number for %s", what);
	if (*end == 'K' || *end == 'k')
		v <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		v <<= 20, end++;
	if (*end)
		log_bad("bad number for %s", what);
	return v;
}

/* parse_num within [lo, hi]; `range` says the bounds in the usage error. */
static unsigned long long parse_in(const char *s, const char *what, unsigned long long lo,
				   unsigned long long hi, const char *range)
{
	unsigned long long v = parse_num(s, what);
	if (v < lo || v > hi) {
		char msg[128];
		snprintf(msg, sizeof(msg), "%s must be %s", what, range);
		log_bad("%s", msg);
	}
	return v;
}

void log_cmd_addr(char *buf, size_t len, const char *host, int port)
{
	if (strchr(host, ':') && host[0] != '[')
		snprintf(buf, len, "%s", host);
	else if (host[0] == '[' && strstr(host, "]:"))
		snprintf(buf, len, "%s", host);
	else
		snprintf(buf, len, "%s:%d", host, port);
}

struct wimm_ctx *log_cmd_ctx(const char *fabric)
{
	struct wimm_ctx *ctx;
	int rc = wimm_ctx_open(fabric, NULL, &ctx);
	if (rc)
		cli_fail(NULL, rc, "log: open fabric %s", fabric);
	return ctx;
}

void log_cmd_say(void *arg, enum wimm_log_level lvl, const char *msg)
{
	if (lvl <= WIMM_LOG_INFO)
		fprintf(stderr, "wimm: log %s: %s\n", (const char *)arg, msg);
}

/* A crash on request, for tests on ofi:shm: libfabric's shm provider takes
 * a spinlock in the peer's shared region inside its calls, and a process
 * killed while it holds one leaves the peer spinning for ever (see the
 * README's known limits). With WIMM_LOG_CRASH_ON_USR1=1 in the environment,
 * SIGUSR1 makes serve and append SIGKILL themselves between two calls into
 * the library: as abrupt as a SIGKILL (no flush, no fsync, no close). */
static volatile sig_atomic_t crash_flag;

static void on_crash(int sig)
{
	(void)sig;
	crash_flag = 1;
}

static void crash_setup(void)
{
	const char *e = getenv("WIMM_LOG_CRASH_ON_USR1");
	if (e && strcmp(e, "1") == 0) {
		struct sigaction sa = {.sa_handler = on_crash};
		sigaction(SIGUSR1, &sa, NULL);
	}
}

void log_cmd_crash_point(void)
{
	if (crash_flag)
		raise(SIGKILL);
}

/* ---------------------------------------------------------------- serve */

static volatile sig_atomic_t stop_flag;

static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static int cmd_serve(const char *fabric, int port, const char *host, struct wimm_log_server_attr *a)
{
	char addr[128];
	struct wimm_log_server *s;
	struct sigaction sa = {.sa_handler = on_stop};
	if (!a->dir)
		log_bad("serve needs --dir DIR%s", "");
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	struct wimm_ctx *ctx = log_cmd_ctx(fabric);
	a->log = log_cmd_say;
	a->log_arg = "serve";
	snprintf(addr, sizeof(addr), "%s:%d", host, port);
	int rc = wimm_log_server_open(ctx, addr, a, &s);
	if (rc == WIMM_E_PERM || rc == WIMM_E_PROTO) {
		fprintf(stderr, "wimm: log serve: cannot use directory %s (%s)\n", a->dir,
			wimm_err_name(rc));
		wimm_ctx_close(&ctx);
		return 2;
	}
	if (rc)
		cli_fail(ctx, rc, "log serve: listen on %s", addr);
	struct wimm_log_stat st;
	wimm_log_server_stat(s, &st);
	printf("listening port=%d fabric=%s dir=%s entries=%llu ring=%u", wimm_log_server_port(s),
	       wimm_ctx_fabric(ctx), a->dir, (unsigned long long)st.entries, st.ring_size);
	if (a->shared_ring)
		printf(" shared=%d shared_ring=%u", wimm_log_server_shared_port(s), a->shared_ring);
	printf("\n");
	fflush(stdout);
	while (!stop_flag) {
		log_cmd_crash_point();
		rc = wimm_log_server_run(s, 100);
		if (rc < 0 && rc != WIMM_E_AGAIN && rc != WIMM_E_TIMEDOUT) {
			fprintf(stderr, "wimm: log serve: %s (%s): stopping\n", wimm_strerror(rc),
				wimm_err_name(rc));
			break;
		}
	}
	wimm_log_server_stat(s, &st);
	int crc = wimm_log_server_close(&s);
	wimm_ctx_close(&ctx);
	fprintf(stderr, "wimm: log serve: stopped: %llu entries, %llu durable, %llu fsyncs\n",
		(unsigned long long)st.entries, (unsigned long long)st.durable,
		(unsigned long long)st.fsyncs);
	return rc < 0 && !stop_flag ? 1 : (crc ? 1 : 0);
}

/* --------------------------------------------------------------- append */

static int append_one(struct wimm_log_writer *w, const struct append_opts *o, const void *data,
		      size_t len, uint64_t n, uint64_t *seq)
{
	for (;;) {
		int rc = wimm_log_append(w, data, len, WIMM_LOG_WAIT, seq);
		if (rc == WIMM_E_DISCONNECTED && o->reconnect) {
			rc = wimm_log_writer_reconnect(w);
			if (rc == 0)
				continue;
		}
		if (rc == WIMM_E_TOOBIG) {
			struct wimm_log_writer_state ws;
			wimm_log_writer_state(w, &ws);
			fprintf(stderr,
				"wimm: log append: entry %llu of %zu bytes is larger than the ring "
				"(%u bytes, %u of them for the entry's CRC and length)\n",
				(unsigned long long)n + 1, len, ws.ring_size,
				WIMM_LOG_TRAILER + WIMM_LOG_LONG_HEADER);
			return 2;
		}
		if (rc == WIMM_E_PROTO || rc == WIMM_E_REFUSED) {
			fprintf(stderr, "wimm: log append: the server refused writer %llx: %s\n",
				(unsigned long long)o->id, wimm_log_writer_error(w));
			return 2;
		}
		if (rc) {
			fprintf(stderr, "wimm: log append: entry %llu: %s (%s) %s\n",
				(unsigned long long)n + 1, wimm_strerror(rc), wimm_err_name(rc),
				wimm_log_writer_error(w));
			return 1;
		}
		return 0;
	}
}

int log_next_line(struct log_lines *l, void (*idle)(void *), void *arg, const unsigned char **line,
		  size_t *len)
{
	for (;;) {
		unsigned char *p = l->buf ? l->buf + l->start : NULL;
		unsigned char *nl = l->len > l->start ? memchr(p, '\n', l->len - l->start) : NULL;
		if (nl || (l->eof && l->start < l->len)) {
			*line = p;
			*len = nl ? (size_t)(nl - p) : l->len - l->start;
			l->start = nl ? (size_t)(nl - l->buf) + 1 : l->len;
			return 1;
		}
		if (l->eof)
			return 0;
		if (l->start) {
			memmove(l->buf, p, l->len - l->start);
			l->len -= l->start;
			l->start = 0;
		}
		if (l->cap - l->len < 65536) {
			unsigned char *n = realloc(l->buf, l->cap * 2 + 65536);
			if (!n)
				cli_die("out of memory");
			l->buf = n;
			l->cap = l->cap * 2 + 65536;
		}
		struct pollfd pf = {.fd = 0, .events = POLLIN};
		if (poll(&pf, 1, 200) == 0) {
			idle(arg);
			continue;
		}
		ssize_t r = read(0, l->buf + l->len, l->cap - l->len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			l->eof = 1;
		else
			l->len += (size_t)r;
	}
}

static int wait_all(struct wimm_log_writer *w, const struct append_opts *o, uint64_t seq)
{
	enum wimm_log_ack lvl = o->visible ? WIMM_LOG_VISIBLE : WIMM_LOG_DURABLE;
	for (;;) {
		int rc = wimm_log_wait(w, seq, lvl, log_cmd_final_wait_ms(o));
		if (rc == WIMM_E_DISCONNECTED && o->reconnect && wimm_log_writer_reconnect(w) == 0)
			continue;
		return rc;
	}
}

static void writer_idle(void *w)
{
	wimm_log_writer_poll(w);
}

static int cmd_append(const char *fabric, const char *addr, struct append_opts *o)
{
	struct wimm_ctx *ctx = log_cmd_ctx(fabric);
	struct wimm_log_writer *w = NULL;
	if (!o->id)
		o->id = log_gen_mix((uint64_t)getpid() << 32 ^ cli_now_ns()) | 1;
	struct wimm_log_writer_attr a = {.id = o->id,
					 .first_seq = o->first_seq,
					 .timeout_ms = o->timeout_ms,
					 .flags = (o->inband ? WIMM_LOG_WRITER_INBAND_HELLO : 0) |
						  (o->shared ? WIMM_LOG_WRITER_SHARED : 0),
					 .log = log_cmd_say,
					 .log_arg = "append"};
	int rc = wimm_log_writer_open(ctx, addr, &a, &w);
	if (rc == WIMM_E_PROTO || rc == WIMM_E_REFUSED) {
		fprintf(stderr, "wimm: log append: the server at %s refused writer %llx\n", addr,
			(unsigned long long)o->id);
		wimm_ctx_close(&ctx);
		return 2;
	}
	if (rc)
		cli_fail(ctx, rc, "log append: connect to %s", addr);
	uint64_t first = 0, seq = 0, n = 0;
	unsigned char *buf = NULL;
	const unsigned char *data = NULL;
	struct log_lines in = {0};
	int status = 0;
	if (o->gen) {
		buf = malloc(o->max ? o->max : 1);
		if (!buf)
			cli_die("out of memory");
	}
	for (;; n++) {
		size_t len;
		if (o->gen) {
			if (n == o->gen)
				break;
			struct wimm_log_writer_state ws;
			wimm_log_writer_state(w, &ws);
			len = log_gen_size(o->id, ws.appended + 1, o->min, o->max);
			log_gen_fill(buf, len, o->id, ws.appended + 1);
		} else if (!log_next_line(&in, writer_idle, w, &data, &len)) {
			break;
		}
		log_cmd_crash_point();
		status = append_one(w, o, o->gen ? buf : data, len, n, &seq);
		if (status)
			break;
		if (!first)
			first = seq;
		if (o->progress && (n + 1) % o->progress == 0) {
			struct wimm_log_writer_state ws;
			wimm_log_writer_poll(w);
			wimm_log_writer_state(w, &ws);
			printf("durable %llu\n", (unsigned long long)ws.durable);
			fflush(stdout);
		}
	}
	if (!status && seq) {
		rc = wait_all(w, o, seq);
		if (rc) {
			fprintf(stderr, "wimm: log append: waiting for the acknowledgements: %s\n",
				wimm_strerror(rc));
			status = 1;
		}
	}
	if (!status) {
		struct wimm_log_writer_state ws;
		wimm_log_writer_state(w, &ws);
		if (o->progress) {
			printf("durable %llu\n", (unsigned long long)ws.durable);
		}
		printf("writer %llx: appended %llu entries, seq %llu..%llu, %s (resent %llu)\n",
		       (unsigned long long)o->id, (unsigned long long)n, (unsigned long long)first,
		       (unsigned long long)seq, o->visible ? "visible" : "durable",
		       (unsigned long long)ws.resent);
	}
	wimm_log_writer_close(&w, o->visible ? 0 : 5000);
	free(buf);
	free(in.buf);
	wimm_ctx_close(&ctx);
	return status;
}

/* ------------------------------------------------------------ tail, stat */

int log_cmd_print_entry(void *arg, const struct wimm_log_entry *e)
{
	struct log_tail_state *t = arg;
	const unsigned char *p = e->data;
	int text = 1;
	for (uint32_t i = 0; i < e->len && text; i++)
		text = (p[i] >= 0x20 && p[i] < 0x7f) || p[i] == '\t';
	printf("%llu %u %08x %llx:%llu", (unsigned long long)(t->by_seq ? e->seq : e->pos), e->len,
	       e->crc, (unsigned long long)e->writer_id, (unsigned long long)e->seq);
	if (text && e->len)
		printf(" %.*s", (int)e->len, (const char *)p);
	putchar('\n');
	t->printed++;
	return t->count && t->printed == t->count;
}

static int cmd_tail(const char *fabric, const char *addr, uint64_t from, uint64_t count)
{
	struct wimm_ctx *ctx = log_cmd_ctx(fabric);
	struct wimm_log_reader *r;
	struct log_tail_state t = {.count = count};
	int rc = wimm_log_reader_open(ctx, addr, 0, 10000, &r);
	if (rc)
		cli_fail(ctx, rc, "log tail: connect to %s", addr);
	while (!count || t.printed < count) {
		uint64_t left = count ? count - t.printed : 0;
		int n = wimm_log_read(r, from, left > 1000000 ? 1000000 : (uint32_t)left,
				      log_cmd_print_entry, &t, 10000);
		if (n == WIMM_E_RANGE) {
			fprintf(stderr, "wimm: log tail: %s\n", wimm_log_reader_error(r));
			wimm_log_reader_close(&r);
			wimm_ctx_close(&ctx);
			return 2;
		}
		if (n < 0)
			cli_fail(ctx, n, "log tail: read from position %llu",
				 (unsigned long long)from);
		from += (uint64_t)n;
		fflush(stdout);
		if (n == 0) {
			struct timespec ts = {0, 20 * 1000000};
			nanosleep(&ts, NULL);
		}
	}
	wimm_log_reader_close(&r);
	wimm_ctx_close(&ctx);
	return 0;
}

static int cmd_stat(const char *fabric, const char *addr)
{
	struct wimm_ctx *ctx = log_cmd_ctx(fabric);
	struct wimm_log_reader *r;
	struct wimm_log_stat s;
	int rc = wimm_log_reader_open(ctx, addr, 0, 10000, &r);
	if (!rc)
		rc = wimm_log_reader_stat(r, &s, 10000);
	if (rc)
		cli_fail(ctx, rc, "log stat: %s", addr);
	printf("entries %llu\nbytes %llu\ndurable %llu\nrecovered %llu\ntorn_bytes %llu\n"
	       "segments %llu\nfsyncs %llu\nduplicates %llu\nwriters %llu\nreaders %llu\n"
	       "writers_known %llu\nrefused %llu\nring_size %u\nmax_conns %u\nfirst %llu\n"
	       "shared_ring %u\nholes %llu\nlate %u\n",
	       (unsigned long long)s.entries, (unsigned long long)s.bytes,
	       (unsigned long long)s.durable, (unsigned long long)s.recovered,
	       (unsigned long long)s.torn_bytes, (unsigned long long)s.segments,
	       (unsigned long long)s.fsyncs, (unsigned long long)s.duplicates,
	       (unsigned long long)s.writers, (unsigned long long)s.readers,
	       (unsigned long long)s.writers_known, (unsigned long long)s.refused, s.ring_size,
	       s.max_conns, (unsigned long long)s.first, s.shared_ring, (unsigned long long)s.holes,
	       s.late);
	wimm_log_reader_close(&r);
	wimm_ctx_close(&ctx);
	return 0;
}

static int cmd_truncate(const char *fabric, const char *addr, uint64_t before)
{
	struct wimm_ctx *ctx = log_cmd_ctx(fabric);
	struct wimm_log_reader *r;
	uint64_t first = 0;
	int rc = wimm_log_reader_open(ctx, addr, 0, 10000, &r);
	if (!rc)
		rc = wimm_log_truncate(r, before, &first, 30000);
	if (rc)
		cli_fail(ctx, rc, "log truncate: %s", addr);
	printf("truncated: the log keeps positions from %llu on\n", (unsigned long long)first);
	wimm_log_reader_close(&r);
	wimm_ctx_close(&ctx);
	return 0;
}

/* ----------------------------------------------------------------- main */

int log_main(int argc, char **argv)
{
	enum {
		O_DIR = 256,
		O_PORT,
		O_HOST,
		O_RING,
		O_CONNS,
		O_SEG,
		O_ID,
		O_FIRST,
		O_GEN,
		O_SIZE,
		O_VISIBLE,
		O_RECONNECT,
		O_PROGRESS,
		O_FROM,
		O_COUNT,
		O_INBAND,
		O_QUORUM,
		O_RECOVER,
		O_LEDGER,
		O_BEFORE,
		O_RETAIN,
		O_TIMEOUT,
		O_SHARED_RING,
		O_HOLE_MS,
		O_SHARED
	};
	static const struct option opts[] = {{"dir", 1, NULL, O_DIR},
					     {"port", 1, NULL, O_PORT},
					     {"host", 1, NULL, O_HOST},
					     {"ring", 1, NULL, O_RING},
					     {"max-conns", 1, NULL, O_CONNS},
					     {"segment", 1, NULL, O_SEG},
					     {"id", 1, NULL, O_ID},
					     {"first-seq", 1, NULL, O_FIRST},
					     {"gen", 1, NULL, O_GEN},
					     {"size", 1, NULL, O_SIZE},
					     {"visible", 0, NULL, O_VISIBLE},
					     {"reconnect", 0, NULL, O_RECONNECT},
					     {"progress", 1, NULL, O_PROGRESS},
					     {"from", 1, NULL, O_FROM},
					     {"count", 1, NULL, O_COUNT},
					     {"help", 0, NULL, 'h'},
					     {"inband-hello", 0, NULL, O_INBAND},
					     {"ack-quorum", 1, NULL, O_QUORUM},
					     {"recover", 0, NULL, O_RECOVER},
					     {"ledger", 1, NULL, O_LEDGER},
					     {"before", 1, NULL, O_BEFORE},
					     {"retain", 1, NULL, O_RETAIN},
					     {"timeout", 1, NULL, O_TIMEOUT},
					     {"shared-ring", 1, NULL, O_SHARED_RING},
					     {"hole-ms", 1, NULL, O_HOLE_MS},
					     {"shared", 0, NULL, O_SHARED},
					     {NULL, 0, NULL, 0}};
	if (argc < 2) {
		log_usage(stderr);
		return 2;
	}
	const char *sub = argv[1];
	crash_setup();
	if (!strcmp(sub, "bench"))
		return log_bench_main(argc - 1, argv + 1);
	if (!strcmp(sub, "-h") || !strcmp(sub, "--help")) {
		log_usage(stdout);
		return 0;
	}
	const char *fabric = "auto", *host = NULL, *listen_host = "0.0.0.0";
	int port = LOG_CMD_DEFAULT_PORT, have_from = 0;
	struct wimm_log_server_attr sa = {0};
	struct append_opts ao = {.timeout_ms = LOG_CMD_DEFAULT_TIMEOUT_MS};
	uint64_t from = 0, count = 0, ledger = 0, before = 0;
	int c, have_before = 0;
	optind = 2;
	while ((c = getopt_long(argc, argv, "f:h", opts, NULL)) != -1) {
		switch (c) {
		case 'f':
			fabric = optarg;
			break;
		case O_DIR:
			sa.dir = optarg;
			break;
		case O_PORT:
			port = (int)parse_num(optarg, "--port");
			break;
		case O_HOST:
			listen_host = optarg;
			break;
		case O_RING:
			sa.ring_size = (uint32_t)parse_num(optarg, "--ring");
			break;
		case O_CONNS:
			sa.max_conns = (uint32_t)parse_num(optarg, "--max-conns");
			break;
		case O_SEG:
			sa.segment_bytes = parse_num(optarg, "--segment");
			break;
		case O_ID:
			ao.id = parse_num(optarg, "--id");
			if (!ao.id)
				log_bad("--id must not be 0%s", "");
			break;
		case O_FIRST:
			ao.first_seq = parse_num(optarg, "--first-seq");
			break;
		case O_GEN:
			ao.gen = parse_num(optarg, "--gen");
			break;
		case O_SIZE: {
			char *dash = strchr(optarg, '-');
			if (dash) {
				*dash = '\0';
				ao.min = (size_t)parse_num(optarg, "--size");
				ao.max = (size_t)parse_num(dash + 1, "--size");
			} else {
				ao.min = ao.max = (size_t)parse_num(optarg, "--size");
			}
			if (ao.min > ao.max || ao.max > (1u << 30))
				log_bad("bad --size range%s", "");
			break;
		}
		case O_VISIBLE:
			ao.visible = 1;
			break;
		case O_RECONNECT:
			ao.reconnect = 1;
			break;
		case O_PROGRESS:
			ao.progress = parse_num(optarg, "--progress");
			break;
		case O_INBAND:
			ao.inband = 1;
			break;
		case O_QUORUM:
			ao.ack_quorum = (unsigned)parse_num(optarg, "--ack-quorum");
			if (!ao.ack_quorum)
				log_bad("--ack-quorum must be at least 1%s", "");
			break;
		case O_RECOVER:
			ao.recover = 1;
			break;
		case O_LEDGER:
			ledger = parse_num(optarg, "--ledger");
			if (!ledger)
				log_bad("--ledger must not be 0%s", "");
			break;
		case O_BEFORE:
			before = parse_num(optarg, "--before");
			have_before = 1;
			break;
		case O_RETAIN:
			sa.retain = parse_num(optarg, "--retain");
			break;
		case O_SHARED_RING:
			sa.shared_ring =
			    (uint32_t)parse_in(optarg, "--shared-ring", 4096, 64u << 20,
					       "4096..64M, a multiple of 16");
			if (sa.shared_ring % 16)
				log_bad("--shared-ring must be 4096..64M, a multiple of 16%s", "");
			break;
		case O_HOLE_MS:
			sa.hole_ms =
			    (uint32_t)parse_in(optarg, "--hole-ms", 1, 600000, "1..600000");
			break;
		case O_SHARED:
			ao.shared = 1;
			if (port == LOG_CMD_DEFAULT_PORT)
				port = LOG_CMD_DEFAULT_PORT + 1;
			break;
		case O_TIMEOUT:
			ao.timeout_ms =
			    (int)parse_in(optarg, "--timeout", 1, 3600000, "1..3600000 ms");
			break;
		case O_FROM:
			from = parse_num(optarg, "--from");
			have_from = 1;
			break;
		case O_COUNT:
			count = parse_num(optarg, "--count");
			break;
		case 'h':
			log_usage(stdout);
			return 0;
		default:
			log_usage(stderr);
			return 2;
		}
	}
	/* HOSTs: comma-separated, repeated, or both. */
	struct log_hosts hs = {0};
	for (; optind < argc; optind++)
		log_hosts_add(&hs, argv[optind], port);
	host = hs.n ? hs.addr[0] : NULL;
	if (!strcmp(sub, "serve")) {
		if (host)
			log_bad("serve takes no HOST (use --host)%s", "");
		return cmd_serve(fabric, port, listen_host, &sa);
	}
	if (strcmp(sub, "append") && strcmp(sub, "tail") && strcmp(sub, "stat") &&
	    strcmp(sub, "recover") && strcmp(sub, "truncate"))
		log_bad("unknown subcommand '%s'", sub);
	if (!host)
		log_bad("%s needs HOST", sub);
	if (hs.n > 1 && strcmp(sub, "append") && strcmp(sub, "recover") && !ledger)
		log_bad("%s takes one HOST (several only with --ledger)", sub);
	if (!strcmp(sub, "recover")) {
		if (!ao.id)
			log_bad("recover needs --id ID%s", "");
		return log_cmd_recover(fabric, &hs, &ao);
	}
	if (ao.shared && (strcmp(sub, "append") || hs.n > 1 || ao.ack_quorum || ao.recover))
		log_bad("--shared is for append to one server%s", "");
	if (!strcmp(sub, "append"))
		return hs.n > 1 || ao.ack_quorum || ao.recover
			   ? log_cmd_ledger_append(fabric, &hs, &ao)
			   : cmd_append(fabric, host, &ao);
	if (!strcmp(sub, "tail")) {
		if (ledger)
			return log_cmd_ledger_tail(fabric, &hs, ledger, have_from ? from : 1,
						   count);
		if (!have_from)
			log_bad("tail needs --from POS%s", "");
		return cmd_tail(fabric, host, from, count);
	}
	if (!strcmp(sub, "truncate")) {
		if (!have_before)
			log_bad("truncate needs --before POS%s", "");
		return cmd_truncate(fabric, host, before);
	}
	return cmd_stat(fabric, host);
}
