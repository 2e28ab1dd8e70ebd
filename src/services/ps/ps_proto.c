/* libwimm_ps's wire: imm layouts, the hello, the statistics message, and
 * the statistics query (wimm_ps_stat). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ps_internal.h"

static struct wimm_imm_layout layout_in, layout_out;
static pthread_once_t layouts_once = PTHREAD_ONCE_INIT;

static void layouts_init(void)
{
	static const struct wimm_imm_field in[] = {
	    {"worker", 8}, {"shard", 10}, {"iter", WIMM_PS_ITERATION_BITS}};
	static const struct wimm_imm_field out[] = {
	    {"kind", 2}, {"shard", 10}, {"iter", WIMM_PS_ITERATION_BITS}};
	wimm_imm_layout_init(&layout_in, in, 3);
	wimm_imm_layout_init(&layout_out, out, 3);
}

const struct wimm_imm_layout *ps_layout_in(void)
{
	pthread_once(&layouts_once, layouts_init);
	return &layout_in;
}

const struct wimm_imm_layout *ps_layout_out(void)
{
	pthread_once(&layouts_once, layouts_init);
	return &layout_out;
}

static uint32_t pack3(const struct wimm_imm_layout *l, uint32_t a, uint32_t b, uint32_t c)
{
	uint32_t imm = 0, v[3] = {a, b, c & PS_ITER_MASK};
	wimm_imm_pack(l, v, &imm);
	return imm;
}

uint32_t ps_imm_in(uint32_t worker, uint32_t shard, uint32_t iter)
{
	return pack3(ps_layout_in(), worker, shard, iter);
}

uint32_t ps_imm_out(uint32_t kind, uint32_t shard, uint32_t iter)
{
	return pack3(ps_layout_out(), kind, shard, iter);
}

int ps_iter_newer(uint32_t a, uint32_t b)
{
	uint32_t d = (a - b) & PS_ITER_MASK;
	return d != 0 && d < (PS_ITER_MASK + 1) / 2;
}

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (24 - 8 * i));
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void ps_hello_encode(unsigned char *p, const struct ps_hello *h)
{
	put32(p, PS_MAGIC);
	put32(p + 4, PS_VERSION << 16 | (h->role & 0xffffu));
	put32(p + 8, h->rank);
	put32(p + 12, h->world);
}

int ps_hello_decode(const void *data, size_t len, struct ps_hello *h)
{
	const unsigned char *p = data;
	if (!p || len != PS_HELLO_LEN || get32(p) != PS_MAGIC)
		return WIMM_E_PROTO;
	if (get32(p + 4) >> 16 != PS_VERSION)
		return WIMM_E_VERSION;
	h->role = get32(p + 4) & 0xffffu;
	h->rank = get32(p + 8);
	h->world = get32(p + 12);
	return 0;
}

void ps_stats_encode(unsigned char *p, const struct wimm_ps_stats *st)
{
	uint64_t w[PS_STAT_WORDS];
	memcpy(w, st, sizeof(w));
	put32(p, PS_MAGIC);
	put32(p + 4, (uint32_t)PS_STAT_WORDS);
	for (size_t i = 0; i < PS_STAT_WORDS; i++) {
		put32(p + 8 + 8 * i, (uint32_t)(w[i] >> 32));
		put32(p + 12 + 8 * i, (uint32_t)w[i]);
	}
}

int ps_stats_decode(const void *data, size_t len, struct wimm_ps_stats *st)
{
	const unsigned char *p = data;
	uint64_t w[PS_STAT_WORDS];
	if (!p || len != PS_STAT_LEN || get32(p) != PS_MAGIC || get32(p + 4) != PS_STAT_WORDS)
		return WIMM_E_PROTO;
	for (size_t i = 0; i < PS_STAT_WORDS; i++)
		w[i] = (uint64_t)get32(p + 8 + 8 * i) << 32 | get32(p + 12 + 8 * i);
	memcpy(st, w, sizeof(w));
	return 0;
}

int64_t ps_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ps_say(wimm_log_fn fn, void *arg, enum wimm_log_level lvl, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	if (!fn)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fn(arg, lvl, msg);
}

int ps_hello_inband(struct wimm_ctx *ctx, int inband)
{
	struct wimm_fabric_limits lim;
	return inband || wimm_ctx_limits(ctx, &lim) < 0 || lim.private_max < PS_HELLO_LEN;
}

int ps_connect(struct wimm_ctx *ctx, const char *addr, struct wimm_conn_attr *ca,
	       const struct ps_hello *h, struct wimm_mr *hello_mr, int timeout_ms,
	       struct wimm_conn **out)
{
	unsigned char pd[PS_HELLO_LEN];
	if (!hello_mr) {
		ps_hello_encode(pd, h);
		ca->private_data = pd;
		ca->private_len = PS_HELLO_LEN;
	}
	int rc = wimm_connect(ctx, addr, ca, timeout_ms, out);
	ca->private_data = NULL;
	ca->private_len = 0;
	if (rc < 0 || !hello_mr)
		return rc;
	/* Unsignaled: the server's answer (parameters, statistics) comes
	 * after it has read the hello, and the caller keeps hello_mr till then. */
	ps_hello_encode(wimm_mr_addr(hello_mr), h);
	rc = wimm_send_imm(*out, hello_mr, 0, PS_HELLO_LEN, PS_HELLO_IMM, WIMM_F_WAIT);
	if (rc < 0)
		wimm_conn_delete(out);
	return rc;
}

