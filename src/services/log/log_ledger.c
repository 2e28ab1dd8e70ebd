/* The ledger: one writer, an ensemble of servers, an ack quorum (Apache
 * BookKeeper's model on the log service). Each member is a plain
 * wimm_log_writer with the ledger's id and epoch on a context of its own;
 * an entry goes to every live member and is committed once Qa members
 * acknowledged it durable. Opening settles the ledger: the highest entry
 * any reachable member holds is the last, copied to the members that lack
 * it. A higher epoch fences the older writer out (the servers persist it). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log_internal.h"

#define MAX_MEMBERS 16
#define DEFAULT_TIMEOUT_MS 10000
/* How long one server may hold up the others (their heartbeats wait
 * meanwhile: well under the default liveness of 5 s). */
#define MEMBER_TIMEOUT_MS 2000
#define PROBE_TIMEOUT_MS 5000

struct member {
	struct wimm_ctx *ctx;
	char *addr;
	struct wimm_log_writer *w;
	int live, answered;
	uint64_t durable; /* the last it acknowledged durable (kept after it died) */
};

struct wimm_log_ledger {
	struct member m[MAX_MEMBERS];
	unsigned n, qa;
	struct wimm_log_ledger_attr attr;
	uint32_t epoch;
	uint64_t next_seq, lac, settled, copied;
	uint64_t sent_lac; /* the LAC the last entry sent carried */
	int fenced;
	unsigned char *buf;
	size_t cap;
	char err[256];
};

#define say(l, lvl, ...) log_say((l)->attr.log, (l)->attr.log_arg, lvl, __VA_ARGS__)

static unsigned live_count(const struct wimm_log_ledger *l)
{
	unsigned c = 0;
	for (unsigned i = 0; i < l->n; i++)
		c += l->m[i].live;
	return c;
}

/* A member failed with rc: out of the ensemble (a fence ends the ledger). */
static void member_lost(struct wimm_log_ledger *l, struct member *m, int rc, const char *why)
{
	if (!m->live)
		return;
	m->live = 0;
	if (rc == WIMM_E_REFUSED)
		l->fenced = 1;
	snprintf(l->err, sizeof(l->err), "server %s: %s", m->addr,
		 why && *why ? why : wimm_strerror(rc));
	say(l, WIMM_LOG_WARN, "ledger %llx: %s (%u of %u servers left, ack quorum %u)",
	    (unsigned long long)l->attr.id, l->err, live_count(l), l->n, l->qa);
}

/* The LAC: the qa-th highest durable acknowledgement among the members
 * (an entry durable on qa of them is committed; acknowledgements of a
 * member that died since still count). */
static void update_lac(struct wimm_log_ledger *l)
{
	uint64_t d[MAX_MEMBERS];
	for (unsigned i = 0; i < l->n; i++) {
		struct member *m = &l->m[i];
		struct wimm_log_writer_state ws;
		if (m->live && wimm_log_writer_state(m->w, &ws) == 0 && ws.durable > m->durable)
			m->durable = ws.durable;
		d[i] = m->durable;
	}
	for (unsigned i = 0; i < l->qa; i++)
		for (unsigned j = i + 1; j < l->n; j++)
			if (d[j] > d[i]) {
				uint64_t t = d[i];
				d[i] = d[j];
				d[j] = t;
			}
	if (d[l->qa - 1] > l->lac)
		l->lac = d[l->qa - 1];
}

static int ledger_status(const struct wimm_log_ledger *l)
{
	if (l->fenced)
		return WIMM_E_REFUSED;
	return live_count(l) < l->qa ? WIMM_E_DISCONNECTED : 0;
}

int wimm_log_ledger_poll(struct wimm_log_ledger *l)
{
	if (!l)
		return WIMM_E_INVAL;
	for (unsigned i = 0; i < l->n; i++) {
		struct member *m = &l->m[i];
		int rc = m->live ? wimm_log_writer_poll(m->w) : 0;
		if (rc)
			member_lost(l, m, rc, wimm_log_writer_error(m->w));
	}
	update_lac(l);
	return ledger_status(l);
}

