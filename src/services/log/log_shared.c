/* The log server's shared ring: one window that many writers append to,
 * each entry's place reserved by a fetch-and-add on the tail word (or, on a
 * fabric without atomics, granted by the server on request), entries taken
 * in place order as their completions arrive, holes skipped after hole_ms.
 *
 * The head is the next place to take. A completion names its place by the
 * low 28 bits of place / 16; since no writer may write at or past the limit
 * (head + ring), the place is the one within a ring ahead of the head, and
 * one that maps behind the head came after the head skipped it. A landed
 * entry is marked in `owner` (one word per 16 bytes of the ring: the
 * writer's index + 1); every check of the entry itself (header, CRC,
 * sequence) happens when the head reaches it, when its bytes can no longer
 * change under a legitimate writer. */
#include <stdlib.h>
#include <string.h>

#include "log_server_internal.h"

#define DEFAULT_HOLE_MS 1000u
#define RX_DEPTH 64

struct dead_range {
	uint64_t off, len;
	int pad; /* the end of a lap no grant fitted into, not a writer's */
};

struct ask {
	int slot;
	uint64_t accepted;
	uint64_t len;
};

struct log_shared {
	unsigned char *mem; /* LOG_SHARED_CTL bytes of control words, then the ring */
	struct wimm_mr *mr;
	struct wimm_listener *l;
	uint32_t ring, hole_ms;
	int by_request;
	uint64_t head, tail; /* tail: the next place granted (by request only) */
	/* Per 16 bytes of the ring, a landed entry's owner: its connection's
	 * accept count << 24 | its writer index + 1 (0: nothing landed). */
	uint64_t *owner;
	uint64_t pending;   /* landed entries the head has not reached */
	int64_t hole_since; /* when the head began to wait at an unwritten place; 0: not */
	uint64_t waiting;   /* the lowest place a writer said it waits at; UINT64_MAX: none */
	/* By request the server knows who holds a place: a grant whose writer
	 * went away unwritten is skipped at once, not after hole_ms. */
	struct dead_range *dead;
	size_t ndead, cap;
	struct ask *asks; /* reservations waiting for room, oldest first */
	size_t nasks;
	uint64_t holes, late;
};

#define say(obj, lvl, ...) log_say((obj)->log, (obj)->log_arg, lvl, __VA_ARGS__)

static unsigned char *ring_at(const struct log_shared *h, uint64_t place)
{
	return h->mem + LOG_SHARED_CTL + place % h->ring;
}

static void publish_limit(struct log_shared *h)
{
	unsigned char b[8];
	uint64_t v;
	log_put64(b, h->head + h->ring);
	memcpy(&v, b, 8);
	__atomic_store_n((uint64_t *)(h->mem + LOG_SHARED_LIMIT), v, __ATOMIC_RELEASE);
}

int log_shared_open(struct wimm_log_server *s, const char *addr, uint32_t ring, uint32_t hole_ms)
{
	struct wimm_fabric_limits lim;
	struct log_shared *h;
	int rc = wimm_ctx_limits(s->ctx, &lim);
	if (rc)
		return rc;
	if (ring < 4096 || ring > (64u << 20) || ring % 16 || hole_ms > 600000)
		return WIMM_E_INVAL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return WIMM_E_NOMEM;
	s->sh = h;
	h->ring = ring;
	h->hole_ms = hole_ms ? hole_ms : DEFAULT_HOLE_MS;
	h->by_request = lim.atomic_bytes != 8;
	h->cap = s->max_conns + 4; /* a dead grant per connection, a pad per lap */
	h->waiting = UINT64_MAX;
	h->mem = calloc(1, LOG_SHARED_CTL + (size_t)ring);
	h->owner = calloc(ring / 16, sizeof(*h->owner));
	h->dead = calloc(h->cap, sizeof(*h->dead));
	h->asks = calloc(h->cap, sizeof(*h->asks));
	if (!h->mem || !h->owner || !h->dead || !h->asks)
		return WIMM_E_NOMEM;
	publish_limit(h);
	/* Readable for the limit word; atomics where the fabric has them (by
	 * request the server keeps the tail itself and never reads the word). */
	unsigned access = WIMM_REMOTE_WRITE | WIMM_REMOTE_READ;
	if (!h->by_request)
		access |= WIMM_REMOTE_ATOMIC;
	rc = wimm_mr_reg(s->ctx, h->mem, LOG_SHARED_CTL + (size_t)ring, access, &h->mr);
	if (rc)
		return rc;
	struct wimm_conn_attr la = {.rx_depth = RX_DEPTH};
	return wimm_listen(s->ctx, addr, &la, &h->l);
}

