/* One side of a benchmark connection: set-up, tear-down, events, posting.
 *
 * Every failure ends the process with status 1 after a message naming what
 * failed: a benchmark that reports numbers after an error would lie.
 */
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

/* Windows are never smaller than this: a zero-byte region cannot be
 * registered, and 64 bytes keeps the flag of write_poll in one cache line. */
#define MIN_BUFFER 64
#define BUFFER_ALIGN 4096
/* Empty polls between two looks at the clock (the watchdog costs nothing on
 * the hot path). */
#define SPINS_PER_CLOCK_CHECK 1024

static void vreport(const char *fmt, va_list ap)
{
	fputs("wimm: ", stderr);
	vfprintf(stderr, fmt, ap);
}

static _Noreturn void end_process(void)
{
	/* _Exit, not exit: in --self mode the other thread may be inside the
	 * library, and running its destructors under it could crash. */
	fflush(stdout);
	fflush(stderr);
	_Exit(1);
}

_Noreturn void cli_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport(fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	end_process();
}

/* What a user can do about each error the library reports to the tool. */
static const char *advice_for(int err)
{
	switch (err) {
	case WIMM_E_NOFABRIC:
		return "run `wimm info` for the fabrics this build has and this machine offers;"
		       " -f takes auto, ofi:tcp, ofi:shm or verbs:<device>";
	case WIMM_E_NODEV:
		return "run `wimm info` for the devices and providers present; for Soft-RoCE"
		       " create one first (rdma link add rxe0 type rxe netdev <interface>)";
	case WIMM_E_ADDR:
		return "give HOST as an IP address or a resolvable name; on verbs it must be an"
		       " address of the RDMA device's network interface";
	case WIMM_E_UNREACHABLE:
		return "start the server first (the same command with the same -f, -o, -s, -p and"
		       " no HOST) and check that HOST and -p point at it";
	case WIMM_E_TIMEDOUT:
		return "the peer did not answer in time: is it running, with the same -f and -p?"
		       " --timeout SEC waits longer";
	case WIMM_E_PROTO:
	case WIMM_E_VERSION:
		return "the peer is not a wimm of this version: run the same wimm on both ends";
	case WIMM_E_DISCONNECTED:
		return "the peer closed or died: look at its output for the reason";
	case WIMM_E_NOMEM:
		return "registering memory needs locked memory: raise the limit (ulimit -l"
		       " unlimited) or use a smaller -s";
	case WIMM_E_TOOBIG:
		return "use a smaller -s: `wimm info` shows the fabric's max_msg";
	case WIMM_E_AGAIN:
		return "the completion queue budget is exhausted: use a smaller -d";
	case WIMM_E_NORECV:
	case WIMM_E_TRUNC:
	case WIMM_E_BOUNDS:
	case WIMM_E_NOWINDOW:
		return "run both ends with the same -o and -s";
	case WIMM_E_NOTSUP:
		return "the provider's message above says what this fabric lacks: `wimm info`"
		       " lists the fabrics wimm runs on; write_atomic needs atomics (ofi:shm,"
		       " ipc, verbs:<device>)";
	case WIMM_E_PERM:
		return "write_atomic needs a fabric with atomics (ofi:shm, ipc, verbs:<device>) and"
		       " both ends run with -o write_atomic";
	case WIMM_E_PROVIDER:
		return "the provider's message above says what failed (a port in use: pick"
		       " another -p; permission denied: run as root or raise ulimit -l)";
	default:
		return "this is a bug in wimm or its fabric: please report the command and this"
		       " output";
	}
}

_Noreturn void cli_fail(struct wimm_ctx *ctx, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport(fmt, ap);
	va_end(ap);
	fprintf(stderr, ": %s (%s)", wimm_strerror(err), wimm_err_name(err));
	/* With no context (wimm_ctx_open failed) this is the thread's last
	 * context-less failure: why the fabric could not be opened. */
	const char *text = NULL;
	int prov_err = wimm_provider_error(ctx, &text);
	/* The provider's code only when it gave one: wimm's own reasons have none. */
	if (prov_err != 0)
		fprintf(stderr, "; provider: %s (%d)", text != NULL ? text : "", prov_err);
	else if (text != NULL && text[0] != '\0')
		fprintf(stderr, "; provider: %s", text);
	fprintf(stderr, "\nwimm: what to do: %s\n", advice_for(err));
	end_process();
}

