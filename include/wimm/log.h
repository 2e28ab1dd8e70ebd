/* wimm/log.h: a remote append-only log on write-with-imm (libwimm_log).
 *
 * The source article's first scenario as a building block: writers append
 * entries into rings in the server's memory, ONE write-with-imm per entry,
 * and the server learns of each entry from its completion. On top of
 * libwimm's public API only.
 *
 * Server (struct wimm_log_server): every connection gets its own slice of
 * one registered arena as its window (so a writer cannot touch another
 * writer's ring). Entries of one writer are taken in the completion order
 * of its connection; each gets a global position (0, 1, 2, ...) in the log.
 * Taken entries go to segment files in a directory and are fsynced in
 * groups (one fsync for everything taken since the last one).
 *
 * Writer (struct wimm_log_writer): wimm_log_append() is one write-with-imm
 * of the entry into the writer's ring, imm = {len:16, seq:12, flag:4}; an
 * entry longer than 65535 wire bytes carries its length in a 4-byte header
 * (flag LONG); an entry that does not fit before the ring's end starts at 0
 * (flag WRAP: the rest of the ring is padding). Each entry carries a CRC32C
 * of its bytes. Two acknowledgement levels come back as zero-length
 * doorbells, imm = {kind:4, seq:28}: VISIBLE (the server took the
 * completion; readers can see the entry) and DURABLE (the entry is in a
 * segment file and fsynced). Ring space is reused once the entry is durable,
 * so a writer can resend whatever the server might have lost.
 *
 * Recovery: a restarted server scans its segment files, keeps every whole
 * entry (CRC32C checked) and cuts a torn tail. A writer that reconnects
 * (wimm_log_writer_reconnect) resumes from the server's position: it sends
 * again what was not acknowledged durable, and the server drops entries it
 * already holds by (writer id, sequence), so nothing is duplicated.
 *
 * Reader (struct wimm_log_reader): reads entries from a position (the
 * server writes them into the reader's window with write-with-imm), the
 * entries of one writer id by sequence, the server's statistics, and
 * truncates the log by position (whole segment files are deleted).
 *
 * Ledger (struct wimm_log_ledger): replication as BookKeeper's ledgers do
 * it. One writer appends each entry to an ensemble of E servers (the same
 * writer id, the ledger's id, on each) and counts it committed once Qa of
 * them (the ack quorum) acknowledged it durable. Every entry carries the
 * writer's last-add-confirmed sequence (LAC) in an 8-byte header. A new
 * writer that opens the ledger with WIMM_LOG_LEDGER_RECOVER fences it: a
 * higher epoch, persisted by every server it reaches before it answers,
 * after which the old writer's appends are refused (WIMM_E_REFUSED); it
 * then settles the last entry by the quorum rule and copies what a server
 * lacks. Readers (wimm_log_ledger_read) deliver entries up to the LAC.
 *
 * Conventions are libwimm's: 0 or a count on success, a negative WIMM_E_*
 * on failure; wimm_x_close(&x) accepts NULL and clears the pointer. Thread
 * safety: each object belongs to the thread that uses its context (one
 * thread at a time); distinct objects on distinct contexts are independent.
 * The CRC function is thread-safe.
 */
#ifndef WIMM_LOG_H
#define WIMM_LOG_H

#include <stddef.h>
#include <stdint.h>

#include <wimm.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(WIMM_LOG_BUILDING) && defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* Wire bytes an entry costs beyond its payload: the CRC32C trailer, and a
 * 4-byte length header when the wire length exceeds 65535 bytes. */
#define WIMM_LOG_TRAILER 4u
#define WIMM_LOG_LONG_HEADER 4u

/* CRC32C (Castagnoli, reflected 0x82F63B78) of len bytes, continuing from
 * crc (0 to start). Software table implementation. Thread-safe. */
uint32_t wimm_log_crc32c(uint32_t crc, const void *data, size_t len);

