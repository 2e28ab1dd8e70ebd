/* wimm_kv server: the requests (put grant, get lookup, delete, stat, put by
 * send) and the commit of a value write. Every request is checked before
 * anything changes; a malformed one is answered with WIMM_E_INVAL. */
#include <stdlib.h>

#include "kv_server.h"

static void answer_status(struct wimm_kv_server *s, struct kv_client *cl, uint32_t imm, int status)
{
	unsigned char m[4];
	kv_put32(m, (uint32_t)status);
	kv_send(s, cl, imm, m, 4);
}

/* A grant number for a new put: a free one, else one that expired (its
 * late write, if it ever comes, then fails the new grant's checks). */
static uint32_t free_grant(const struct kv_client *cl)
{
	uint32_t gid, expired = KV_MAX_GRANTS;
	for (gid = 0; gid < KV_MAX_GRANTS; gid++) {
		if (cl->grant[gid].state == KV_GRANT_FREE)
			return gid;
		if (cl->grant[gid].state == KV_GRANT_EXPIRED && expired == KV_MAX_GRANTS)
			expired = gid;
	}
	return expired;
}

/* Key of a request body at p[off..]: u16 klen, key. */
static int parse_key(const unsigned char *p, size_t len, size_t off, const unsigned char **key,
		     uint32_t *klen)
{
	if (len < off + 2)
		return WIMM_E_INVAL;
	*klen = kv_get16(p + off);
	if (*klen == 0 || *klen > WIMM_KV_MAX_KEY || len < off + 2 + *klen)
		return WIMM_E_INVAL;
	*key = p + off + 2;
	return 0;
}

static void do_put(struct wimm_kv_server *s, struct kv_client *cl, const struct wimm_event *ev)
{
	const unsigned char *p = ev->data, *key;
	uint32_t klen, gid;
	int32_t unit;
	struct kv_entry *e = NULL;
	unsigned char m[48];
	int rc = ev->len >= 8 ? parse_key(p, ev->len, 8, &key, &klen) : WIMM_E_INVAL;
	if (rc == 0 && ev->len != 10 + klen)
		rc = WIMM_E_INVAL;
	if (rc < 0)
		goto refuse;
	/* With a shared index the slot holds the key before the value. */
	uint32_t len = kv_get32(p), flags = kv_get32(p + 4);
	uint64_t payload = (uint64_t)len + (s->ix ? klen : 0);
	int order = payload > UINT32_MAX ? -1 : kv_class_of((size_t)payload);
	rc = WIMM_E_INVAL;
	if (flags & ~(uint32_t)WIMM_KV_PIN)
		goto refuse;
	rc = WIMM_E_TOOBIG;
	if (order < 0 || ((size_t)WIMM_KV_MIN_SLOT << order) > s->max_slot)
		goto refuse;
	gid = free_grant(cl);
	rc = WIMM_E_AGAIN;
	if (gid == KV_MAX_GRANTS)
		goto refuse;
	uint32_t hash = kv_key_hash(key, klen);
	if (s->ix && (rc = kv_index_hold(s, key, klen, hash, &e)) < 0)
		goto refuse;
	rc = kv_alloc(s, cl->arena, (unsigned)order, &unit);
	if (rc < 0) {
		if (e)
			kv_index_release(s, e);
		goto refuse;
	}
	struct kv_grant *g = &cl->grant[gid];
	g->state = KV_GRANT_LIVE;
	g->expires_at = kv_now_ms() + s->grant_ms;
	g->hash = hash;
	g->e = e;
	g->len = (uint32_t)payload;
	g->klen = klen;
	g->flags = flags;
	g->order = (unsigned)order;
	g->unit = unit;
	g->version = ++s->version;
	memcpy(g->key, key, klen);
	s->stats.grants_pending++;
	kv_put32(m, 0);
	kv_put32(m + 4, gid);
	kv_put64(m + 8, (uint64_t)unit * WIMM_KV_MIN_SLOT);
	kv_put64(m + 16, g->version);
	if (s->ix)
		kv_index_grant_reply(s, g, cl->arena, m);
	kv_send(s, cl, ev->imm, m, s->ix ? 48 : 24);
	return;
refuse:
	answer_status(s, cl, ev->imm, rc);
}

/* Check a written slot against its grant: header, key hash, version,
 * length, value CRC (and with a shared index the key in front of it). */
static int check_slot(const unsigned char *slot, const struct kv_grant *g, int with_key)
{
	struct kv_hdr h;
	if (kv_hdr_decode(slot, &h) < 0 || h.version != g->version || h.len != g->len ||
	    h.khash != g->hash || wimm_kv_crc32c(slot + WIMM_KV_HEADER, h.len) != h.vcrc)
		return WIMM_KV_E_CORRUPT;
	if (with_key && (kv_get32(slot + KV_HDR_KLEN) != g->klen ||
			 memcmp(slot + WIMM_KV_HEADER, g->key, g->klen) != 0))
		return WIMM_KV_E_CORRUPT;
	return 0;
}

