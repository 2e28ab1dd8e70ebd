/* Internals of libwimm_ps: the wire (imm layouts, the hello, the statistics
 * message), shared by the server, the worker and the tests' hand-made
 * peers. Nothing here is exported. */
#ifndef WIMM_PS_INTERNAL_H
#define WIMM_PS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <wimm/ps.h>

/* Worker -> server: {worker:8, shard:10, iter:14}. */
enum { PS_IN_WORKER, PS_IN_SHARD, PS_IN_ITER };
/* Server -> worker: {kind:2, shard:10, iter:14}; a STALL carries the
 * worker waited for in the shard field, a REFUSED (the answer to a bad
 * in-band hello, just before the close) the reason, -WIMM_E_*. */
enum { PS_OUT_KIND, PS_OUT_SHARD, PS_OUT_ITER };
enum ps_kind { PS_K_REFUSED = 0, PS_K_PARAMS = 1, PS_K_STALL = 2, PS_K_STAT = 3 };

#define PS_ITER_MASK ((1u << WIMM_PS_ITERATION_BITS) - 1)

/* The connector's private data or, where the fabric has too little of it
 * (or the worker asks), its first send-with-imm (imm: PS_HELLO_IMM). */
#define PS_MAGIC 0x53505757u /* "WWPS" */
#define PS_VERSION 1u
#define PS_HELLO_LEN 16
enum ps_role { PS_ROLE_WORKER = 1, PS_ROLE_STAT = 2 };
struct ps_hello {
	uint32_t role, rank, world;
};
#define PS_HELLO_IMM 0x48454c4fu /* "HELO" */
/* How long an in-band hello may take before the server drops the
 * connection (its window is held meanwhile). */
#define PS_HELLO_WAIT_MS 30000
/* How long a refusal may take to be delivered before the close. */
#define PS_REFUSAL_WAIT_MS 5000

/* The statistics message: struct wimm_ps_stats as big-endian u64s. */
#define PS_STAT_WORDS (sizeof(struct wimm_ps_stats) / sizeof(uint64_t))
#define PS_STAT_LEN (8 + 8 * PS_STAT_WORDS)
#define PS_STAT_RECV 512

const struct wimm_imm_layout *ps_layout_in(void);
const struct wimm_imm_layout *ps_layout_out(void);
uint32_t ps_imm_in(uint32_t worker, uint32_t shard, uint32_t iter);
uint32_t ps_imm_out(uint32_t kind, uint32_t shard, uint32_t iter);

void ps_hello_encode(unsigned char *p, const struct ps_hello *h);
/* 0, or WIMM_E_PROTO (length, magic) / WIMM_E_VERSION. */
int ps_hello_decode(const void *p, size_t len, struct ps_hello *h);
void ps_stats_encode(unsigned char *p, const struct wimm_ps_stats *st);
/* 0, or WIMM_E_PROTO. */
int ps_stats_decode(const void *p, size_t len, struct wimm_ps_stats *st);

/* 1 when iteration a is newer than b (serial numbers modulo 2^14). */
int ps_iter_newer(uint32_t a, uint32_t b);

/* 1 when a hello goes in-band on ctx: its fabric has too little private
 * data, or inband asks for it. */
int ps_hello_inband(struct wimm_ctx *ctx, int inband);
/* Connect to addr with ca, the hello h in its private data or, in-band,
 * sent from hello_mr (PS_HELLO_LEN bytes, kept until the server answers). */
int ps_connect(struct wimm_ctx *ctx, const char *addr, struct wimm_conn_attr *ca,
	       const struct ps_hello *h, struct wimm_mr *hello_mr, int timeout_ms,
	       struct wimm_conn **out);
/* A server's refusal of an in-band hello in ev: its reason, or 0. */
int ps_refusal(const struct wimm_event *ev);
/* The statistics over ctx: a STAT connection to addr, its one answer. */
int ps_query(struct wimm_ctx *ctx, const char *addr, int inband, int timeout_ms,
	     struct wimm_ps_stats *out);

int64_t ps_now_ms(void);
void ps_say(wimm_log_fn fn, void *arg, enum wimm_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
