/* Shared declarations of the wimm command-line tool.
 *
 * The tool is split by concern: wimm.c dispatches subcommands, options.c
 * parses benchmark flags, endpoint.c wraps one side of a connection (its own
 * context, window and source buffers, event backlog), messages.c implements
 * the four notification strategies, pingpong.c / rate.c the two benchmarks,
 * run.c wires server, client and --self together, report.c prints results.
 */
#ifndef WIMM_CLI_H
#define WIMM_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <wimm.h>

#define CLI_DEFAULT_PORT 7471
#define CLI_DEFAULT_DEPTH 64
/* rate without -d: the fabric's deepest window up to this. A stream's sender
 * waits for credits once a window is out; on a shared host that wait can be
 * a scheduler time slice, so 64 in flight cost ofi:tcp most of its rate
 * (docs/performance.md). perftest's ib_send_bw keeps 512 receives posted. */
#define CLI_RATE_DEPTH 256u
/* ... but never more receive-buffer memory than this for send_imm. */
#define CLI_RATE_WINDOW_BYTES (64u << 20)
#define CLI_DEFAULT_TIMEOUT_S 30
#define CLI_PINGPONG_ITERS 10000u
#define CLI_RATE_ITERS 100000u
#define CLI_BULK_ITERS 3u
#define CLI_BULK_SIZE (64u << 20)
#define CLI_BULK_CHUNK (64u << 10)

enum bench_mode {
	BENCH_PINGPONG,
	BENCH_RATE,
	BENCH_BULK, /* one large transfer in chunks (bulk.c) */
};

/* How the receiver learns that a message has arrived (the source article
 * compares these). */
enum bench_op {
	OP_WRITE_IMM,  /* one write-with-imm: data + doorbell */
	OP_WRITE_SEND, /* plain write, then a 0-byte send-with-imm as doorbell */
	OP_SEND_IMM,   /* two-sided send into a pre-posted receive buffer */
	OP_WRITE_POLL, /* plain write; the receiver polls its last byte */
	/* plain write, then a fetch-and-add of 1 on a signal word the
	 * receiver polls (NCCL's GPU-initiated networking on InfiniBand) */
	OP_WRITE_ATOMIC,
};

struct bench_opts {
	enum bench_mode mode;
	const char *fabric;
	enum bench_op op;
	size_t size;
	uint32_t iters;
	uint32_t warmup;
	int port;
	int port_given;
	int self;
	int json;
	int stats; /* print each context's counters (wimm_ctx_stats) at the end */
	enum wimm_wait_mode wait_mode;
	uint32_t depth;
	int depth_given; /* -d: else the mode's default (ep_open picks rate's) */
	int timeout_ms;	 /* longest silence from the peer; -1: wait forever */
	int timeout_given;
	const char *host;  /* NULL: server */
	double pace_per_s; /* rate: offered messages per second; 0: as fast as credits allow */
	size_t chunk;	   /* bulk: bytes per write */
	int notify_each;   /* bulk: a doorbell per chunk; 0: plain writes, one doorbell last */
	int memory_reg;	   /* --memory reg: malloc + wimm_mr_reg, not wimm_mr_alloc */
	int post_call;	   /* --post call: each message by its operation's call, not prepared */
};

/* ------------------------------------------------------------ options.c */

const char *bench_op_name(enum bench_op op);
const char *bench_mode_name(enum bench_mode mode);
const char *bench_wait_name(enum wimm_wait_mode mode);
/* Every command and flag with its default (wimm --help). */
void cli_usage(FILE *f);
/* One command's flags with their defaults (wimm COMMAND --help). */
void cli_usage_command(FILE *f, const char *command);
/* Parse argv of `wimm pingpong|rate`; on a bad flag prints usage and exits
 * with status 2, on -h prints usage and exits 0. */
void bench_parse(enum bench_mode mode, int argc, char **argv, struct bench_opts *out);

/* ------------------------------------------------------------ endpoint.c */

#define EP_BACKLOG 256

/* CPU time the receiver spent over the timed part of a run: getrusage of the
 * process (of the thread with --self), so it counts the provider's threads. */
struct rx_cpu {
	int measured;
	double user_s;
	double sys_s;
	uint32_t doorbells; /* the notifications it waited for meanwhile */
};

/* One side of a benchmark: a context of its own (contexts are
 * single-threaded), a receive window, a source buffer and the events polled
 * but not yet consumed. */