/* Shared ring: one ring in the server's memory that many writers append
 * to, each entry's place reserved by a fetch-and-add on the ring's tail
 * word (as KafkaDirect's producers reserve a broker's log): the order of
 * the log is the order in which the fabric's atomics handed out the places,
 * decided without the server's CPU, and the server takes entries in that
 * order as their write-with-imm completions arrive. On a fabric without
 * atomics (ofi:tcp) a writer asks the server for its place instead (a
 * doorbell, answered by a doorbell): the same ring, the same order rule,
 * one more message. A writer learns how far it may write from a limit
 * word it reads, so no reservation overwrites an entry not yet taken.
 *
 * A reservation that is never written (its writer died between reserving
 * and writing) stops the head; once later entries have landed and hole_ms
 * passed, the server skips it (stat `holes`). A late write into a skipped
 * place, or an entry out of its writer's sequence, is refused: its writer
 * gets WIMM_E_DISCONNECTED and wimm_log_writer_reconnect sends again what
 * is not durable. Entries are checked as in a private ring (CRC32C over
 * header and payload, the writer's sequence) and must be the writer's own
 * (the header's id against the connection that rang for the place; a
 * writer whose entry collides with another's sends again); what a shared
 * ring gives up
 * is isolation: every writer's window is the whole ring, so a writer that
 * lies can spoil others' entries before they are taken (they are then
 * refused and sent again). Admit only writers you trust to it. */

/* ------------------------------------------------------------------ server */

struct wimm_log_server;

struct wimm_log_server_attr {
	/* The directory of the segment files (required). Created when it does
	 * not exist. It must hold nothing but wimm log files. */
	const char *dir;
	/* Bytes of each writer's ring, 4096..64 MiB, a multiple of 8; 0 = 1 MiB.
	 * The largest entry a writer can append is a ring minus its wire
	 * overhead. */
	uint32_t ring_size;
	/* Connections (writers and readers) served at once; 0 = 72. The
	 * arena is max_conns * ring_size bytes. Further requests are
	 * rejected with WIMM_E_AGAIN. */
	uint32_t max_conns;
	/* A segment file is closed and the next one begun past this many
	 * bytes; 0 = 256 MiB. */
	uint64_t segment_bytes;
	/* Microseconds the loop polls for events before it sleeps; 0 = 50.
	 * Larger values trade a core for latency. */
	uint32_t spin_us;
	/* Where the server says what it refused, dropped or recovered (one
	 * line, no newline); NULL: silent. */
	wimm_log_fn log;
	void *log_arg;
	/* Retention: keep at least the last `retain` entries and delete the
	 * segment files wholly before them (checked every turn); 0 keeps
	 * everything. */
	uint64_t retain;
	/* Bytes of the shared ring (see "Shared ring" below), 4096..64 MiB, a
	 * multiple of 16; 0: none. Its writers connect to a second listener
	 * on the listen port + 1 (any free port for port 0). */
	uint32_t shared_ring;
	/* How long the shared ring's head waits at a reservation that is not
	 * written while later entries are (a writer died or stalls between
	 * reserving and writing) before it skips it; 0 = 1000 ms. */
	uint32_t hole_ms;
};

/* Open the log in attr->dir (recovering what a previous server left),
 * listen on listen_addr ("0.0.0.0:7480", ":0" for any port). The server
 * owns ctx's event loop from now on: use ctx for nothing else while it
 * lives. Errors: INVAL (NULL args, bad sizes), PERM (the directory cannot
 * be created, read or written, or another server holds it), PROTO (the
 * directory holds a file that is not a wimm log segment or its metadata, or
 * a segment or metadata file that is truncated or corrupt before its end;
 * the log line names the file),
 * NOMEM, the errors of wimm_listen. On error nothing in dir is changed. */
int wimm_log_server_open(struct wimm_ctx *ctx, const char *listen_addr,
			 const struct wimm_log_server_attr *attr, struct wimm_log_server **out);

/* The port the server listens on (useful after ":0"), or WIMM_E_INVAL. */
int wimm_log_server_port(const struct wimm_log_server *s);
/* The port of the shared ring's listener; WIMM_E_INVAL when the server has
 * no shared ring. */
int wimm_log_server_shared_port(const struct wimm_log_server *s);

/* One turn of the server's loop: wait up to timeout_ms (-1 forever, 0 poll)
 * for events, accept connections, take the entries that arrived, write them
 * to the segment file, acknowledge them visible, fsync (group commit) and
 * acknowledge them durable, and answer readers. Returns the number of
 * entries taken (0: none). Errors: PROVIDER and the errors of wimm_wait;
 * IO-level failures (a failed write or fsync) are PERM: the server can no
 * longer promise durability and must be closed. */