uint64_t cli_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const char *ep_op_name(enum wimm_op op)
{
	switch (op) {
	case WIMM_OP_WRITE_IMM:
		return "write_imm";
	case WIMM_OP_WRITE:
		return "write";
	case WIMM_OP_SEND_IMM:
		return "send_imm";
	case WIMM_OP_READ:
		return "read";
	case WIMM_OP_FETCH_ADD:
		return "fetch_add";
	case WIMM_OP_CMP_SWAP:
		return "cmp_swap";
	}
	return "operation";
}

static void *alloc_buffer(size_t len)
{
	size_t rounded = (len + BUFFER_ALIGN - 1) / BUFFER_ALIGN * BUFFER_ALIGN;
	void *p = aligned_alloc(BUFFER_ALIGN, rounded);
	if (p == NULL)
		cli_die("cannot allocate %zu bytes: use a smaller -s", rounded);
	memset(p, 0, rounded);
	return p;
}

/* Receive buffers per op. send_imm: exactly the message (1 byte when it is
 * empty, since 0 means "no buffers"). write_send: its doorbell is a 0-byte
 * send, which still needs a posted receive to land in; the buffer is never
 * filled, so it gets the smallest legal size and the data goes by write. */
static uint32_t recv_size_for(const struct bench_opts *opts)
{
	switch (opts->op) {
	case OP_SEND_IMM:
		return opts->size > 0 ? (uint32_t)opts->size : 1;
	case OP_WRITE_SEND:
		return 1;
	case OP_WRITE_IMM:
	case OP_WRITE_POLL:
	case OP_WRITE_ATOMIC:
		break;
	}
	return 0;
}

/* rate's default window before the fabric's limit: CLI_RATE_DEPTH, fewer
 * when send_imm's receive buffers would pass CLI_RATE_WINDOW_BYTES (never
 * fewer than the other modes' default). */
static uint32_t rate_depth_bound(const struct bench_opts *opts)
{
	if (opts->mode != BENCH_RATE)
		return opts->depth;
	uint32_t slot = recv_size_for(opts);
	uint32_t fits = slot > 0 ? CLI_RATE_WINDOW_BYTES / slot : CLI_RATE_DEPTH;
	if (fits > CLI_RATE_DEPTH)
		fits = CLI_RATE_DEPTH;
	return fits > CLI_DEFAULT_DEPTH ? fits : CLI_DEFAULT_DEPTH;
}

/* The window without -d, within what the fabric allows. */
static uint32_t default_depth(const struct bench_opts *opts, uint32_t max_depth)
{
	uint32_t depth = rate_depth_bound(opts);
	return depth < max_depth ? depth : max_depth;
}

/* write_send posts two operations per message: room for a full receive
 * window of them, within what the fabric allows. */
static uint32_t sq_depth_for(uint32_t depth, uint32_t max_depth)
{
	uint32_t wanted = 2 * depth > 128 ? 2 * depth : 128;
	return wanted < max_depth ? wanted : max_depth;
}

static struct wimm_conn_attr conn_attr(const struct endpoint *ep)
{
	return (struct wimm_conn_attr){
	    .window = ep->window_mr,
	    .rx_depth = ep->depth,
	    .recv_size = recv_size_for(ep->opts),
	    .sq_depth = ep->sq_depth,
	};
}

/* A buffer for the window or the source: wimm's own memory (the default:
 * on ipc a window in it is mapped into the writer, as ucx_perftest maps the
 * memory it allocates) or malloc'd and registered (--memory reg). */
static unsigned char *ep_region(struct endpoint *ep, size_t len, unsigned access, const char *what,
				struct wimm_mr **mr)
{
	int reg = ep->opts->memory_reg;
	unsigned char *buf = reg ? alloc_buffer(len) : NULL;
	int rc = reg ? wimm_mr_reg(ep->ctx, buf, len, access, mr)
		     : wimm_mr_alloc(ep->ctx, len, access, mr);