struct endpoint {
	/* --self puts the server's endpoint and the client's next to each other
	 * in the heap: a cache line of padding at each end keeps the two
	 * threads' hot fields (opts and ctx at the front, the backlog counters
	 * at the back) off each other's lines whatever the fields in between
	 * (measured on ofi:shm: a field added in the middle cost write_imm
	 * 0.1 us of a 0.8 us pingpong). */
	char pad_front[64];
	const struct bench_opts *opts;
	const char *role; /* "server" / "client", for messages */
	struct wimm_ctx *ctx;
	unsigned char *window;
	size_t window_len;
	unsigned char *source;
	size_t slot_len; /* the source holds two slots of this size */
	uint32_t depth;	 /* the receive window in use: -d, or its default */
	uint32_t sq_depth;
	struct wimm_mr *window_mr;
	struct wimm_mr *source_mr;
	uint64_t *result; /* write_atomic: where fetch-and-add leaves the old word */
	struct wimm_mr *result_mr;
	size_t signal_off;     /* write_atomic: the signal word in the window */
	uint64_t atomics_done; /* write_atomic: completions of our adds, reaped */
	struct wimm_listener *listener;
	struct wimm_conn *conn;
	/* The messages' operations, prepared once (msg_prepare), NULL with
	 * --post call: the message from source slot 0 and 1 (write_poll
	 * alternates), write_send's notice and the zero-length acknowledgement. */
	struct wimm_prep *prep_msg[2];
	struct wimm_prep *prep_notice;
	struct wimm_prep *prep_ack;
	struct wimm_event backlog[EP_BACKLOG];
	int backlog_head;
	int backlog_count;
	/* The peer left (WIMM_EV_DISCONNECT): events before it stay usable,
	 * waiting for more fails unless allow_disconnect is set. */
	int peer_gone;
	int peer_gone_status;
	int allow_disconnect;
	struct rx_cpu cpu; /* the receiver's CPU over the timed part (rate, bulk) */
	char pad_back[64];
};

#if defined(__GNUC__) || defined(__clang__)
#define CLI_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define CLI_PRINTF(fmt_idx, arg_idx)
#endif

/* Print "wimm: <what>: <strerror> (<name>)" and the provider's error text,
 * then end the process with status 1. ctx may be NULL. */
_Noreturn void cli_fail(struct wimm_ctx *ctx, int err, const char *fmt, ...) CLI_PRINTF(3, 4);
/* Print "wimm: <message>" and end the process with status 1. */
_Noreturn void cli_die(const char *fmt, ...) CLI_PRINTF(1, 2);

uint64_t cli_now_ns(void);

void ep_open(struct endpoint *ep, const struct bench_opts *opts, const char *role);
/* "write_imm", "read", ...: an operation's name for messages. */
const char *ep_op_name(enum wimm_op op);
/* Listen on host:port (port 0: any); returns the bound port. */
int ep_listen(struct endpoint *ep, const char *host, int port);
void ep_accept(struct endpoint *ep);
void ep_connect(struct endpoint *ep, const char *host, int port);
void ep_close(struct endpoint *ep);

/* The next completion event of the connection (WRITE_IMM, SEND_IMM or
 * SEND_DONE); errors and disconnects end the process. */
void ep_next_event(struct endpoint *ep, struct wimm_event *out);
/* One try at posting an operation from the source (write_atomic's add:
 * into the result word): the library's return code. */
static inline int ep_post_once(struct endpoint *ep, enum wimm_op op, size_t src_off, size_t dst_off,
			       size_t len, uint32_t imm, unsigned flags)
{
	switch (op) {
	case WIMM_OP_WRITE_IMM:
		return wimm_write_imm(ep->conn, ep->source_mr, src_off, dst_off, len, imm, flags);
	case WIMM_OP_WRITE:
		return wimm_write(ep->conn, ep->source_mr, src_off, dst_off, len, flags);
	case WIMM_OP_SEND_IMM:
		return wimm_send_imm(ep->conn, ep->source_mr, src_off, len, imm, flags);
	case WIMM_OP_FETCH_ADD:
		/* write_atomic's signal: add 1 to the peer's signal word. */
		return wimm_fetch_add(ep->conn, ep->result_mr, 0, dst_off, 1, flags);
	case WIMM_OP_READ:
	case WIMM_OP_CMP_SWAP:
		break;
	}
	return WIMM_E_INVAL;
}
/* After a first try that returned rc: retry while the fabric says
 * WIMM_E_AGAIN, driving progress; any other error ends the process. */
void ep_post_retry(struct endpoint *ep, enum wimm_op op, size_t src_off, size_t dst_off, size_t len,
		   uint32_t imm, unsigned flags, int rc);
/* Post one operation, retrying while the fabric says WIMM_E_AGAIN. Inline:
 * a rate run posts millions, and the retry's frame (its clock and failure
 * paths) cost every message 43 instructions when it was the only way in
 * (docs/performance.md, section 16). */
static inline void ep_post(struct endpoint *ep, enum wimm_op op, size_t src_off, size_t dst_off,
			   size_t len, uint32_t imm, unsigned flags)
{
	int rc = ep_post_once(ep, op, src_off, dst_off, len, imm, flags);
	if (__builtin_expect(rc != 0, 0))
		ep_post_retry(ep, op, src_off, dst_off, len, imm, flags, rc);
}
/* ep_post through a prepared operation p (NULL: ep_post itself); the
 * arguments are p's, for the retry, which takes the operation's own call. */
