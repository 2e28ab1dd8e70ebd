/* Internals of libwimm_log: the wire formats shared by server, writer and
 * reader, and the segment store. Nothing here is exported. */
#ifndef WIMM_LOG_INTERNAL_H
#define WIMM_LOG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <wimm/log.h>

/* ------------------------------------------------------------ the wire */

/* Client -> server imm: {len:16, seq:12, flag:4}. len is the wire length of
 * the entry (0 with LOG_F_LONG: the length is the entry's first 4 bytes). */
#define LOG_IMM_LEN_MAX 0xffffu
#define LOG_SEQ_MASK 0xfffu
enum log_flag {
	LOG_F_WRAP = 1u,  /* the entry starts at ring offset 0; the rest is padding */
	LOG_F_LONG = 2u,  /* a 4-byte length header leads the entry */
	LOG_F_HELLO = 4u, /* in-band hello at window offset 0 (no private data) */
	LOG_F_REQ = 8u,	  /* a reader's request at window offset 0 */
};

/* Server -> client imm: {kind:4, val:28}. */
#define LOG_VAL_MASK 0xfffffffu
enum log_kind {
	LOG_K_VISIBLE = 1, /* val: low 28 bits of the last sequence visible */
	LOG_K_DURABLE = 2, /* val: ... durable */
	LOG_K_RESUME = 3,  /* window[0..32): struct log_resume */
	LOG_K_ERROR = 4,   /* window[32..64): struct log_error */
	LOG_K_DATA = 5,	   /* reader: val records in window[0..len) */
	LOG_K_STAT = 6,	   /* reader: struct wimm_log_stat encoded in window[0..) */
	LOG_K_LEDGER = 7,  /* reader: struct log_ledger_reply in window[0..) */
	LOG_K_DONE = 8,	   /* reader: a truncation done, val: 0 */
	/* The shared ring, both directions in this layout. */
	LOG_K_GRANT = 9,    /* server: val: the granted place / 16, low 28 bits */
	LOG_K_ENTRY = 10,   /* writer: an entry landed at val (place / 16, low 28 bits) */
	LOG_K_RESERVE = 11, /* writer: grant me val * 16 bytes (fabrics without atomics) */
	LOG_K_HELLO = 12,   /* writer: a send_imm carrying the hello */
	LOG_K_WAIT = 13,    /* writer: I hold place val * 16 (low 28 bits) and wait for room */
};

#define LOG_MAGIC 0x474f4c57u /* "WLOG" */
#define LOG_VERSION 1u
enum log_role {
	LOG_ROLE_NONE = 0,
	LOG_ROLE_WRITER = 1,
	LOG_ROLE_READER = 2,
	LOG_ROLE_SHARED = 3, /* a writer of the shared ring */
};

/* The hello: in the connect's private data, or in-band (LOG_F_HELLO). */
#define LOG_HELLO_LEN 32
struct log_hello {
	uint32_t magic;
	uint16_t version, role;
	uint64_t id;
	uint64_t first_seq; /* 0: continue after the log's last */
	uint32_t start_off; /* ring offset of the first entry sent */
	uint32_t epoch;	    /* the writer's fencing epoch (0: not a ledger writer) */
};

/* RESUME: where the writer stands (durable on the server). */
#define LOG_RESUME_OFF 0
#define LOG_ERROR_OFF 32
#define LOG_CLIENT_WINDOW 64
struct log_resume {
	uint64_t last_seq;
	uint32_t ring_size;
	uint32_t version;
	uint32_t epoch; /* the writer id's fencing epoch on the server */
	uint32_t flags; /* LOG_RESUME_* (shared ring) */
	uint64_t base;	/* shared ring, by request: no grant is below this place */
};
/* The shared ring's places are granted by the server, not reserved by
 * fetch-and-add (the fabric has no atomics). */
#define LOG_RESUME_BY_REQUEST 1u
/* The tail word, which only the fabric's atomics change, is in the server's
 * byte order: this flag says it is big-endian. */
#define LOG_RESUME_TAIL_BE 2u

enum log_err_code {
	LOG_ERR_GAP = 1,       /* a: the log's last seq, b: the seq sent */
	LOG_ERR_CRC = 2,       /* a: seq */
	LOG_ERR_BOUNDS = 3,    /* a: offset, b: length */
	LOG_ERR_PROTO = 4,     /* a malformed hello or request */
	LOG_ERR_TAKEN = 5,     /* another connection of the same id took over */
	LOG_ERR_TOOBIG = 6,    /* reader: an entry larger than its window (a: bytes) */
	LOG_ERR_STORE = 7,     /* the server cannot write its segment file */
	LOG_ERR_FENCED = 8,    /* a: the id's fencing epoch, b: the writer's epoch */
	LOG_ERR_TRUNCATED = 9, /* reader: a: the first position kept, b: the one asked */
	LOG_ERR_SKIPPED = 10,  /* shared: an entry at a place skipped, or out of sequence */
};
struct log_error {
	uint32_t code;
	uint64_t a, b;
};