int wimm_log_server_run(struct wimm_log_server *s, int timeout_ms);

/* What the log holds and what the server did. */
struct wimm_log_stat {
	uint64_t entries;	/* next position: entries in the log */
	uint64_t bytes;		/* payload bytes in the log */
	uint64_t durable;	/* entries [0, durable) are fsynced */
	uint64_t recovered;	/* entries found at open */
	uint64_t torn_bytes;	/* bytes of a torn tail cut at open */
	uint64_t segments;	/* segment files */
	uint64_t fsyncs;	/* group commits */
	uint64_t duplicates;	/* entries dropped: already in the log */
	uint64_t writers;	/* writers connected now */
	uint64_t readers;	/* readers connected now */
	uint64_t writers_known; /* distinct writer ids in the log */
	uint64_t refused;	/* connections refused or dropped for bad input */
	uint32_t ring_size;	/* bytes of each writer's ring */
	uint32_t max_conns;	/* connections served at once */
	uint64_t first;		/* the first position kept (truncation) */
	uint64_t holes;		/* shared ring: reservations skipped unwritten */
	uint32_t shared_ring;	/* bytes of the shared ring; 0: none */
	uint32_t late;		/* shared ring: entries refused (late or out of order) */
};
/* Fill *out. Errors: INVAL. Same thread as wimm_log_server_run. */
int wimm_log_server_stat(const struct wimm_log_server *s, struct wimm_log_stat *out);

/* Flush and fsync what was taken, acknowledge it durable, close every
 * connection, the listener and the segment files; ctx stays open. *s is
 * cleared; NULL is accepted. Returns 0 or PERM (the last fsync failed). */
int wimm_log_server_close(struct wimm_log_server **s);

/* ------------------------------------------------------------------ writer */

struct wimm_log_writer;

enum wimm_log_writer_flags {
	/* Announce each entry with a plain write plus a separate send (two
	 * operations), the article's baseline: for benchmarks only. */
	WIMM_LOG_WRITER_SEND_NOTICE = 1u << 0,
	/* Say hello with the first doorbell rather than in the connect's
	 * private data, as on fabrics without private data (verbs): for
	 * tests of that path. */
	WIMM_LOG_WRITER_INBAND_HELLO = 1u << 1,
	/* Append into the server's shared ring (addr is its shared port):
	 * each entry's place is reserved first, see "Shared ring". */
	WIMM_LOG_WRITER_SHARED = 1u << 2,
};

struct wimm_log_writer_attr {
	/* The writer's identity in the log (entries are deduplicated by
	 * (id, seq)); 0 is not allowed. A writer reconnecting or restarting
	 * with the same id continues its sequence. */
	uint64_t id;
	/* Sequence number the first append gets; 0: one past the last entry
	 * the log holds for this id (1 for a new id). A value past that is a
	 * sequence gap and refused (WIMM_E_PROTO). */
	uint64_t first_seq;
	/* How long open and reconnect try (the server may be restarting);
	 * 0 = 10000 ms. */
	int timeout_ms;
	unsigned flags; /* WIMM_LOG_WRITER_* */
	/* Where the writer says why the server refused it (the text of
	 * wimm_log_writer_error); NULL: silent. */
	wimm_log_fn log;
	void *log_arg;
	/* Fencing epoch; 0 for a plain writer (wimm_log_ledger sets it). A
	 * hello with an epoch above the id's on the server fences the id
	 * there, durably, and ends the connection of a lower epoch; a hello
	 * or an entry with an epoch below it is refused (WIMM_E_REFUSED). */
	uint32_t epoch;
};

/* Connect to the log server at addr ("host:port") and learn where this
 * writer's sequence stands. Waits up to attr->timeout_ms. Errors: INVAL,
 * PROTO (a sequence gap, or the server speaks another protocol: the reason
 * goes to attr->log), TIMEDOUT (no server answered in time; while the
 * server has no free connection, WIMM_E_AGAIN, it is tried again), REFUSED
 * (the id is fenced at a higher epoch), the errors of wimm_connect, NOMEM.
 * The writer owns ctx's events from now on:
 * use ctx for nothing else while it lives. */
