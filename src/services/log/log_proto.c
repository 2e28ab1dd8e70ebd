/* The wire formats of the log service: CRC32C, little-endian encodings of
 * the hello, resume, error, request, record and statistics, the two imm
 * layouts, and small helpers shared by server, writer and reader. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <threads.h>
#include <time.h>

#include "log_internal.h"
#include "svc_crc32c.h"

/* ------------------------------------------------------------- CRC32C */

/* The services' one implementation (the SSE4.2 instruction where the CPU
 * has it). */
uint32_t wimm_log_crc32c(uint32_t crc, const void *data, size_t len)
{
	return svc_crc32c(crc, data, len);
}

/* ----------------------------------------------------------- encodings */

void log_put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

void log_put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

uint32_t log_get32(const unsigned char *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

uint64_t log_get64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

void log_hello_encode(unsigned char *p, const struct log_hello *h)
{
	memset(p, 0, LOG_HELLO_LEN);
	log_put32(p, LOG_MAGIC);
	log_put32(p + 4, LOG_VERSION | (uint32_t)h->role << 16);
	log_put64(p + 8, h->id);
	log_put64(p + 16, h->first_seq);
	log_put32(p + 24, h->start_off);
	log_put32(p + 28, h->epoch);
}

int log_hello_decode(const unsigned char *p, size_t len, struct log_hello *h)
{
	if (len < LOG_HELLO_LEN || log_get32(p) != LOG_MAGIC)
		return -1;
	uint32_t vr = log_get32(p + 4);
	h->magic = LOG_MAGIC;
	h->version = (uint16_t)(vr & 0xffff);
	h->role = (uint16_t)(vr >> 16);
	h->id = log_get64(p + 8);
	h->first_seq = log_get64(p + 16);
	h->start_off = log_get32(p + 24);
	h->epoch = log_get32(p + 28);
	if (h->version != LOG_VERSION)
		return -1;
	return 0;
}

void log_resume_encode(unsigned char *p, const struct log_resume *r)
{
	memset(p, 0, 32);
	log_put64(p, r->last_seq);
	log_put32(p + 8, r->ring_size);
	log_put32(p + 12, r->version);
	log_put32(p + 16, r->epoch);
	log_put32(p + 20, r->flags);
	log_put64(p + 24, r->base);
}

void log_resume_decode(const unsigned char *p, struct log_resume *r)
{
	r->last_seq = log_get64(p);
	r->ring_size = log_get32(p + 8);
	r->version = log_get32(p + 12);
	r->epoch = log_get32(p + 16);
	r->flags = log_get32(p + 20);
	r->base = log_get64(p + 24);
}

void log_error_encode(unsigned char *p, const struct log_error *e)
{
	memset(p, 0, 32);
	log_put32(p, e->code);
	log_put64(p + 8, e->a);
	log_put64(p + 16, e->b);
}

void log_error_decode(const unsigned char *p, struct log_error *e)
{
	e->code = log_get32(p);
	e->a = log_get64(p + 8);
	e->b = log_get64(p + 16);
}

void log_req_encode(unsigned char *p, const struct log_req *q)
{
	log_put32(p, q->op);
	log_put32(p + 4, q->max);
	log_put64(p + 8, q->from);
	log_put64(p + 16, q->id);
}

void log_req_decode(const unsigned char *p, struct log_req *q)
{
	q->op = log_get32(p);
	q->max = log_get32(p + 4);
	q->from = log_get64(p + 8);
	q->id = log_get64(p + 16);
}

/* Four 64-bit fields, the epoch widened. */
void log_ledger_reply_encode(unsigned char *p, const struct log_ledger_reply *r)
{
	const uint64_t v[4] = {r->last_seq, r->durable_seq, r->first_seq, r->epoch};
	for (int i = 0; i < 4; i++)
		log_put64(p + 8 * i, v[i]);
}

void log_ledger_reply_decode(const unsigned char *p, struct log_ledger_reply *r)
{
	uint64_t v[4];
	for (int i = 0; i < 4; i++)
		v[i] = log_get64(p + 8 * i);
	*r = (struct log_ledger_reply){
	    .last_seq = v[0], .durable_seq = v[1], .first_seq = v[2], .epoch = (uint32_t)v[3]};
}

void log_rec_encode(unsigned char *p, const struct log_rec *r)
{
	log_put32(p, LOG_REC_MAGIC);
	log_put32(p + 4, r->len);
	log_put64(p + 8, r->writer);
	log_put64(p + 16, r->seq);
	log_put64(p + 24, r->pos);
	log_put32(p + 32, r->crc);
	log_put32(p + 36, wimm_log_crc32c(0, p, 36));
}

int log_rec_decode(const unsigned char *p, struct log_rec *r)
{
	if (log_get32(p) != LOG_REC_MAGIC || log_get32(p + 36) != wimm_log_crc32c(0, p, 36))
		return -1;
	r->len = log_get32(p + 4);
	r->writer = log_get64(p + 8);
	r->seq = log_get64(p + 16);
	r->pos = log_get64(p + 24);
	r->crc = log_get32(p + 32);
	return r->len > LOG_REC_MAX_PAYLOAD ? -1 : 0;
}

void log_stat_encode(unsigned char *p, const struct wimm_log_stat *s)
{
	const uint64_t v[] = {s->entries,    s->bytes,	  s->durable,	    s->recovered,
			      s->torn_bytes, s->segments, s->fsyncs,	    s->duplicates,
			      s->writers,    s->readers,  s->writers_known, s->refused,
			      s->first};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		log_put64(p + 8 * i, v[i]);
	log_put32(p + 104, s->ring_size);
	log_put32(p + 108, s->max_conns);
	log_put64(p + 112, s->holes);
	log_put32(p + 120, s->shared_ring);
	log_put32(p + 124, s->late);
}

void log_stat_decode(const unsigned char *p, struct wimm_log_stat *s)
{
	uint64_t *v[] = {&s->entries,	 &s->bytes,    &s->durable,	  &s->recovered,
			 &s->torn_bytes, &s->segments, &s->fsyncs,	  &s->duplicates,
			 &s->writers,	 &s->readers,  &s->writers_known, &s->refused,
			 &s->first};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		*v[i] = log_get64(p + 8 * i);
	s->ring_size = log_get32(p + 104);
	s->max_conns = log_get32(p + 108);
	s->holes = log_get64(p + 112);
	s->shared_ring = log_get32(p + 120);
	s->late = log_get32(p + 124);
}

/* What each refusal says; %llu are a then b (TRUNCATED: b then a). */
static const struct {
	uint32_t code;
	const char *fmt;
} error_texts[] = {
    {LOG_ERR_GAP, "sequence gap: the log holds this writer's entries up to seq %llu, the "
		  "writer sent seq %llu"},
    {LOG_ERR_CRC, "entry seq %llu arrived with a bad CRC32C"},
    {LOG_ERR_BOUNDS, "entry at ring offset %llu, %llu bytes, is outside the ring"},
    {LOG_ERR_PROTO, "the server refused a malformed hello or request"},
    {LOG_ERR_TAKEN, "another connection with this writer id took over"},
    {LOG_ERR_TOOBIG, "an entry of %llu bytes is larger than the reader's window"},
    {LOG_ERR_STORE, "the server cannot write its segment file"},
    {LOG_ERR_FENCED, "fenced: a newer writer (epoch %llu) recovered this ledger; this "
		     "writer's epoch is %llu"},
    {LOG_ERR_TRUNCATED, "position %llu was truncated: the log keeps positions from %llu on"},
    {LOG_ERR_SKIPPED, "shared ring: the entry at place %llu was not taken (its place was "
		      "skipped or holds another writer's entry, or it is out of this writer's "
		      "sequence, expected seq %llu): send it again"},
};

void log_error_text(const struct log_error *e, char *buf, size_t len)
{
	unsigned long long a = e->a, b = e->b;
	if (e->code == LOG_ERR_TRUNCATED)
		a = e->b, b = e->a;
	for (size_t i = 0; i < sizeof(error_texts) / sizeof(error_texts[0]); i++)
		if (error_texts[i].code == e->code) {
			snprintf(buf, len, error_texts[i].fmt, a, b);
			return;
		}
	snprintf(buf, len, "the server refused this connection (code %u)", e->code);
}

/* -------------------------------------------------------------- layouts */

static struct wimm_imm_layout layout_in, layout_out;
static once_flag layout_once = ONCE_FLAG_INIT;

static void layout_init(void)
{
	static const struct wimm_imm_field in[] = {{"len", 16}, {"seq", 12}, {"flag", 4}};
	static const struct wimm_imm_field out[] = {{"kind", 4}, {"val", 28}};
	wimm_imm_layout_init(&layout_in, in, 3);
	wimm_imm_layout_init(&layout_out, out, 2);
}

const struct wimm_imm_layout *log_layout_in(void)
{
	call_once(&layout_once, layout_init);
	return &layout_in;
}

const struct wimm_imm_layout *log_layout_out(void)
{
	call_once(&layout_once, layout_init);
	return &layout_out;
}

uint32_t log_imm_out(uint32_t kind, uint64_t val)
{
	uint32_t imm = 0, v[2] = {kind, (uint32_t)(val & LOG_VAL_MASK)};
	wimm_imm_pack(log_layout_out(), v, &imm);
	return imm;
}

uint64_t log_seq_extend(uint64_t base, uint32_t val28)
{
	uint64_t d = ((uint32_t)base - val28) & LOG_VAL_MASK;
	return d > base ? 0 : base - d;
}

void log_say(wimm_log_fn fn, void *arg, enum wimm_log_level lvl, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	if (!fn)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fn(arg, lvl, buf);
}

int64_t log_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int log_connect_retry(struct wimm_ctx *ctx, const char *addr, const struct wimm_conn_attr *attr,
		      int64_t deadline_ms, struct wimm_conn **out)
{
	for (;;) {
		int64_t left = deadline_ms - log_now_ms();
		if (left <= 0)
			return WIMM_E_TIMEDOUT;
		int rc = wimm_connect(ctx, addr, attr, (int)(left < 2000 ? left : 2000), out);
		if (rc != WIMM_E_UNREACHABLE && rc != WIMM_E_TIMEDOUT &&
		    rc != WIMM_E_DISCONNECTED && rc != WIMM_E_AGAIN)
			return rc;
		if (deadline_ms - log_now_ms() <= 0)
			return rc;
		struct timespec ts = {0, 50 * 1000000};
		nanosleep(&ts, NULL);
	}
}