/* A reader's request (window offset 0, LOG_F_REQ). READ_LEDGER and LEDGER
 * name a writer id; `from` is a sequence number for READ_LEDGER, a position
 * for READ and TRUNCATE. */
#define LOG_REQ_LEN 24
enum log_req_op {
	LOG_REQ_READ = 1,
	LOG_REQ_STAT = 2,
	LOG_REQ_LEDGER = 3,	 /* where a writer id stands */
	LOG_REQ_READ_LEDGER = 4, /* records of one writer id by sequence */
	LOG_REQ_TRUNCATE = 5,	 /* drop the segments wholly before `from` */
};
struct log_req {
	uint32_t op, max;
	uint64_t from, id;
};

/* The answer to LOG_REQ_LEDGER. */
#define LOG_LEDGER_REPLY_LEN 32
struct log_ledger_reply {
	uint64_t last_seq, durable_seq, first_seq;
	uint32_t epoch;
};

/* A ledger writer's entries (wimm_log_ledger_*) lead with 8 bytes: the
 * writer's last-add-confirmed sequence when it sent the entry, and in the
 * top bit MARK: an entry that carries nothing but that LAC. */
#define LOG_LEDGER_HDR 8u
#define LOG_LEDGER_MARK (1ull << 63)

/* A record, in a segment file and in a read batch to a reader. */
#define LOG_REC_MAGIC 0x43455257u /* "WREC" */
#define LOG_REC_HDR 40
#define LOG_REC_MAX_PAYLOAD (64u << 20)
struct log_rec {
	uint32_t len;
	uint64_t writer, seq, pos;
	uint32_t crc; /* of the payload */
};

#define LOG_STAT_LEN 128

/* The shared ring's window: control words, then the ring. The tail word
 * (the next place to reserve, by fetch-and-add) and the limit word (places
 * below it may be written) are 64-bit little-endian. A place is a logical
 * byte offset that only grows; it sits at ring offset place % ring. */
#define LOG_SHARED_TAIL 0
#define LOG_SHARED_LIMIT 8
#define LOG_SHARED_CTL 64
/* An entry: a 24-byte header {len:32, flags:32, seq:64, writer id:64},
 * the payload, the CRC32C of header and payload, padded to 16 bytes. PAD
 * covers a reservation that would cross the ring's end: its 16 bytes say
 * {extent, flags} and nothing else counts. */
#define LOG_SH_HDR 24u
#define LOG_SH_PAD_LEN 16u
#define LOG_SH_MAGIC 0x57480000u /* "WH" in the flags' upper half */
#define LOG_SH_PAD 1u
#define LOG_SH_MASK 0xfffffffu
static inline uint32_t log_sh_extent(uint32_t len)
{
	return (LOG_SH_HDR + len + 4u + 15u) & ~15u;
}

void log_put32(unsigned char *p, uint32_t v);
void log_put64(unsigned char *p, uint64_t v);
uint32_t log_get32(const unsigned char *p);
uint64_t log_get64(const unsigned char *p);
void log_hello_encode(unsigned char *p, const struct log_hello *h);
/* 0, or -1 when magic or version do not match. */
int log_hello_decode(const unsigned char *p, size_t len, struct log_hello *h);
void log_resume_encode(unsigned char *p, const struct log_resume *r);
void log_resume_decode(const unsigned char *p, struct log_resume *r);
void log_error_encode(unsigned char *p, const struct log_error *e);
void log_error_decode(const unsigned char *p, struct log_error *e);
void log_req_encode(unsigned char *p, const struct log_req *q);
void log_req_decode(const unsigned char *p, struct log_req *q);
/* Header of a record (LOG_REC_HDR bytes, its own CRC included). */
void log_rec_encode(unsigned char *p, const struct log_rec *r);
/* 0, or -1 when the magic or the header's CRC is wrong. */
int log_rec_decode(const unsigned char *p, struct log_rec *r);
void log_ledger_reply_encode(unsigned char *p, const struct log_ledger_reply *r);
void log_ledger_reply_decode(const unsigned char *p, struct log_ledger_reply *r);
void log_stat_encode(unsigned char *p, const struct wimm_log_stat *s);
void log_stat_decode(const unsigned char *p, struct wimm_log_stat *s);
/* Text of an error the server sent, into buf. */
void log_error_text(const struct log_error *e, char *buf, size_t len);

/* The two imm layouts, initialised once (thread-safe). */
const struct wimm_imm_layout *log_layout_in(void);
const struct wimm_imm_layout *log_layout_out(void);
uint32_t log_imm_out(uint32_t kind, uint64_t val);
/* The full 64-bit sequence of a 28-bit acknowledgement, given the largest
 * sequence it can name. */