int wimm_log_writer_open(struct wimm_ctx *ctx, const char *addr,
			 const struct wimm_log_writer_attr *attr, struct wimm_log_writer **out);

enum wimm_log_append_flags {
	/* No ring space or credit: wait (driving progress, taking acks)
	 * instead of failing with WIMM_E_AGAIN; bounded by timeout_ms of the
	 * writer's attr (then WIMM_E_TIMEDOUT, nothing appended). */
	WIMM_LOG_WAIT = 1u << 0,
};

/* Append len bytes (0 allowed) as one entry: ONE write-with-imm. *seq (if
 * not NULL) gets the entry's sequence number. data is copied; the caller
 * may reuse it at once. Errors, each with nothing appended: INVAL, TOOBIG
 * (the entry is larger than the ring or the fabric's largest message),
 * AGAIN (the ring holds no room until more entries are durable, or no
 * credit), TIMEDOUT, DISCONNECTED (the connection is gone: call
 * wimm_log_writer_reconnect; what was appended is kept and sent again),
 * PROTO (the server refused this writer: wimm_log_writer_error), REFUSED
 * (fenced: a writer of a higher epoch took the id over). */
int wimm_log_append(struct wimm_log_writer *w, const void *data, size_t len, unsigned flags,
		    uint64_t *seq);

enum wimm_log_ack {
	WIMM_LOG_VISIBLE = 1, /* the server took the completion */
	WIMM_LOG_DURABLE = 2, /* in a segment file and fsynced */
};

/* Wait up to timeout_ms (-1 forever, 0 poll) until entry seq (and every
 * one before it) is acknowledged at level. Errors: INVAL (seq not yet
 * appended), TIMEDOUT, DISCONNECTED, PROTO. */
int wimm_log_wait(struct wimm_log_writer *w, uint64_t seq, enum wimm_log_ack level, int timeout_ms);

/* Take the acknowledgements that arrived, without waiting. A writer that
 * neither appends nor waits must call this at least every liveness_ms / 4
 * of its context (libwimm's heartbeats), or the server drops it as silent.
 * Errors: INVAL, DISCONNECTED, PROTO (as wimm_log_append). */
int wimm_log_writer_poll(struct wimm_log_writer *w);

/* Where the writer stands: the last sequence appended, acknowledged
 * visible and durable (0: none), and how many entries wait for durable. */
struct wimm_log_writer_state {
	uint64_t appended, visible, durable;
	uint64_t pending;
	uint32_t ring_size;
	uint64_t resent; /* entries sent again by reconnects */
};
/* Errors: INVAL. */
int wimm_log_writer_state(const struct wimm_log_writer *w, struct wimm_log_writer_state *out);

/* Connect again (the server restarted or the connection dropped), waiting
 * up to the attr's timeout_ms; resumes at the server's position and sends
 * again every entry not acknowledged durable (the server drops those it
 * already has). Errors as wimm_log_writer_open. */
int wimm_log_writer_reconnect(struct wimm_log_writer *w);

/* Why the server refused this writer (a sequence gap, a bad entry, another
 * connection of the same id) or why the connection was lost, or "" if
 * neither happened. Never NULL. */
const char *wimm_log_writer_error(const struct wimm_log_writer *w);

/* Wait up to timeout_ms for every entry to be durable (-1 forever, 0 not
 * at all), then close. Returns 0, TIMEDOUT or DISCONNECTED (closed anyway,
 * entries possibly not durable). *w is cleared. */
int wimm_log_writer_close(struct wimm_log_writer **w, int timeout_ms);

/* ------------------------------------------------------------------ reader */

struct wimm_log_reader;

/* One entry as read: valid during the callback only. */
struct wimm_log_entry {
	uint64_t pos;	    /* global position */
	uint64_t writer_id; /* who appended it */
	uint64_t seq;	    /* its sequence number of that writer */
	uint32_t len;	    /* payload bytes */
	uint32_t crc;	    /* CRC32C of the payload, checked */
	const void *data;
};

/* Called for each entry; a nonzero return stops the read there. */
typedef int (*wimm_log_entry_fn)(void *arg, const struct wimm_log_entry *e);