	if (rc < 0)
		cli_fail(ep->ctx, rc, "%s: %s the %zu-byte %s", ep->role,
			 reg ? "register" : "allocate", len, what);
	return reg ? buf : wimm_mr_addr(*mr);
}

void ep_open(struct endpoint *ep, const struct bench_opts *opts, const char *role)
{
	memset(ep, 0, sizeof(*ep));
	ep->opts = opts;
	ep->role = role;

	/* One connection per context: its send queue, receive window and
	 * some slack for the library's own credit writes (rate's default
	 * window is not known before the fabric is: budget for its largest). */
	uint32_t budget = 3 * (opts->depth_given ? opts->depth : rate_depth_bound(opts)) + 256;
	struct wimm_ctx_attr attr = {
	    .cq_budget = budget > 4096 ? budget : 0,
	    /* A spinning benchmark never sleeps: like fi_pingpong's and
	     * perftest's default, it needs no wake-up signalling. */
	    .flags = opts->wait_mode == WIMM_WAIT_SPIN ? WIMM_CTX_POLLING : 0,
	};
	int rc = wimm_ctx_open(opts->fabric, &attr, &ep->ctx);
	if (rc < 0)
		cli_fail(NULL, rc, "%s: open fabric '%s'", role, opts->fabric);
	struct wimm_fabric_limits limits;
	rc = wimm_ctx_limits(ep->ctx, &limits);
	if (rc < 0)
		cli_fail(ep->ctx, rc, "%s: limits of fabric %s", role, wimm_ctx_fabric(ep->ctx));
	if (opts->depth_given && opts->depth > limits.max_depth)
		cli_die("%s: -d %u is deeper than %s allows: use -d %u or less", role, opts->depth,
			wimm_ctx_fabric(ep->ctx), limits.max_depth);
	ep->depth = opts->depth_given ? opts->depth : default_depth(opts, limits.max_depth);
	ep->sq_depth = sq_depth_for(ep->depth, limits.max_depth);

	ep->window_len = opts->size > MIN_BUFFER ? opts->size : MIN_BUFFER;
	ep->slot_len = ep->window_len;
	/* write_atomic: the signal word in a cache line of its own after the
	 * data, so the receiver's polling does not share a line with it. */
	ep->signal_off = (opts->size + 63) / 64 * 64;
	if (opts->op == OP_WRITE_ATOMIC)
		ep->window_len = ep->signal_off + 64;
	unsigned window_access = WIMM_REMOTE_WRITE;
	if (opts->op == OP_WRITE_ATOMIC)
		window_access |= WIMM_REMOTE_ATOMIC;
	ep->window = ep_region(ep, ep->window_len, window_access, "window", &ep->window_mr);
	ep->source = ep_region(ep, 2 * ep->slot_len, WIMM_LOCAL, "source", &ep->source_mr);
	/* A recognisable payload; write_poll overwrites only the flag byte. */
	for (size_t i = 0; i < 2 * ep->slot_len; i++)
		ep->source[i] = (unsigned char)(i & 0x7f);

	if (opts->op == OP_WRITE_ATOMIC) {
		ep->result = alloc_buffer(sizeof(*ep->result));
		rc = wimm_mr_reg(ep->ctx, ep->result, sizeof(*ep->result), WIMM_LOCAL,
				 &ep->result_mr);
		if (rc < 0)
			cli_fail(ep->ctx, rc, "%s: register the atomic result word", role);
	}
}

static void format_addr(char *buf, size_t len, const char *host, int port)
{
	if (strchr(host, ':') != NULL && host[0] != '[')
		snprintf(buf, len, "[%s]:%d", host, port);
	else
		snprintf(buf, len, "%s:%d", host, port);
}

int ep_listen(struct endpoint *ep, const char *host, int port)
{
	char addr[300];
	format_addr(addr, sizeof(addr), host, port);
	struct wimm_conn_attr attr = conn_attr(ep);
	int rc = wimm_listen(ep->ctx, addr, &attr, &ep->listener);
	if (rc < 0)
		cli_fail(ep->ctx, rc, "%s: listen on %s", ep->role, addr);
	return wimm_listener_port(ep->listener);
}