int ps_refusal(const struct wimm_event *ev)
{
	uint32_t v[3];
	if (ev->type != WIMM_EV_WRITE_IMM)
		return 0;
	wimm_imm_unpack(ps_layout_out(), ev->imm, v);
	if (v[PS_OUT_KIND] != PS_K_REFUSED)
		return 0;
	return v[PS_OUT_SHARD] ? -(int)v[PS_OUT_SHARD] : WIMM_E_REFUSED;
}

int ps_query(struct wimm_ctx *ctx, const char *addr, int inband, int timeout_ms,
	     struct wimm_ps_stats *out)
{
	unsigned char hello[PS_HELLO_LEN];
	struct wimm_mr *hello_mr = NULL;
	struct wimm_conn *c = NULL;
	struct wimm_event ev[8];
	struct wimm_conn_attr ca = {.rx_depth = 4, .recv_size = PS_STAT_RECV};
	int rc = 0;
	if (ps_hello_inband(ctx, inband))
		rc = wimm_mr_reg(ctx, hello, sizeof(hello), WIMM_LOCAL, &hello_mr);
	if (rc == 0)
		rc = ps_connect(ctx, addr, &ca, &(struct ps_hello){.role = PS_ROLE_STAT}, hello_mr,
				timeout_ms, &c);
	if (rc < 0)
		goto dereg;
	int64_t until = ps_now_ms() + timeout_ms;
	rc = WIMM_E_TIMEDOUT;
	while (rc == WIMM_E_TIMEDOUT && ps_now_ms() < until) {
		int n = wimm_wait(ctx, ev, 8, WIMM_WAIT_BLOCK, 50);
		if (n < 0)
			rc = n;
		for (int i = 0; i < n; i++) {
			if (ev[i].type == WIMM_EV_DISCONNECT)
				rc = WIMM_E_DISCONNECTED;
			else if (ev[i].type == WIMM_EV_SEND_IMM)
				rc = ps_stats_decode(ev[i].data, ev[i].len, out);
			else if (ps_refusal(&ev[i]))
				rc = ps_refusal(&ev[i]);
			if (rc != WIMM_E_TIMEDOUT)
				break;
		}
	}
	wimm_conn_delete(&c);
dereg:
	wimm_mr_dereg(&hello_mr);
	return rc;
}

int wimm_ps_stat(const char *fabric, const char *addr, int timeout_ms, struct wimm_ps_stats *out)
{
	struct wimm_ctx *ctx = NULL;
	if (!addr || !out)
		return WIMM_E_INVAL;
	if (timeout_ms <= 0)
		timeout_ms = 10000;
	int rc = wimm_ctx_open(fabric ? fabric : "auto", NULL, &ctx);
	if (rc < 0)
		return rc;
	rc = ps_query(ctx, addr, 0, timeout_ms, out);
	wimm_ctx_close(&ctx);
	return rc;
}