/* Connect to the log server at addr as a reader with a window of
 * window_bytes (0 = 4 MiB, at least 4096), waiting up to timeout_ms (0 or
 * less: 10000). An entry larger than the window cannot be read (the
 * server refuses the read: PROTO). Errors: INVAL, NOMEM, TIMEDOUT, PROTO,
 * the errors of wimm_connect. Like a writer, a reader owns ctx's events. */
int wimm_log_reader_open(struct wimm_ctx *ctx, const char *addr, size_t window_bytes,
			 int timeout_ms, struct wimm_log_reader **out);

/* Read entries from position `from` on, at most max of them (0: as many as
 * fit the window), calling fn for each in position order. Returns how many
 * were read: 0 when the log holds nothing at `from` yet. Each entry's
 * CRC32C is checked (PROTO on a mismatch: nothing after it is delivered).
 * Errors: INVAL, TIMEDOUT (no answer within timeout_ms), DISCONNECTED,
 * PROTO. */
int wimm_log_read(struct wimm_log_reader *r, uint64_t from, uint32_t max, wimm_log_entry_fn fn,
		  void *arg, int timeout_ms);

/* The server's statistics (wimm_log_server_stat, from afar). Errors as
 * wimm_log_read. */
int wimm_log_reader_stat(struct wimm_log_reader *r, struct wimm_log_stat *out, int timeout_ms);

/* Where one writer id (a ledger's id) stands on this server. */
struct wimm_log_ledger_info {
	uint64_t last_seq;    /* its last entry the server holds; 0: none */
	uint64_t durable_seq; /* fsynced up to this one */
	uint64_t first_seq;   /* the first one kept (truncation) */
	uint32_t epoch;	      /* its fencing epoch (0: never fenced) */
};
/* Ask the server where writer id stands (all zero for an id it does not
 * know). Errors as wimm_log_read. */
int wimm_log_reader_ledger(struct wimm_log_reader *r, uint64_t id, struct wimm_log_ledger_info *out,
			   int timeout_ms);

/* Read the entries of writer id from sequence from_seq on (at most max, 0:
 * as many as fit the window), calling fn for each in sequence order, as the
 * server stores them (a ledger's entries with their 8-byte header: see
 * wimm_log_ledger_read). Returns how many: 0 when the server holds nothing
 * at from_seq. Errors as wimm_log_read; RANGE: from_seq was truncated. */
int wimm_log_read_writer(struct wimm_log_reader *r, uint64_t id, uint64_t from_seq, uint32_t max,
			 wimm_log_entry_fn fn, void *arg, int timeout_ms);

/* Truncate the log before position `before`: the server deletes every
 * segment file whose entries all lie before it (never the one it writes
 * to), durably, keeping each writer's sequence. *first (if not NULL) gets
 * the first position kept. Reads before it fail with WIMM_E_RANGE.
 * Errors as wimm_log_read; PROTO when the server could not delete (its log
 * says why). */
int wimm_log_truncate(struct wimm_log_reader *r, uint64_t before, uint64_t *first, int timeout_ms);

/* Why the server refused the last request (a truncated position, an entry
 * larger than the window), or "". Never NULL. After a refusal the server
 * closes the connection: open a new reader. */
const char *wimm_log_reader_error(const struct wimm_log_reader *r);

/* Close the connection and free the reader; *r is cleared, NULL is
 * accepted. Returns 0. */
int wimm_log_reader_close(struct wimm_log_reader **r);

/* ------------------------------------------------------------------ ledger */

struct wimm_log_ledger;

/* Bytes of the header a ledger puts before each entry (its LAC). */
#define WIMM_LOG_LEDGER_HEADER 8u

enum wimm_log_ledger_flags {
	/* Fence the ledger (epoch one above the highest any server knows)
	 * and settle its last entry before appending: what a new writer does
	 * when the old one may still live. */
	WIMM_LOG_LEDGER_RECOVER = 1u << 0,
};

struct wimm_log_ledger_attr {
	uint64_t id;	     /* the ledger: the writer id on every server; not 0 */
	unsigned ack_quorum; /* Qa, 1..n; 0: a majority of n */
	int timeout_ms;	     /* open, recovery and a stuck server; 0 = 10000 */
	unsigned flags;	     /* WIMM_LOG_LEDGER_* */
	wimm_log_fn log;     /* why a server was dropped or refused; NULL: silent */
	void *log_arg;
};