/* Catch a server and client run with different -o / -s before the first
 * post fails with a less telling error. */
static void check_peer(const struct endpoint *ep)
{
	struct wimm_conn_info info;
	int rc = wimm_conn_info(ep->conn, &info);
	if (rc < 0)
		cli_fail(ep->ctx, rc, "%s: connection info", ep->role);
	size_t size = ep->opts->size;
	enum bench_op op = ep->opts->op;
	int writes = op != OP_SEND_IMM;
	if (writes && size > 0 && info.peer_window_len < size)
		cli_die("%s: the peer's window has %zu bytes, -s is %zu (same -s on both ends?)",
			ep->role, info.peer_window_len, size);
	if (op == OP_WRITE_ATOMIC && (info.peer_window_len < ep->signal_off + sizeof(uint64_t) ||
				      !(info.peer_window_access & WIMM_REMOTE_ATOMIC)))
		cli_die("%s: the peer's window has no signal word for write_atomic (same -o and -s"
			" on both ends?)",
			ep->role);
	if ((op == OP_SEND_IMM || op == OP_WRITE_SEND) &&
	    info.peer_recv_size < recv_size_for(ep->opts))
		cli_die("%s: the peer posts %u-byte receive buffers, %s needs %u (same -o and -s"
			" on both ends?)",
			ep->role, info.peer_recv_size, bench_op_name(op), recv_size_for(ep->opts));
}

void ep_accept(struct endpoint *ep)
{
	/* A server started on its own waits for its client as long as it
	 * takes, like perftest's, unless told otherwise. */
	const struct bench_opts *opts = ep->opts;
	int timeout_ms = opts->self || opts->timeout_given ? opts->timeout_ms : -1;
	int rc;
	for (;;) {
		rc = wimm_accept(ep->listener, timeout_ms, &ep->conn);
		if (rc == 0)
			break;
		/* A malformed request is rejected and the listener stays
		 * usable: wait for a proper client. */
		if (rc == WIMM_E_PROTO || rc == WIMM_E_VERSION) {
			fprintf(stderr, "wimm: %s: rejected a connection request: %s (%s)\n",
				ep->role, wimm_strerror(rc), wimm_err_name(rc));
			continue;
		}
		cli_fail(ep->ctx, rc, "%s: accept a connection", ep->role);
	}
	/* One client per run. A context with a live listener also looks for
	 * connection requests when a poll comes back empty: close it so the
	 * measured loop polls only the connection. */
	rc = wimm_listener_delete(&ep->listener);
	if (rc < 0)
		cli_fail(ep->ctx, rc, "%s: close the listener", ep->role);
	check_peer(ep);
	msg_prepare(ep);
}

void ep_connect(struct endpoint *ep, const char *host, int port)
{
	char addr[300];
	format_addr(addr, sizeof(addr), host, port);
	struct wimm_conn_attr attr = conn_attr(ep);
	int rc = wimm_connect(ep->ctx, addr, &attr, ep->opts->timeout_ms, &ep->conn);
	if (rc < 0)
		cli_fail(ep->ctx, rc, "%s: connect to %s", ep->role, addr);
	check_peer(ep);
	msg_prepare(ep);
}

/* The context's counters, one labelled line each (wimm rate --stats). */
static void ep_print_stats(const struct endpoint *ep)
{
	struct wimm_ctx_stats st;

	if (wimm_ctx_stats(ep->ctx, &st))
		return;
	const struct wimm_conn_stats *t = &st.total;
	fprintf(stderr,
		"%s stats: doorbells in %llu out %llu, bytes in %llu out %llu, ops %llu, "
		"credit stalls %llu (%.3f ms waited), credit returns %llu, heartbeats out %llu "
		"in %llu, errors %llu, events %llu, connections %llu open / %llu accepted / %llu "
		"made, CQ %u of %u reserved\n",
		ep->role, (unsigned long long)t->doorbells_in, (unsigned long long)t->doorbells_out,
		(unsigned long long)t->bytes_in, (unsigned long long)t->bytes_out,
		(unsigned long long)t->ops_out, (unsigned long long)t->credit_stalls,
		(double)t->credit_stall_ns / 1e6, (unsigned long long)t->credit_returns,
		(unsigned long long)t->heartbeats_out, (unsigned long long)t->heartbeats_in,
		(unsigned long long)t->errors, (unsigned long long)st.events,
		(unsigned long long)st.conns_open, (unsigned long long)st.accepted,
		(unsigned long long)st.connected, st.cq_reserved, st.cq_capacity);
}