void log_shared_close(struct wimm_log_server *s)
{
	struct log_shared *h = s->sh;
	if (!h)
		return;
	wimm_listener_delete(&h->l);
	wimm_mr_dereg(&h->mr);
	free(h->mem);
	free(h->owner);
	free(h->dead);
	free(h->asks);
	free(h);
	s->sh = NULL;
}

int log_shared_port(const struct wimm_log_server *s)
{
	return s->sh ? wimm_listener_port(s->sh->l) : WIMM_E_INVAL;
}

struct wimm_listener *log_shared_listener(const struct wimm_log_server *s)
{
	return s->sh ? s->sh->l : NULL;
}

void log_shared_window(const struct wimm_log_server *s, struct wimm_conn_attr *a)
{
	a->window = s->sh->mr;
	a->window_off = 0;
	a->window_len = LOG_SHARED_CTL + (size_t)s->sh->ring;
	/* The hello comes as a send_imm: the window is everyone's. */
	a->recv_size = LOG_HELLO_LEN;
}

void log_shared_resume(const struct wimm_log_server *s, struct log_resume *r)
{
	r->ring_size = s->sh->ring;
	r->flags = s->sh->by_request ? LOG_RESUME_BY_REQUEST : 0;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	r->flags |= LOG_RESUME_TAIL_BE;
#endif
	r->base = s->sh->tail;
}

/* The place a 28-bit unit names: ahead of the head by less than `span`,
 * or UINT64_MAX when it maps behind the head (late, or never reserved). */
static uint64_t place_of(const struct log_shared *h, uint32_t unit, uint64_t span)
{
	uint64_t d = (unit - (uint32_t)(h->head / 16)) & LOG_SH_MASK;
	return d * 16 < span ? h->head + d * 16 : UINT64_MAX;
}

static uint64_t owner_of(const struct sconn *k)
{
	return k->accepted << 24 | (uint64_t)(k->wi + 1);
}

/* The connection that landed an entry, if it is still its writer's live
 * one. */
static struct sconn *conn_of(struct wimm_log_server *s, uint64_t owner)
{
	struct sconn *k = log_server_live(s, (size_t)(owner & 0xffffff) - 1);
	return k && k->role == LOG_ROLE_SHARED && !k->drop && k->accepted == owner >> 24 ? k : NULL;
}

static void take_reserve(struct sconn *k, uint32_t units)
{
	struct log_shared *h = k->s->sh;
	uint64_t len = (uint64_t)units * 16;
	if (!h->by_request || k->grant || len < 32 || len > h->ring || h->nasks == h->cap) {
		/* With atomics the place is the tail word's; one ask at a time. */
		log_server_refuse(k, LOG_ERR_PROTO, 0, 0);
		return;
	}
	h->asks[h->nasks++] = (struct ask){.slot = k->slot, .accepted = k->accepted, .len = len};
	k->grant = 1;
}

static void take_entry_doorbell(struct sconn *k, uint32_t unit)
{
	struct log_shared *h = k->s->sh;
	uint64_t place = place_of(h, unit, h->ring);
	if (place == UINT64_MAX) {
		h->late++;
		log_server_refuse(k, LOG_ERR_SKIPPED, (uint64_t)unit * 16, k->expect_seq);
		return;
	}
	if (h->by_request && (k->grant != 2 || place != k->grant_off)) {
		log_server_refuse(k, LOG_ERR_BOUNDS, place, k->grant_len);
		return;
	}
	uint64_t *o = &h->owner[(place % h->ring) / 16];
	if (*o) {
		/* Two completions at one place: one of the writers lied, which
		 * one is not known. This one sends again (the other entry is
		 * checked when the head reaches it). */
		h->late++;
		log_server_refuse(k, LOG_ERR_SKIPPED, place, k->expect_seq);
		return;
	}
	*o = owner_of(k);
	h->pending++;
	k->grant = 0;
}

/* A writer holds a place past the limit and waits for room: if the head
 * stalls with nothing landed before it, that place is where a skip ends. */
static void take_wait(struct sconn *k, uint32_t unit)
{
	struct log_shared *h = k->s->sh;
	uint64_t place = place_of(h, unit, (uint64_t)LOG_SH_MASK * 16);
	if (place == UINT64_MAX) {
		/* The head is past it: that place was skipped. */
		log_server_refuse(k, LOG_ERR_SKIPPED, (uint64_t)unit * 16, k->expect_seq);
		return;
	}
	if (place < h->waiting)
		h->waiting = place;
}