/* Open ledger attr->id on the n servers addrs[i] ("host:port"), one
 * context each (ctxs[i], owned by the ledger from now on; n <= 16). It
 * asks every server where the ledger stands, connects as its writer (with
 * RECOVER: at a new epoch, which fences it), and settles: the last entry
 * is the highest any reachable server holds (an entry acknowledged by Qa
 * servers is on at least one of any n - Qa + 1), copied to those that lack
 * it and made durable, so everything up to it is committed. Needs Qa
 * servers (with RECOVER n - Qa + 1 and Qa). Errors: INVAL, REFUSED (fenced
 * by a higher epoch meanwhile), DISCONNECTED (too few servers: the log
 * says which failed), TIMEDOUT, NOMEM, the errors of wimm_ctx_open. */
int wimm_log_ledger_open(struct wimm_ctx *const *ctxs, const char *const *addrs, unsigned n,
			 const struct wimm_log_ledger_attr *attr, struct wimm_log_ledger **out);

/* Append len bytes as the ledger's next entry on every live server (one
 * write-with-imm each, the LAC in its header); *seq gets its sequence.
 * Waits for ring room up to timeout_ms of the attr; a server that stays
 * full that long, or fails, is dropped from the ensemble. Errors: INVAL,
 * TOOBIG, REFUSED (fenced: a newer writer recovered the ledger;
 * wimm_log_ledger_error says which epoch), DISCONNECTED (fewer than Qa
 * servers left), NOMEM. */
int wimm_log_ledger_append(struct wimm_log_ledger *l, const void *data, size_t len, uint64_t *seq);

/* Wait up to timeout_ms (-1 forever, 0 poll) until entry seq is committed
 * (durable on Qa servers; the LAC reached it). Errors: INVAL (not yet
 * appended), TIMEDOUT, REFUSED, DISCONNECTED (it can no longer reach Qa). */
int wimm_log_ledger_wait(struct wimm_log_ledger *l, uint64_t seq, int timeout_ms);

/* Take the acknowledgements that arrived, without waiting (heartbeats, as
 * wimm_log_writer_poll). Errors: INVAL, REFUSED, DISCONNECTED. */
int wimm_log_ledger_poll(struct wimm_log_ledger *l);

struct wimm_log_ledger_state {
	uint64_t appended; /* the last sequence appended */
	uint64_t lac;	   /* last-add-confirmed: committed up to here */
	uint64_t settled;  /* the last entry settled at open */
	uint64_t copied;   /* entries copied to servers that lacked them at open */
	uint32_t epoch;	   /* this writer's fencing epoch */
	unsigned members, live, ack_quorum;
};
/* Errors: INVAL. */
int wimm_log_ledger_state(const struct wimm_log_ledger *l, struct wimm_log_ledger_state *out);

/* Why the ledger was fenced or lost servers, or "". Never NULL. */
const char *wimm_log_ledger_error(const struct wimm_log_ledger *l);

/* Wait up to timeout_ms for everything appended to be committed, write an
 * entry that carries only the final LAC (so readers see the last entries),
 * and close every connection; the contexts stay open. *l is cleared, NULL
 * accepted. Returns 0, TIMEDOUT, REFUSED or DISCONNECTED (closed anyway). */
int wimm_log_ledger_close(struct wimm_log_ledger **l, int timeout_ms);

/* Read ledger id from its ensemble, by the quorum rule: the LAC is the
 * highest any reachable server's last entry carries, and entries from
 * from_seq up to it (at most max, 0: what one answer holds) are delivered
 * in order from any server that holds them, without their header (e->len
 * and e->crc are of the caller's bytes; e->pos is the position on the
 * server read). Entries that carry only a LAC are not delivered. Returns
 * how many sequence numbers were consumed (delivered or skipped): 0 when
 * nothing is committed at from_seq yet. Errors: INVAL, DISCONNECTED (no
 * server answered), RANGE (from_seq was truncated), PROTO, TIMEDOUT. */
int wimm_log_ledger_read(struct wimm_log_reader *const *readers, unsigned n, uint64_t id,
			 uint64_t from_seq, uint32_t max, wimm_log_entry_fn fn, void *arg,
			 int timeout_ms);

#if defined(WIMM_LOG_BUILDING) && defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* WIMM_LOG_H */