/* Sleep until a member's context has something, at most ms. */
static void sleep_members(struct wimm_log_ledger *l, int ms)
{
	struct pollfd pf[MAX_MEMBERS];
	nfds_t n = 0;
	for (unsigned i = 0; i < l->n; i++) {
		int fd;
		if (!l->m[i].live || wimm_ctx_fd(l->m[i].ctx, &fd))
			continue;
		if (wimm_ctx_arm(l->m[i].ctx) != 0)
			return; /* events are pending: no sleep */
		pf[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
	}
	poll(pf, n, ms);
}

int wimm_log_ledger_wait(struct wimm_log_ledger *l, uint64_t seq, int timeout_ms)
{
	if (!l || seq >= l->next_seq)
		return WIMM_E_INVAL;
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : log_now_ms() + timeout_ms;
	for (;;) {
		int rc = wimm_log_ledger_poll(l);
		if (l->lac >= seq)
			return 0;
		if (rc)
			return rc;
		int64_t left = deadline - log_now_ms();
		if (left <= 0)
			return WIMM_E_TIMEDOUT;
		sleep_members(l, (int)(left < 20 ? left : 20));
	}
}

/* One entry (header included) to every live member, in turn, without
 * blocking on one while the others need polling. */
static int send_all(struct wimm_log_ledger *l, const unsigned char *p, size_t len, uint64_t *seq)
{
	unsigned done = 0, want = 0;
	int64_t deadline = log_now_ms() + l->attr.timeout_ms;
	for (unsigned i = 0; i < l->n; i++)
		want |= l->m[i].live ? 1u << i : 0;
	while (want & ~done) {
		for (unsigned i = 0; i < l->n; i++) {
			struct member *m = &l->m[i];
			uint64_t s;
			if (!(want & ~done & (1u << i)))
				continue;
			int rc =
			    m->live ? wimm_log_append(m->w, p, len, 0, &s) : WIMM_E_DISCONNECTED;
			if (rc == WIMM_E_AGAIN)
				continue;
			if (rc == WIMM_E_TOOBIG || rc == WIMM_E_NOMEM || rc == WIMM_E_INVAL) {
				if (!done)
					return rc; /* nothing sent anywhere */
				member_lost(l, m, rc, NULL);
			} else if (rc) {
				member_lost(l, m, rc, wimm_log_writer_error(m->w));
			} else if (s != l->next_seq) {
				member_lost(l, m, WIMM_E_PROTO, "its sequence went another way");
			}
			done |= 1u << i;
		}
		if (!(want & ~done))
			break;
		wimm_log_ledger_poll(l);
		if (log_now_ms() > deadline) {
			for (unsigned i = 0; i < l->n; i++)
				if (want & ~done & (1u << i))
					member_lost(
					    l, &l->m[i], WIMM_E_TIMEDOUT,
					    "its ring stayed full (no durable acknowledgement)");
			break;
		}
		sleep_members(l, 1);
	}
	int rc = ledger_status(l);
	if (rc && rc != WIMM_E_REFUSED && !l->err[0])
		snprintf(l->err, sizeof(l->err), "fewer than %u servers left", l->qa);
	if (rc)
		return rc;
	*seq = l->next_seq++;
	return 0;
}

/* The header and the caller's bytes in one buffer. */
static int frame(struct wimm_log_ledger *l, uint64_t head, const void *data, size_t len)
{
	if (l->cap < LOG_LEDGER_HDR + len) {
		unsigned char *b = realloc(l->buf, LOG_LEDGER_HDR + len);
		if (!b)
			return WIMM_E_NOMEM;
		l->buf = b;
		l->cap = LOG_LEDGER_HDR + len;
	}
	log_put64(l->buf, head);
	if (len)
		memcpy(l->buf + LOG_LEDGER_HDR, data, len);
	return 0;
}

int wimm_log_ledger_append(struct wimm_log_ledger *l, const void *data, size_t len, uint64_t *seq)
{
	uint64_t s;
	if (!l || (len && !data))
		return WIMM_E_INVAL;
	int rc = wimm_log_ledger_poll(l);
	if (!rc)
		rc = frame(l, l->lac, data, len);
	if (!rc)
		rc = send_all(l, l->buf, LOG_LEDGER_HDR + len, &s);
	if (rc)
		return rc;
	l->sent_lac = l->lac;
	if (seq)
		*seq = s;
	return 0;
}

int wimm_log_ledger_state(const struct wimm_log_ledger *l, struct wimm_log_ledger_state *out)
{
	if (!l || !out)
		return WIMM_E_INVAL;
	*out = (struct wimm_log_ledger_state){.appended = l->next_seq - 1,
					      .lac = l->lac,
					      .settled = l->settled,
					      .copied = l->copied,
					      .epoch = l->epoch,
					      .members = l->n,
					      .live = live_count(l),
					      .ack_quorum = l->qa};
	return 0;
}

const char *wimm_log_ledger_error(const struct wimm_log_ledger *l)
{
	return l ? l->err : "";
}

/* ---------------------------------------------------------------- open */

/* Where the ledger stands on every server: the highest epoch, and how many
 * answered. One short-lived reader each, on that member's context (its
 * writer does not exist yet): one endpoint per server, not two. */
static unsigned probe(struct wimm_log_ledger *l, uint32_t *epoch)
{
	unsigned answered = 0;
	*epoch = 0;
	for (unsigned i = 0; i < l->n; i++) {
		struct wimm_log_reader *r = NULL;
		struct wimm_log_ledger_info info;
		/* No writer waits for heartbeats yet: longer than a member's
		 * try (a burst of connects), but a dead server costs this much
		 * at every open. */
		int wait =
		    l->attr.timeout_ms < PROBE_TIMEOUT_MS ? l->attr.timeout_ms : PROBE_TIMEOUT_MS;
		int rc = wimm_log_reader_open(l->m[i].ctx, l->m[i].addr, 0, wait, &r);
		if (!rc)
			rc = wimm_log_reader_ledger(r, l->attr.id, &info, l->attr.timeout_ms);
		wimm_log_reader_close(&r);
		if (rc) {
			say(l, WIMM_LOG_WARN, "ledger %llx: server %s does not answer: %s",
			    (unsigned long long)l->attr.id, l->m[i].addr, wimm_strerror(rc));
			continue;
		}
		answered++;
		l->m[i].answered = 1;
		if (info.epoch > *epoch)
			*epoch = info.epoch;
	}
	return answered;
}

struct copy {
	struct wimm_log_ledger *l;
	struct member *to;
	uint64_t next;
	int rc;
};

/* Poll every member (their heartbeats go on) until done(arg) or the
 * deadline. */
static int ledger_until(struct wimm_log_ledger *l, int (*done)(void *), void *arg)
{
	int64_t deadline = log_now_ms() + l->attr.timeout_ms;
	for (;;) {
		int rc = wimm_log_ledger_poll(l);
		if (done(arg))
			return 0;
		if (rc == WIMM_E_REFUSED)
			return rc;
		if (log_now_ms() > deadline)
			return WIMM_E_TIMEDOUT;
		sleep_members(l, 1);
	}
}

static int copy_done(void *arg)
{
	struct copy *c = arg;
	return c->rc != WIMM_E_AGAIN || !c->to->live;
}

static int copy_entry(void *arg, const struct wimm_log_entry *e)
{
	struct copy *c = arg;
	uint64_t s;
	c->rc = wimm_log_append(c->to->w, e->data, e->len, 0, &s);
	if (c->rc == WIMM_E_AGAIN) {
		/* Ring full: the append is retried while everyone is polled. */
		while (c->rc == WIMM_E_AGAIN && c->to->live) {
			int rc = ledger_until(c->l, copy_done, c);
			if (rc)
				c->rc = rc;
			else if (c->to->live)
				c->rc = wimm_log_append(c->to->w, e->data, e->len, 0, &s);
		}
		if (!c->to->live && c->rc == WIMM_E_AGAIN)
			c->rc = WIMM_E_DISCONNECTED;
	}
	if (!c->rc && s != e->seq)
		c->rc = WIMM_E_PROTO;
	if (c->rc)
		return 1;
	c->next = e->seq + 1;
	c->l->copied++;
	return 0;
}

static int member_durable(void *arg)
{
	struct copy *c = arg;
	return !c->to->live || c->to->durable >= c->next;
}

/* Bring member m from its last entry up to `last`, read from member src. */
static int copy_up(struct wimm_log_ledger *l, struct member *src, struct member *m, uint64_t from,
		   uint64_t last)
{
	struct wimm_log_reader *r = NULL;
	struct wimm_ctx *rctx = NULL;
	struct copy c = {.l = l, .to = m, .next = from};
	/* The reader needs a context of its own: the members' belong to
	 * their writers. */
	int rc = wimm_ctx_open(wimm_ctx_fabric(m->ctx), NULL, &rctx);
	if (!rc)
		rc = wimm_log_reader_open(rctx, src->addr, 0, MEMBER_TIMEOUT_MS, &r);
	while (!rc && c.next <= last) {
		uint64_t want = last - c.next + 1;
		int n = wimm_log_read_writer(r, l->attr.id, c.next,
					     want > 100000 ? 100000 : (uint32_t)want, copy_entry,
					     &c, l->attr.timeout_ms);
		rc = n < 0 ? n : c.rc ? c.rc : n == 0 ? WIMM_E_PROTO : 0;
	}
	wimm_log_reader_close(&r);
	wimm_ctx_close(&rctx);
	c.next = last;
	if (!rc)
		rc = ledger_until(l, member_durable, &c);
	return rc ? rc : m->live ? 0 : WIMM_E_DISCONNECTED;
}

/* The highest entry a live member holds is the last; everyone gets it. */
static int settle(struct wimm_log_ledger *l)
{
	uint64_t last = 0, at[MAX_MEMBERS] = {0};
	struct member *src = NULL;
	for (unsigned i = 0; i < l->n; i++) {
		struct wimm_log_writer_state ws;
		if (!l->m[i].live)
			continue;
		wimm_log_writer_state(l->m[i].w, &ws);
		at[i] = ws.appended;
		l->m[i].durable = ws.durable;
		if (!src || at[i] > last) {
			last = at[i];
			src = &l->m[i];
		}
	}
	for (unsigned i = 0; i < l->n; i++) {
		struct member *m = &l->m[i];
		if (!m->live || at[i] >= last)
			continue;
		int rc = copy_up(l, src, m, at[i] + 1, last);
		if (rc == WIMM_E_REFUSED)
			return rc;
		if (rc)
			member_lost(l, m, rc, wimm_log_writer_error(m->w));
		else
			m->durable = last;
	}
	l->settled = last;
	l->next_seq = last + 1;
	update_lac(l);
	return ledger_status(l);
}

int wimm_log_ledger_open(struct wimm_ctx *const *ctxs, const char *const *addrs, unsigned n,
			 const struct wimm_log_ledger_attr *attr, struct wimm_log_ledger **out)
{
	if (!ctxs || !addrs || !attr || !out || !attr->id || n == 0 || n > MAX_MEMBERS ||
	    attr->ack_quorum > n)
		return WIMM_E_INVAL;
	struct wimm_log_ledger *l = calloc(1, sizeof(*l));
	int rc = WIMM_E_NOMEM;
	if (!l)
		return rc;
	l->attr = *attr;
	if (l->attr.timeout_ms <= 0)
		l->attr.timeout_ms = DEFAULT_TIMEOUT_MS;
	l->n = n;
	l->qa = attr->ack_quorum ? attr->ack_quorum : n / 2 + 1;
	l->next_seq = 1;
	for (unsigned i = 0; i < n; i++) {
		l->m[i].ctx = ctxs[i];
		if (!ctxs[i] || !addrs[i]) {
			rc = WIMM_E_INVAL;
			goto fail;
		}
		l->m[i].addr = strdup(addrs[i]);
		if (!l->m[i].addr)
			goto fail;
	}
	int recover = (attr->flags & WIMM_LOG_LEDGER_RECOVER) != 0;
	unsigned need = recover ? n - l->qa + 1 : l->qa;
	if (need < l->qa)
		need = l->qa;
	uint32_t top;
	if (probe(l, &top) < need) {
		snprintf(l->err, sizeof(l->err), "fewer than %u of %u servers answered", need, n);
		rc = WIMM_E_DISCONNECTED;
		goto fail;
	}
	l->epoch = recover ? top + 1 : (top ? top : 1);
	for (unsigned i = 0; i < n; i++) {
		struct wimm_log_writer_attr wa = {
		    .id = attr->id, .timeout_ms = MEMBER_TIMEOUT_MS, .epoch = l->epoch};
		struct member *m = &l->m[i];
		if (!m->answered)
			continue;
		/* Short tries, the others polled in between (their heartbeats),
		 * until the ledger's timeout: a burst of connects may be
		 * refused for a moment. */
		int64_t deadline = log_now_ms() + l->attr.timeout_ms;
		do {
			rc = wimm_log_writer_open(m->ctx, m->addr, &wa, &m->w);
			wimm_log_ledger_poll(l);
		} while (rc && rc != WIMM_E_REFUSED && rc != WIMM_E_PROTO &&
			 log_now_ms() < deadline);
		if (rc == WIMM_E_REFUSED) {
			snprintf(l->err, sizeof(l->err),
				 "server %s: the ledger is fenced above epoch %u", m->addr,
				 l->epoch);
			goto fail;
		}
		m->live = rc == 0;
		if (rc)
			say(l, WIMM_LOG_WARN, "ledger %llx: server %s: %s",
			    (unsigned long long)attr->id, m->addr, wimm_strerror(rc));
	}
	rc = live_count(l) < need ? WIMM_E_DISCONNECTED : settle(l);
	if (rc) {
		if (!l->err[0])
			snprintf(l->err, sizeof(l->err), "fewer than %u of %u servers reachable",
				 need, n);
		goto fail;
	}
	/* What the servers hold carries older LACs: close says the settled one. */
	l->sent_lac = l->settled ? 0 : l->lac;
	*out = l;
	return 0;
fail:
	say(l, WIMM_LOG_ERROR, "ledger %llx: %s", (unsigned long long)attr->id,
	    l->err[0] ? l->err : wimm_strerror(rc));
	wimm_log_ledger_close(&l, 0);
	return rc;
}

int wimm_log_ledger_close(struct wimm_log_ledger **pl, int timeout_ms)
{
	struct wimm_log_ledger *l = pl ? *pl : NULL;
	int rc = 0;
	if (!l)
		return 0;
	if (timeout_ms != 0 && l->next_seq > 1) {
		rc = wimm_log_ledger_wait(l, l->next_seq - 1, timeout_ms);
		/* The final LAC, as an entry of its own: readers deliver up to
		 * the LAC an entry carries, so the last ones need this. */
		if (!rc && l->lac > l->sent_lac) {
			uint64_t s = 0;
			rc = frame(l, l->lac | LOG_LEDGER_MARK, NULL, 0);
			if (!rc)
				rc = send_all(l, l->buf, LOG_LEDGER_HDR, &s);
			if (!rc)
				rc = wimm_log_ledger_wait(l, s, timeout_ms);
		}
	}
	for (unsigned i = 0; i < l->n; i++) {
		wimm_log_writer_close(&l->m[i].w, l->m[i].live ? 1000 : 0);
		free(l->m[i].addr);
	}
	free(l->buf);
	free(l);
	*pl = NULL;
	return rc;
}