void log_shared_doorbell(struct sconn *k, uint32_t imm)
{
	uint32_t f[2];
	wimm_imm_unpack(log_layout_out(), imm, f);
	if (k->role != LOG_ROLE_SHARED)
		log_server_refuse(k, LOG_ERR_PROTO, 0, 0);
	else if (f[0] == LOG_K_ENTRY)
		take_entry_doorbell(k, f[1]);
	else if (f[0] == LOG_K_RESERVE)
		take_reserve(k, f[1]);
	else if (f[0] == LOG_K_WAIT)
		take_wait(k, f[1]);
	else
		log_server_refuse(k, LOG_ERR_PROTO, 0, 0);
}

void log_shared_conn_gone(struct sconn *k)
{
	struct log_shared *h = k->s->sh;
	if (h && k->grant == 2 && h->ndead < h->cap)
		h->dead[h->ndead++] = (struct dead_range){k->grant_off, k->grant_len, 0};
	k->grant = 0;
}

/* An entry the head will not take: its writer's connection (if it is the
 * one that wrote it) is refused and dropped; the writer reconnects and
 * sends again what is not durable. */
static void refuse_owner(struct wimm_log_server *s, uint64_t owner, uint32_t code, uint64_t a,
			 uint64_t b)
{
	struct sconn *k = conn_of(s, owner);
	if (code == LOG_ERR_SKIPPED)
		s->sh->late++;
	if (k)
		log_server_refuse(k, code, a, b);
}

/* The entry at the head, checked: its extent, or 0 when it is not an
 * entry (then the head treats its place as a hole). */
static uint32_t check_entry(struct wimm_log_server *s, uint64_t owner, uint64_t *seq,
			    const unsigned char **payload, uint32_t *len)
{
	struct log_shared *h = s->sh;
	const unsigned char *p = ring_at(h, h->head);
	size_t off = h->head % h->ring;
	uint32_t l = log_get32(p), flags = log_get32(p + 4);
	*seq = log_get64(p + 8);
	*payload = NULL;
	if ((flags & 0xffff0000u) == LOG_SH_MAGIC && (flags & LOG_SH_PAD)) {
		if (l >= 32 && l <= h->ring && l % 16 == 0)
			return l;
	} else if ((flags & 0xffff0000u) == LOG_SH_MAGIC && l <= h->ring) {
		uint32_t ext = log_sh_extent(l);
		if (ext <= h->ring - off &&
		    wimm_log_crc32c(0, p, LOG_SH_HDR + l) == log_get32(p + LOG_SH_HDR + l)) {
			/* Whole, but whose? Another member's entry at this place
			 * means one of the two lied about the place. */
			size_t wi = (size_t)(owner & 0xffffff) - 1;
			if (log_get64(p + 16) != log_store_writer_at(s->st, wi)->id) {
				refuse_owner(s, owner, LOG_ERR_SKIPPED, h->head, *seq);
				return 0;
			}
			*payload = p + LOG_SH_HDR;
			*len = l;
			return ext;
		}
	}
	refuse_owner(s, owner, LOG_ERR_CRC, *seq, 0);
	return 0;
}

/* Store one checked entry: 1 taken, 0 not. */
static int store_entry(struct wimm_log_server *s, uint64_t owner, uint64_t seq,
		       const unsigned char *payload, uint32_t len)
{
	size_t wi = (size_t)(owner & 0xffffff) - 1;
	struct log_writer_state *w = log_store_writer_at(s->st, wi);
	if (seq <= w->last_seq) {
		s->duplicates++;
		return 0;
	}
	if (seq != w->last_seq + 1) {
		/* An earlier entry of this writer was skipped: it sends again
		 * from there. */
		refuse_owner(s, owner, LOG_ERR_SKIPPED, s->sh->head, w->last_seq + 1);
		return 0;
	}
	uint64_t pos;
	if (log_store_append(s->st, wi, seq, payload, len, &pos)) {
		s->failed = 1;
		return 0;
	}
	struct sconn *k = log_server_live(s, wi);
	if (k && k->role == LOG_ROLE_SHARED && seq >= k->expect_seq)
		k->expect_seq = seq + 1;
	return 1;
}

/* The head moves past [head, head + ext): an entry that landed inside it
 * is now behind the head. */
static void pass(struct wimm_log_server *s, uint64_t ext)
{
	struct log_shared *h = s->sh;
	for (uint64_t u = 16; u < ext && u < h->ring; u += 16) {
		uint64_t *o = &h->owner[((h->head + u) % h->ring) / 16];
		if (*o) {
			refuse_owner(s, *o, LOG_ERR_SKIPPED, h->head + u, 0);
			*o = 0;
			h->pending--;
		}
	}
	h->head += ext;
	h->hole_since = 0;
	if (h->waiting <= h->head)
		h->waiting = UINT64_MAX; /* the head is there */
}