void ep_close(struct endpoint *ep)
{
	if (ep->opts->stats && ep->ctx)
		ep_print_stats(ep);
	msg_unprepare(ep);
	int rc = wimm_conn_delete(&ep->conn);
	if (rc < 0)
		cli_fail(ep->ctx, rc, "%s: close the connection", ep->role);
	rc = wimm_listener_delete(&ep->listener);
	if (rc < 0)
		cli_fail(ep->ctx, rc, "%s: close the listener", ep->role);
	rc = wimm_mr_dereg(&ep->window_mr);
	if (rc == 0)
		rc = wimm_mr_dereg(&ep->source_mr);
	if (rc == 0)
		rc = wimm_mr_dereg(&ep->result_mr);
	if (rc < 0)
		cli_fail(ep->ctx, rc, "%s: deregister memory", ep->role);
	rc = wimm_ctx_close(&ep->ctx);
	if (rc < 0)
		cli_fail(NULL, rc, "%s: close the context", ep->role);
	if (ep->opts->memory_reg) {
		free(ep->window);
		free(ep->source);
	}
	free(ep->result);
	ep->window = NULL;
	ep->source = NULL;
	ep->result = NULL;
}

static _Noreturn void fail_event(const struct endpoint *ep, const struct wimm_event *ev)
{
	int status = ev->status != 0 ? ev->status : WIMM_E_PROVIDER;
	fprintf(stderr, "wimm: %s: %s #%llu failed: %s (%s)", ep->role, ep_op_name(ev->op),
		(unsigned long long)ev->op_seq, wimm_strerror(status), wimm_err_name(status));
	if (ev->prov_err != 0)
		fprintf(stderr, "; provider code %d", ev->prov_err);
	fprintf(stderr, "\nwimm: what to do: %s\n", advice_for(status));
	end_process();
}

/* An event the caller waits for (1), or one handled here (0): an error
 * ends the run, a departure is noted, set-up news is dropped. */
static int keep_event(struct endpoint *ep, const struct wimm_event *ev)
{
	switch (ev->type) {
	case WIMM_EV_ERROR:
		fail_event(ep, ev);
	case WIMM_EV_DISCONNECT:
		ep->peer_gone = 1;
		ep->peer_gone_status = ev->status;
		return 0;
	case WIMM_EV_CONNECT:
		/* One client per run; later requests are ignored. */
	case WIMM_EV_ESTABLISHED:
	case WIMM_EV_COUNT:
		return 0;
	case WIMM_EV_SEND_DONE:
		/* write_atomic's adds: always signaled, awaited by no one
		 * (the peer's word says the message arrived). */
		if (ev->op == WIMM_OP_FETCH_ADD) {
			ep->atomics_done++;
			return 0;
		}
		/* fall through */
	case WIMM_EV_WRITE_IMM:
	case WIMM_EV_SEND_IMM:
		return !ep->peer_gone;
	}
	return 0;
}

/* Handle the n events at ev; those the caller waits for move to the front,
 * in order. Returns how many. */
static int keep_events(struct endpoint *ep, struct wimm_event *ev, int n)
{
	int kept = 0;

	for (int i = 0; i < n; i++) {
		if (!keep_event(ep, &ev[i]))
			continue;
		if (kept != i)
			ev[kept] = ev[i];
		kept++;
	}
	return kept;
}

/* What the context has now, up to space events at dst (a failure ends
 * the run). */
static int poll_events(struct endpoint *ep, struct wimm_event *dst, int space)
{
	int n = wimm_poll(ep->ctx, dst, space);

	if (n < 0)
		cli_fail(ep->ctx, n, "%s: poll for events", ep->role);
	return n;
}