uint64_t log_seq_extend(uint64_t base, uint32_t val28);

/* A line to a log hook (fn may be NULL: silent). */
void log_say(wimm_log_fn fn, void *arg, enum wimm_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Monotonic milliseconds. */
int64_t log_now_ms(void);
/* Connect, retrying while nothing listens yet (a restarting server), until
 * deadline_ms (log_now_ms scale). */
int log_connect_retry(struct wimm_ctx *ctx, const char *addr, const struct wimm_conn_attr *attr,
		      int64_t deadline_ms, struct wimm_conn **out);

/* ---------------------------------------------------------- the store */

/* ------------------------------------------------------- the metadata */

#define LOG_META_NAME "wimm-log.meta"
struct log_meta_writer {
	uint64_t id, trunc_seq;
	uint32_t epoch;
};
struct log_meta {
	uint64_t first; /* the first position kept */
	struct log_meta_writer *writers;
	size_t n;
};
/* 1 for the metadata file's names (and its temporary). */
int log_meta_is_name(const char *name);
/* Load dir's metadata into *out (empty when there is none; free
 * out->writers). Errors: PERM, PROTO (corrupt), NOMEM; why goes to log. */
int log_meta_load(int dirfd, const char *dir, struct log_meta *out, wimm_log_fn log, void *arg);
/* Replace the metadata, durably. PERM on failure. */
int log_meta_store(int dirfd, const char *dir, const struct log_meta *m, wimm_log_fn log,
		   void *arg);

/* ---------------------------------------------------------- the store */

struct log_store;
struct log_writer_state {
	uint64_t id;
	uint64_t last_seq;    /* in the log (written or staged) */
	uint64_t durable_seq; /* fsynced */
	uint64_t trunc_seq;   /* sequences up to this one were truncated away */
	uint32_t epoch;	      /* fencing epoch: writers of a lower one are refused */
	int live;	      /* slot of its live connection, -1: none */
	uint64_t *pos;	      /* position of seq trunc_seq + 1 + i */
	size_t pos_cap;
};

/* Open or recover dir. Errors as wimm_log_server_open; why goes to log. */
int log_store_open(const char *dir, uint64_t segment_bytes, wimm_log_fn log, void *log_arg,
		   struct log_store **out);
void log_store_close(struct log_store **st);
/* Stage a record of writer wi (its last_seq becomes seq): its position.
 * Errors: NOMEM, PERM (a failed write). */
int log_store_append(struct log_store *st, size_t wi, uint64_t seq, const void *data, uint32_t len,
		     uint64_t *pos);
/* Write what is staged to the segment file. PERM on failure. */
int log_store_flush(struct log_store *st);
/* Flush and fsync: everything appended so far becomes durable. */
int log_store_sync(struct log_store *st);
/* The group commit off the loop's thread: begin flushes and returns the
 * file descriptor to fdatasync (-1: nothing to do), remembering how far
 * the log and each writer stand; end (with ok after a successful
 * fdatasync) makes that much durable. Appends may go on in between. */
int log_store_sync_begin(struct log_store *st, int *fd);
void log_store_sync_end(struct log_store *st, int ok);
/* 1 when something appended is not yet durable. */
int log_store_dirty(const struct log_store *st);
/* Copy whole records from position from on into buf (at most max records,
 * 0: no limit, and cap bytes): returns the bytes, *n the records. A first
 * record larger than cap: WIMM_E_TOOBIG, *n its size; from before the first
 * position kept: WIMM_E_RANGE. */
long log_store_read(struct log_store *st, uint64_t from, uint32_t max, unsigned char *buf,
		    size_t cap, uint32_t *n);
/* The same for the records of writer wi from sequence from_seq on. */
long log_store_read_writer(struct log_store *st, size_t wi, uint64_t from_seq, uint32_t max,
			   unsigned char *buf, size_t cap, uint32_t *n);
/* The first position the log keeps (reads before it are refused). */
uint64_t log_store_first(const struct log_store *st);
/* Raise writer wi's fencing epoch to epoch, durably (metadata file). */
int log_store_fence(struct log_store *st, size_t wi, uint32_t epoch);
/* Delete the segment files whose entries all lie before position before
 * (never the one being written); *first gets the first position kept.
 * Errors: PERM, NOMEM. */
int log_store_truncate(struct log_store *st, uint64_t before, uint64_t *first);
/* The writer table: the index of a writer's state (with create: added when
 * new), -1 when unknown, WIMM_E_NOMEM. Indices stay valid; pointers from
 * log_store_writer_at only until the next create. */
long log_store_writer_find(struct log_store *st, uint64_t id, int create);
struct log_writer_state *log_store_writer_at(struct log_store *st, size_t i);
size_t log_store_writers(const struct log_store *st);
void log_store_stat(const struct log_store *st, struct wimm_log_stat *out);

#endif