/* By request, the live grant at the head (its writer stalls), or NULL. */
static struct sconn *grant_at_head(struct wimm_log_server *s)
{
	for (uint32_t i = 0; i < s->max_conns; i++) {
		struct sconn *k = s->conns[i];
		if (k && k->role == LOG_ROLE_SHARED && k->grant == 2 && k->grant_off == s->sh->head)
			return k;
	}
	return NULL;
}

/* Skip the hole at the head when it is due: at once a grant whose writer
 * went away (or a grant's padding); after hole_ms a place not written while
 * later ones landed or wait. 1 when the head moved. */
static int skip_hole(struct wimm_log_server *s)
{
	struct log_shared *h = s->sh;
	for (size_t i = 0; i < h->ndead; i++)
		if (h->dead[i].off == h->head) {
			uint64_t len = h->dead[i].len;
			if (!h->dead[i].pad)
				h->holes++;
			h->dead[i] = h->dead[--h->ndead];
			pass(s, len);
			return 1;
		}
	struct sconn *g = h->by_request ? grant_at_head(s) : NULL;
	if (!h->pending && h->waiting == UINT64_MAX && !(g && h->nasks)) {
		h->hole_since = 0;
		return 0;
	}
	int64_t now = log_now_ms();
	if (!h->hole_since)
		h->hole_since = now;
	if (now - h->hole_since < (int64_t)h->hole_ms)
		return 0;
	uint64_t d = 16;
	if (g) {
		d = g->grant_len;
		g->grant = 0; /* its write is refused from now on */
	} else {
		while (d < h->ring && !h->owner[((h->head + d) % h->ring) / 16])
			d += 16;
		if (h->waiting > h->head && h->waiting - h->head < d)
			d = h->waiting - h->head;
	}
	say(s, WIMM_LOG_WARN,
	    "shared ring: place %llu not written within %u ms, %llu bytes skipped",
	    (unsigned long long)h->head, h->hole_ms, (unsigned long long)d);
	h->holes++;
	pass(s, d);
	return 1;
}

/* Hand out waiting reservations that have room now, oldest first. */
static void grant(struct wimm_log_server *s)
{
	struct log_shared *h = s->sh;
	size_t i = 0;
	for (; i < h->nasks; i++) {
		struct ask *a = &h->asks[i];
		struct sconn *k = s->conns[a->slot];
		if (!k || k->accepted != a->accepted || k->drop || k->grant != 1)
			continue;
		/* Never across the ring's end: the rest of the lap is skipped. */
		uint64_t left = h->ring - h->tail % h->ring;
		uint64_t pad = a->len > left ? left : 0;
		if (h->tail + pad + a->len > h->head + h->ring)
			break;
		uint64_t place = h->tail + pad;
		if (wimm_write_imm(k->c, NULL, 0, 0, 0,
				   log_imm_out(LOG_K_GRANT, (place / 16) & LOG_SH_MASK), 0))
			break; /* no credit now: it keeps its turn */
		if (pad && h->ndead < h->cap)
			h->dead[h->ndead++] = (struct dead_range){h->tail, pad, 1};
		h->tail = place + a->len;
		k->grant = 2;
		k->grant_off = place;
		k->grant_len = a->len;
	}
	memmove(h->asks, h->asks + i, (h->nasks - i) * sizeof(*h->asks));
	h->nasks -= i;
}

int log_shared_advance(struct wimm_log_server *s)
{
	struct log_shared *h = s->sh;
	int taken = 0;
	if (!h)
		return 0;
	uint64_t head0 = h->head;
	while (!s->failed) {
		uint64_t *o = &h->owner[(h->head % h->ring) / 16];
		if (!*o) {
			if (!skip_hole(s))
				break;
			continue;
		}
		uint64_t owner = *o, seq;
		uint32_t len = 0;
		const unsigned char *payload;
		*o = 0;
		h->pending--;
		uint32_t ext = check_entry(s, owner, &seq, &payload, &len);
		if (!ext)
			continue; /* a hole now, skipped as any other */
		if (payload)
			taken += store_entry(s, owner, seq, payload, len);
		pass(s, ext);
	}
	if (h->head != head0)
		publish_limit(h);
	if (h->by_request)
		grant(s);
	return taken;
}

int log_shared_timeout(const struct wimm_log_server *s, int timeout_ms)
{
	const struct log_shared *h = s->sh;
	if (!h || !h->hole_since)
		return timeout_ms;
	int64_t left = h->hole_since + h->hole_ms - log_now_ms();
	if (left < 0)
		left = 0;
	return timeout_ms < 0 || left < timeout_ms ? (int)left : timeout_ms;
}

void log_shared_stat(const struct wimm_log_server *s, struct wimm_log_stat *out)
{
	if (!s->sh)
		return;
	out->holes = s->sh->holes;
	out->shared_ring = s->sh->ring;
	out->late = (uint32_t)s->sh->late;
}