/* Take what the context has (without waiting unless `wait`) into the
 * backlog. Returns the number of events the library returned. */
static int fetch_events(struct endpoint *ep, int wait)
{
	if (ep->backlog_count == 0) {
		ep->backlog_head = 0;
	} else if (ep->backlog_head > 0 && ep->backlog_head + ep->backlog_count == EP_BACKLOG) {
		memmove(ep->backlog, ep->backlog + ep->backlog_head,
			(size_t)ep->backlog_count * sizeof(ep->backlog[0]));
		ep->backlog_head = 0;
	}
	int tail = ep->backlog_head + ep->backlog_count;
	int space = EP_BACKLOG - tail;
	if (space == 0) {
		/* Full of unconsumed events: still move the fabric along. */
		int rc = wimm_progress(ep->ctx);
		if (rc < 0)
			cli_fail(ep->ctx, rc, "%s: drive progress", ep->role);
		return 0;
	}
	struct wimm_event *dst = &ep->backlog[tail];
	int n = wait && ep->opts->wait_mode != WIMM_WAIT_SPIN
		    ? wimm_wait(ep->ctx, dst, space, ep->opts->wait_mode, ep->opts->timeout_ms)
		    : poll_events(ep, dst, space);
	if (n < 0)
		cli_fail(ep->ctx, n, "%s: poll for events", ep->role);
	ep->backlog_count += keep_events(ep, dst, n);
	return n;
}

/* Watchdog: `*silent_since` is the first time an empty streak was seen. */
static void check_silence(const struct endpoint *ep, uint64_t *silent_since, const char *waiting)
{
	if (ep->opts->timeout_ms < 0)
		return;
	uint64_t now = cli_now_ns();
	if (*silent_since == 0)
		*silent_since = now;
	else if (now - *silent_since > (uint64_t)ep->opts->timeout_ms * 1000000u)
		cli_die("%s: no progress for %d s while waiting for %s (is the peer running with"
			" the same flags? --timeout SEC waits longer)",
			ep->role, ep->opts->timeout_ms / 1000, waiting);
}

static _Noreturn void fail_peer_gone(const struct endpoint *ep, const char *waiting)
{
	int status = ep->peer_gone_status != 0 ? ep->peer_gone_status : WIMM_E_DISCONNECTED;
	cli_fail(ep->ctx, status, "%s: the peer left while we waited for %s", ep->role, waiting);
}

/* Wait until the backlog holds an event; returns 0 if instead the peer left
 * and that is allowed. */
static int fill_backlog(struct endpoint *ep, const char *waiting)
{
	uint64_t silent_since = 0;
	unsigned empty_polls = 0;
	while (ep->backlog_count == 0) {
		if (ep->peer_gone) {
			if (ep->allow_disconnect)
				return 0;
			fail_peer_gone(ep, waiting);
		}
		int n = fetch_events(ep, 1);
		if (n > 0) {
			silent_since = 0;
		} else if (ep->opts->wait_mode != WIMM_WAIT_SPIN) {
			/* wimm_wait returned 0: its timeout elapsed. */
			cli_die(
			    "%s: no event for %d s while waiting for %s (is the peer running with"
			    " the same flags? --timeout SEC waits longer)",
			    ep->role, ep->opts->timeout_ms / 1000, waiting);
		} else if (++empty_polls % SPINS_PER_CLOCK_CHECK == 0) {
			check_silence(ep, &silent_since, waiting);
		}
	}
	return 1;
}

static void pop_event(struct endpoint *ep, struct wimm_event *out)
{
	*out = ep->backlog[ep->backlog_head++];
	ep->backlog_count--;
}

void ep_next_event(struct endpoint *ep, struct wimm_event *out)
{
	/* A spinning wait with nothing queued, the case of every message of a
	 * ping-pong and of a stream: the context's events straight into the
	 * empty backlog, without fill_backlog's bookkeeping. Anything unusual
	 * (a departure, a long silence, a blocking wait) takes that path. */
	unsigned empty_polls = 0;
	while (ep->backlog_count == 0 && ep->opts->wait_mode == WIMM_WAIT_SPIN && !ep->peer_gone &&
	       empty_polls < SPINS_PER_CLOCK_CHECK) {
		int n = poll_events(ep, ep->backlog, EP_BACKLOG);
		if (n == 1) {
			/* One at a time (a ping-pong): no queue at all. */
			if (keep_event(ep, &ep->backlog[0])) {
				*out = ep->backlog[0];
				return;
			}
			continue;
		}
		ep->backlog_head = 0;
		ep->backlog_count = keep_events(ep, ep->backlog, n);
		empty_polls += n == 0;
	}
	fill_backlog(ep, "a message");
	pop_event(ep, out);
}