void kv_grant_drop(struct wimm_kv_server *s, struct kv_client *cl, struct kv_grant *g)
{
	kv_buddy_free(&s->arena[cl->arena].buddy, g->unit, g->order);
	if (g->e)
		kv_index_release(s, g->e);
	g->e = NULL;
}

void kv_commit(struct wimm_kv_server *s, struct kv_client *cl, const struct wimm_event *ev)
{
	uint32_t gid = KV_WIMM_GRANT(ev->imm);
	unsigned char m[12];
	if (gid < KV_MAX_GRANTS && cl->grant[gid].state == KV_GRANT_EXPIRED) {
		/* Revoked before its value came: the slot went back to the
		 * arena, so what landed there may already be another grant's;
		 * nothing is published. */
		cl->grant[gid].state = KV_GRANT_FREE;
		kv_put32(m, (uint32_t)WIMM_KV_E_EXPIRED);
		kv_put64(m + 4, cl->grant[gid].version);
		kv_send(s, cl, KV_IMM(KV_OP_DONE, gid), m, 12);
		return;
	}
	if (gid >= KV_MAX_GRANTS || cl->grant[gid].state != KV_GRANT_LIVE) {
		/* Not a grant of ours: whatever it wrote is inside its own
		 * arena, in no published slot that it did not write itself. */
		kv_log(s, WIMM_LOG_WARN, "kv: client %u: write for grant %u it does not hold",
		       cl->id, gid);
		s->stats.bad_puts++;
		kv_put32(m, (uint32_t)WIMM_KV_E_CORRUPT);
		kv_put64(m + 4, 0);
		kv_send(s, cl, KV_IMM(KV_OP_DONE, gid & 0xfff), m, 12);
		return;
	}
	struct kv_grant *g = &cl->grant[gid];
	const unsigned char *slot =
	    s->pool + (size_t)cl->arena * s->arena_len + (size_t)g->unit * WIMM_KV_MIN_SLOT;
	int rc = 0;
	if (KV_WIMM_HASH(ev->imm) != (g->hash & 0x7fffu) || KV_WIMM_CLASS(ev->imm) != g->order ||
	    (ev->len != 0 && ev->len != WIMM_KV_HEADER + g->len))
		rc = WIMM_KV_E_CORRUPT;
	if (!rc)
		rc = check_slot(slot, g, s->ix != NULL);
	/* With a shared index the client publishes it by its swap. */
	if (!rc)
		rc = s->ix ? kv_index_written(s, cl, g) : kv_publish(s, g, cl->arena);
	if (rc < 0) {
		/* Never published, never looked up: free at once. */
		kv_grant_drop(s, cl, g);
		s->stats.bad_puts += rc == WIMM_KV_E_CORRUPT;
	} else if (!s->ix) {
		s->stats.puts++;
	}
	g->e = NULL; /* dropped, or its hold passed to the written value */
	g->state = KV_GRANT_FREE;
	s->stats.grants_pending--;
	kv_put32(m, (uint32_t)rc);
	kv_put64(m + 4, g->version);
	kv_send(s, cl, KV_IMM(KV_OP_DONE, gid), m, 12);
}

/* The second design: the value came in the request; copy it into a slot of
 * the client's arena and publish, all before answering. */
static void do_sput(struct wimm_kv_server *s, struct kv_client *cl, const struct wimm_event *ev)
{
	const unsigned char *p = ev->data, *key;
	uint32_t klen;
	int32_t unit;
	if (s->ix) {
		/* The server publishes nothing of its own beside a shared index. */
		answer_status(s, cl, ev->imm, WIMM_E_NOTSUP);
		return;
	}
	int rc = ev->len >= 8 ? parse_key(p, ev->len, 8, &key, &klen) : WIMM_E_INVAL;
	uint32_t len = rc == 0 ? kv_get32(p) : 0, flags = rc == 0 ? kv_get32(p + 4) : 0;
	if (rc == 0 && (ev->len != 10 + klen + (size_t)len || (flags & ~(uint32_t)WIMM_KV_PIN)))
		rc = WIMM_E_INVAL;
	int order = kv_class_of(len);
	if (rc == 0 && (order < 0 || ((size_t)WIMM_KV_MIN_SLOT << order) > s->max_slot))
		rc = WIMM_E_TOOBIG;
	if (rc == 0)
		rc = kv_alloc(s, cl->arena, (unsigned)order, &unit);
	if (rc == 0) {
		struct kv_grant g = {.hash = kv_key_hash(key, klen),
				     .len = len,
				     .klen = klen,
				     .flags = flags,
				     .order = (unsigned)order,
				     .unit = unit,
				     .version = ++s->version};
		memcpy(g.key, key, klen);
		unsigned char *slot =
		    s->pool + (size_t)cl->arena * s->arena_len + (size_t)unit * WIMM_KV_MIN_SLOT;
		struct kv_hdr h = {.len = len, .version = g.version, .khash = g.hash};
		memcpy(slot + WIMM_KV_HEADER, key + klen, len);
		kv_hdr_encode(slot, &h, slot + WIMM_KV_HEADER);
		rc = kv_publish(s, &g, cl->arena);
		if (rc < 0)
			kv_buddy_free(&s->arena[cl->arena].buddy, unit, (unsigned)order);
		else
			s->stats.send_puts++;
	}
	answer_status(s, cl, ev->imm, rc);
}