static inline void ep_post_prep(struct endpoint *ep, struct wimm_prep *p, enum wimm_op op,
				size_t src_off, size_t dst_off, size_t len, uint32_t imm,
				unsigned flags)
{
	int rc = p ? wimm_prep_post(p, imm, flags)
		   : ep_post_once(ep, op, src_off, dst_off, len, imm, flags);
	if (__builtin_expect(rc != 0, 0))
		ep_post_retry(ep, op, src_off, dst_off, len, imm, flags, rc);
}
/* Spin until window[off] == want, driving progress. */
void ep_wait_byte(struct endpoint *ep, size_t off, unsigned char want);
/* Spin until the 64-bit word at window[off] == want (a larger value ends
 * the process: a count went wrong), driving progress. */
void ep_wait_word(struct endpoint *ep, size_t off, uint64_t want);
/* At the end of a run, where a departing peer is no failure: the next
 * event, or 0 if the peer has left. */
int ep_last_event(struct endpoint *ep, struct wimm_event *out);

/* ------------------------------------------------------------ messages.c */

/* Prepare the strategy's operations on ep->conn (unless --post call);
 * msg_unprepare deletes them. */
void msg_prepare(struct endpoint *ep);
void msg_unprepare(struct endpoint *ep);
/* Send message number `seq` with the strategy of opts->op; flags apply to
 * the operation that completes the message. */
void msg_send(struct endpoint *ep, uint32_t seq, unsigned flags);
/* Wait for message number `seq` and check it (imm, length). */
void msg_receive(struct endpoint *ep, uint32_t seq);
/* A zero-length write-with-imm doorbell (acknowledgements) and its check. */
void msg_send_ack(struct endpoint *ep, uint32_t imm, unsigned flags);
void msg_receive_ack(struct endpoint *ep, uint32_t imm);
/* The end of a run: the client says goodbye only after it has received
 * everything, and the server closes only after the goodbye, so no close
 * can overtake a message still on its way. */
void msg_finish_client(struct endpoint *ep);
void msg_finish_server(struct endpoint *ep);
/* write_poll in rate mode: the round's messages share one flag value
 * (bulk: n of them) and the last one carries a flag of its own, the one
 * the receiver waits for. */
void msg_send_poll_bulk(struct endpoint *ep, uint32_t n);
void msg_send_poll_last(struct endpoint *ep, uint32_t round);
void msg_receive_poll_round(struct endpoint *ep, uint32_t round);
/* write_atomic in rate mode: the receiver waits for the signal word to
 * count every message up to `upto`. */
void msg_receive_atomic_upto(struct endpoint *ep, uint32_t upto);

/* ------------------------------------------------- pingpong.c / rate.c */

struct bench_result {
	char fabric[64];
	uint32_t count;
	uint64_t elapsed_ns;
	uint32_t depth;	  /* the client's receive window */
	uint64_t *rtt_ns; /* pingpong: one round trip per timed iteration; bulk: per transfer */
	struct rx_cpu rx; /* --self: the server thread's CPU */
};

void pingpong_server(struct endpoint *ep);
void pingpong_client(struct endpoint *ep, struct bench_result *res);
void rate_server(struct endpoint *ep);
void rate_client(struct endpoint *ep, struct bench_result *res);
/* Start and stop the receiver's CPU clock around its timed part. */
void rx_cpu_start(const struct endpoint *ep, struct rx_cpu *mark);
void rx_cpu_stop(struct endpoint *ep, const struct rx_cpu *mark, uint32_t doorbells);
/* The receiver's CPU as one JSON object on stdout (a server run with --json). */
void rx_cpu_report(const struct endpoint *ep);

/* ------------------------------------------------------------- bulk.c */

/* One transfer of -s bytes in --chunk writes, then the receiver's single
 * acknowledgement; -n timed transfers after -w untimed ones. */
void bulk_server(struct endpoint *ep);
void bulk_client(struct endpoint *ep, struct bench_result *res);
void bulk_report(const struct bench_opts *opts, const struct bench_result *res);

/* ------------------------------------------------------------ selfaddr.c */

/* The address --self listens on and connects to when no HOST is given:
 * 127.0.0.1 for libfabric, the IP of the netdev under the device for
 * "verbs:<dev>" (buf holds it). Ends the process, saying what to do, when
 * the device has none. */
const char *cli_self_host(const char *fabric, char *buf, size_t len);

/* ---------------------------------------------------------------- run.c */

int bench_run(const struct bench_opts *opts);

/* ------------------------------------------------------------- report.c */

void report_result(const struct bench_opts *opts, const struct bench_result *res);

#endif /* WIMM_CLI_H */