int ep_last_event(struct endpoint *ep, struct wimm_event *out)
{
	ep->allow_disconnect = 1;
	if (!fill_backlog(ep, "the end of the run"))
		return 0;
	pop_event(ep, out);
	return 1;
}

void ep_post_retry(struct endpoint *ep, enum wimm_op op, size_t src_off, size_t dst_off, size_t len,
		   uint32_t imm, unsigned flags, int rc)
{
	uint64_t silent_since = 0;
	unsigned refused = 0;
	for (;;) {
		if (rc == 0)
			return;
		if (rc != WIMM_E_AGAIN)
			cli_fail(ep->ctx, rc, "%s: post %s of %zu bytes", ep->role, ep_op_name(op),
				 len);
		/* No credit or a full send queue: polling lets the library
		 * reap completions and read returned credits. The events
		 * go to the backlog for later. */
		if (fetch_events(ep, 0) > 0)
			silent_since = 0;
		else
			/* Nothing came back: only the receiver can help now,
			 * and on a busy host it may be waiting for this very
			 * CPU (docs/performance.md: ofi:tcp's rate, both ends
			 * on one CPU, went from 3.4-6.1k to 9.8-52.9k msg/s).
			 * Returns at once when nothing else is runnable. */
			sched_yield();
		if (ep->peer_gone)
			fail_peer_gone(ep, "credits");
		if (++refused % SPINS_PER_CLOCK_CHECK == 0)
			check_silence(ep, &silent_since, "credits");
		rc = ep_post_once(ep, op, src_off, dst_off, len, imm, flags);
	}
}

/* Has the window at off reached want? (The fabric writes it behind the
 * compiler's back.) */
typedef int (*window_reached_fn)(const struct endpoint *ep, size_t off, uint64_t want);

static int byte_reached(const struct endpoint *ep, size_t off, uint64_t want)
{
	return *(const volatile unsigned char *)(ep->window + off) == (unsigned char)want;
}

static int word_reached(const struct endpoint *ep, size_t off, uint64_t want)
{
	uint64_t v =
	    __atomic_load_n((const uint64_t *)(const void *)(ep->window + off), __ATOMIC_RELAXED);
	if (v > want)
		cli_die("%s: the signal word counts %llu messages where %llu were due (same -o on"
			" both ends?)",
			ep->role, (unsigned long long)v, (unsigned long long)want);
	return v == want;
}

static void wait_window(struct endpoint *ep, size_t off, uint64_t want, window_reached_fn reached,
			const char *what)
{
	uint64_t silent_since = 0;
	unsigned spins = 0;
	while (!reached(ep, off, want)) {
		/* libfabric's tcp provider moves bytes only inside calls. */
		int rc = wimm_progress(ep->ctx);
		if (rc < 0)
			cli_fail(ep->ctx, rc, "%s: drive progress", ep->role);
		if (++spins % SPINS_PER_CLOCK_CHECK == 0) {
			/* Now and then look for errors and a departed peer. */
			fetch_events(ep, 0);
			if (reached(ep, off, want))
				break;
			if (ep->peer_gone)
				fail_peer_gone(ep, what);
			check_silence(ep, &silent_since, what);
		}
	}
	/* Reads of the payload must not be served from before the flag. */
	atomic_thread_fence(memory_order_acquire);
}

void ep_wait_byte(struct endpoint *ep, size_t off, unsigned char want)
{
	wait_window(ep, off, want, byte_reached, "the flag byte");
}

void ep_wait_word(struct endpoint *ep, size_t off, uint64_t want)
{
	wait_window(ep, off, want, word_reached, "the signal word");
}