static void do_get(struct wimm_kv_server *s, struct kv_client *cl, const struct wimm_event *ev)
{
	const unsigned char *key;
	uint32_t klen;
	unsigned char m[24];
	int rc = parse_key(ev->data, ev->len, 0, &key, &klen);
	if (rc < 0 || ev->len != 2 + klen || s->ix) {
		/* Beside a shared index gets are one-sided. */
		answer_status(s, cl, ev->imm, s->ix ? WIMM_E_NOTSUP : WIMM_E_INVAL);
		return;
	}
	s->stats.gets++;
	struct kv_entry *e = kv_find(s, key, klen, kv_key_hash(key, klen));
	if (!e) {
		answer_status(s, cl, ev->imm, WIMM_KV_E_NOTFOUND);
		return;
	}
	s->stats.hits++;
	/* The lease: the slot is not freed before this time, whatever happens
	 * to the key meanwhile. The reader counts its own time from before it
	 * sent the lookup, so its deadline falls before this one. */
	e->lease_until = kv_now_ms() + s->lease_ms;
	kv_lru_unlink(s, e);
	kv_lru_front(s, e);
	kv_put32(m, 0);
	kv_put32(m + 4, e->len);
	kv_put64(m + 8, (uint64_t)e->arena * s->arena_len + (uint64_t)e->unit * WIMM_KV_MIN_SLOT);
	kv_put64(m + 16, e->version);
	kv_send(s, cl, ev->imm, m, 24);
}

static void do_del(struct wimm_kv_server *s, struct kv_client *cl, const struct wimm_event *ev)
{
	const unsigned char *key;
	uint32_t klen;
	int rc = parse_key(ev->data, ev->len, 0, &key, &klen);
	if (rc == 0 && ev->len != 2 + klen)
		rc = WIMM_E_INVAL;
	if (rc == 0) {
		struct kv_entry *e = kv_find(s, key, klen, kv_key_hash(key, klen));
		if (e) {
			kv_unpublish(s, e);
			s->stats.deletes++;
		} else {
			rc = WIMM_KV_E_NOTFOUND;
		}
	}
	answer_status(s, cl, ev->imm, rc);
}

static void do_stat(struct wimm_kv_server *s, struct kv_client *cl, const struct wimm_event *ev)
{
	unsigned char m[4 + 8 * KV_STAT_FIELDS];
	struct wimm_kv_stats st;
	uint64_t f[KV_STAT_FIELDS];
	wimm_kv_server_stats(s, &st);
	memcpy(f, &st, sizeof(f));
	kv_put32(m, 0);
	for (size_t i = 0; i < KV_STAT_FIELDS; i++)
		kv_put64(m + 4 + 8 * i, f[i]);
	kv_send(s, cl, ev->imm, m, sizeof(m));
}

void kv_request(struct wimm_kv_server *s, struct kv_client *cl, const struct wimm_event *ev)
{
	switch (KV_IMM_OP(ev->imm)) {
	case KV_OP_PUT:
		do_put(s, cl, ev);
		break;
	case KV_OP_SPUT:
		do_sput(s, cl, ev);
		break;
	case KV_OP_GET:
		do_get(s, cl, ev);
		break;
	case KV_OP_DEL:
		if (s->ix)
			kv_index_del(s, cl, ev);
		else
			do_del(s, cl, ev);
		break;
	case KV_OP_CAS:
		if (s->ix)
			kv_index_cas(s, cl, ev);
		else
			answer_status(s, cl, ev->imm, WIMM_E_NOTSUP);
		break;
	case KV_OP_NOTE:
		/* No answer: a note of a client that has no index is dropped. */
		if (s->ix)
			kv_index_note(s, cl, ev);
		break;
	case KV_OP_STAT:
		do_stat(s, cl, ev);
		break;
	default:
		answer_status(s, cl, ev->imm, WIMM_E_INVAL);
		break;
	}
}

void kv_expire_grants(struct wimm_kv_server *s)
{
	uint64_t now = kv_now_ms();
	if (s->stats.grants_pending == 0 || now < s->next_expiry_scan)
		return;
	s->next_expiry_scan = now + 5;
	for (struct kv_client *cl = s->clients; cl; cl = cl->next) {
		if (cl->is_read)
			continue;
		for (uint32_t gid = 0; gid < KV_MAX_GRANTS; gid++) {
			struct kv_grant *g = &cl->grant[gid];
			if (g->state != KV_GRANT_LIVE || now < g->expires_at)
				continue;
			kv_grant_drop(s, cl, g);
			g->state = KV_GRANT_EXPIRED;
			s->stats.grants_pending--;
			s->stats.grants_expired++;
			kv_log(s, WIMM_LOG_INFO, "kv: client %u: grant %u expired after %u ms",
			       cl->id, gid, s->grant_ms);
		}
	}
}
