/* libfabric backend, RDM providers (shm): lanes.
 *
 * A lane is one RDM endpoint with its AV and CQ, shared by the
 * connections of up to OFI_LANE_NAMES peers (shm 1.17 maps at most
 * SMR_MAX_PEERS = 256 per AV and endpoint). Instead of an endpoint per
 * connection, so:
 * - a poll reads one CQ per lane, not one per connection;
 * - accepting does not fi_enable a new endpoint: each enable kept about
 *   290 bytes inside shm until the context closed (valgrind, 200 cycles:
 *   52 KB), and deleting a connection to a peer in this process no longer
 *   has to keep its endpoint (shm hands such a peer our region itself).
 *
 * Attribution: our operations carry a cookie as op_context; the peer's
 * write-with-CQ-data carries no context we chose, so it is told by its
 * source: the domain asks for FI_SOURCE, and shm's smr_rx_src_comp
 * reports the sender's fi_addr in our AV (smr_complete_rx:
 * map->peers[id].fiaddr, the RMA path included) for fi_cq_readfrom.
 * Receive slots are directed (FI_DIRECTED_RECV) at their peer.
 *
 * Two connections between the same pair of lanes would share one fi_addr,
 * so the passive side never places a request on a lane that already holds
 * that peer, and an active side takes a lane with no other active side in
 * it (it cannot know yet where it connects to). A peer must be in the AV
 * before it can know our lane's name: accept() leaves sending our
 * handshake to conn_ready(), after the insert.
 *
 * The AV only grows: a peer's entry stays until the lane closes, and a
 * peer that connects again through the same pair of lanes gets it back.
 * shm 1.17 cannot forget a peer safely: fi_av_remove frees the peer's slot
 * of the shared map (smr_map_del) before smr_unmap_from_endpoint runs,
 * which then finds the slot free and does nothing, so our region keeps the
 * old peer's id for us. The next peer inserted takes the same slot (the
 * map's cur_id stays on it) and inherits that id: our first operations
 * towards it name whoever holds that id at its end, and its send-with-imm
 * landed on another connection (ps with in-band hellos). So a lane takes
 * OFI_LANE_NAMES distinct peers in its life, then no new ones, and closes
 * with its last connection. The cost: the regions of peers that went
 * stay mapped (about 4 MB of /dev/shm each) while their lane lives.
 *
 * Posted receives come from one pool per endpoint (rx_attr.size, 1024 on
 * shm, which refuses a larger one): a lane takes a connection only while
 * its receive slots fit (64 clients of the log service, 64 slots each,
 * got WIMM_E_NOMEM from fi_recv at accept on a full lane).
 *
 * Known limit: shm completes operations that need the peer's answer (reads,
 * atomics, writes above inject_size) in the order of one response queue
 * per endpoint, and an answer that never comes stalls the completions of
 * every later such operation on the lane. It never comes when the peer
 * dies, and also when the peer closed its side first: its window's
 * registration goes with its connection, and shm 1.17 drops a command
 * whose key no longer verifies without answering it
 * (smr_progress_cmd_rma, smr_progress_cmd_atomic). A log writer that
 * reconnected on being refused hung that way on its next fetch-and-add.
 * So a connection that leaves with such an operation outstanding retires
 * its lane: it takes no new connections (the reconnect gets a new one) and
 * closes with its last member. The lane's other members keep it; their
 * own answered operations may stall behind the lost answer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ofi/ofi_internal.h"

static void ofi_lane_close(struct ofi_lane *l)
{
	free(l->names);
	if (l->ep)
		fi_close(&l->ep->fid);
	if (l->av)
		fi_close(&l->av->fid);
	if (l->cq)
		fi_close(&l->cq->fid);
	free(l->ring);
	free(l);
}

/* The lane's endpoint, bound and enabled. shm names an endpoint's region
 * after the process id; a region a SIGKILLed process left in /dev/shm
 * under our (reused) id makes the first fi_enable fail with -FI_EBUSY, and
 * shm removes the stale file as it does so (smr_retry_map): try once more. */
static int ofi_lane_enable(struct ofi_ctx *x, struct ofi_lane *l)
{
	struct fi_info *info;
	int ret = 0;

	for (int attempt = 0; attempt < 2; attempt++) {
		info = fi_dupinfo(x->info);
		if (!info)
			return WIMM_E_NOMEM;
		ret = fi_endpoint(x->domain, info, &l->ep, l);
		fi_freeinfo(info);
		if (ret) {
			l->ep = NULL;
			return ofi_err(x, ret, "fi_endpoint (lane)");
		}
		ret =
		    fi_ep_bind(l->ep, &l->cq->fid, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION);
		if (!ret)
			ret = fi_ep_bind(l->ep, &l->av->fid, 0);
		if (!ret)
			ret = fi_enable(l->ep);
		if (ret != -FI_EBUSY)
			break;
		fi_close(&l->ep->fid);
		l->ep = NULL;
	}
	/* On failure the endpoint (if any) goes with the lane. */
	return ret ? ofi_err(x, ret, "fi_ep_bind / fi_enable (lane)") : 0;
}

static int ofi_lane_open(struct ofi_ctx *x, size_t need, struct ofi_lane **out)
{
	struct fi_av_attr ava = {.type = FI_AV_TABLE, .count = OFI_LANE_NAMES};
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_NONE};
	struct ofi_lane *l;
	int ret;

	l = calloc(1, sizeof(*l));
	if (!l)
		return WIMM_E_NOMEM;
	l->names = calloc(OFI_LANE_NAMES, sizeof(*l->names));
	if (!l->names) {
		free(l);
		return WIMM_E_NOMEM;
	}
	l->rx_cap = x->info->rx_attr->size;
	/* Room for what the core may have outstanding, within reason: CQ
	 * entries are allocated up front (about 50 bytes each). Each new lane
	 * at least doubles the last, so a context that grows to many
	 * connections ends up with few lanes. */
	l->cq_size = x->cq_budget;
	if (x->lanes && l->cq_size < 2 * x->lanes->cq_size)
		l->cq_size = 2 * x->lanes->cq_size;
	if (l->cq_size < OFI_LANE_CQ_MIN)
		l->cq_size = OFI_LANE_CQ_MIN;
	if (l->cq_size > OFI_LANE_CQ_MAX)
		l->cq_size = OFI_LANE_CQ_MAX;
	/* ... but no more than its peers' connections of this size can use. */
	if (l->cq_size > OFI_LANE_NAMES * need && OFI_LANE_NAMES * need >= OFI_LANE_CQ_MIN)
		l->cq_size = OFI_LANE_NAMES * need;
	if (l->cq_size < need)
		l->cq_size = need;
	cqa.size = l->cq_size;
	ret = fi_cq_open(x->domain, &cqa, &l->cq, l);
	if (ret) {
		ret = ofi_err(x, ret, "fi_cq_open (lane)");
		goto err_close;
	}
	ret = fi_av_open(x->domain, &ava, &l->av, l);
	if (ret) {
		ret = ofi_err(x, ret, "fi_av_open (lane)");
		goto err_close;
	}
	ret = ofi_lane_enable(x, l);
	if (ret)
		goto err_close;
	l->name_len = sizeof(l->name);
	ret = fi_getname(&l->ep->fid, l->name, &l->name_len);
	if (ret) {
		ret = ofi_err(x, ret, "fi_getname (lane)");
		goto err_close;
	}
	l->next = x->lanes;
	x->lanes = l;
	*out = l;
	return 0;

err_close:
	ofi_lane_close(l);
	return ret;
}

/* Does a connection of lane l already talk to the peer `name`? */
static int ofi_lane_has_peer(struct ofi_ctx *x, struct ofi_lane *l, const uint8_t *name, size_t len)
{
	for (struct ofi_conn *c = x->conns; c; c = c->next) {
		if (c->lane != l || c->peer == FI_ADDR_UNSPEC || c->peer_name_len != len ||
		    memcmp(c->peer_name, name, len))
			continue;
		/* A peer that closes and connects again (from the same lane of
		 * its own) is usually here before we noticed the close: look
		 * now, a closed one is cut from the lane (ofi_lane_push_down). */
		if (c->sock >= 0 && c->in_epoll_sock)
			ofi_check_sock(c);
		if (c->peer != FI_ADDR_UNSPEC)
			return 1;
	}
	return 0;
}

/* The AV entry of the peer `name`, or -1 if the lane never had it. */
static int ofi_lane_find(const struct ofi_lane *l, const uint8_t *name, size_t len)
{
	for (uint32_t a = 0; a < OFI_LANE_NAMES; a++)
		if (l->names[a].len == len && len && !memcmp(l->names[a].name, name, len))
			return (int)a;
	return -1;
}

/* Receive slots a connection keeps posted (write-with-imm takes none). */
static size_t ofi_lane_slots(const struct ofi_conn *c)
{
	return c->recv_size ? c->rx_depth : 0;
}

/* Can l take c, whose peer is `name` (NULL: not known yet, the active
 * side)? Each member not yet in the AV may still need a new entry. */
static int ofi_lane_fits(struct ofi_ctx *x, struct ofi_lane *l, const struct ofi_conn *c,
			 size_t need, const struct ofi_req *req)
{
	int known = req ? ofi_lane_find(l, req->peer_name, req->peer_name_len) >= 0 : 0;

	if (l->retired || l->cq_reserved + need > l->cq_size ||
	    l->rx_reserved + ofi_lane_slots(c) > l->rx_cap)
		return 0;
	if (!known && l->naddr + l->unnamed >= OFI_LANE_NAMES)
		return 0;
	return req ? !ofi_lane_has_peer(x, l, req->peer_name, req->peer_name_len) : !l->outgoing;
}

int ofi_lane_join(struct ofi_conn *c, const struct ofi_req *req)
{
	struct ofi_ctx *x = c->ctx;
	size_t need = (size_t)c->tx_max + c->rx_depth + 16;
	struct ofi_lane *l;
	int ret;

	for (l = x->lanes; l; l = l->next)
		if (ofi_lane_fits(x, l, c, need, req))
			break;
	if (!l) {
		ret = ofi_lane_open(x, need, &l);
		if (ret)
			return ret;
	}
	/* Active side: what of the lane's cut connections the CQ holds goes
	 * now, before our request does. The passive side may answer with data
	 * before we have its name in the AV (its first write succeeds at once
	 * when our lanes knew each other): that must not be drained with the
	 * old, and is ours once we insert it (ofi_lane_entry). */
	if (!req && l->ndraining)
		ofi_lane_fill(l, x);
	l->members++;
	l->unnamed++;
	l->cq_reserved += need;
	l->rx_reserved += ofi_lane_slots(c);
	if (!req)
		l->outgoing = 1;
	c->lane = l;
	c->ep = l->ep;
	return 0;
}

/* Leaving drives no progress: a peer in this process whose endpoint is
 * already closed leaves requests behind that shm cannot process any more
 * (smr_progress_connreq reads the peer's region). The peer's entry stays
 * in the AV (see the top) and names no connection: what of it is still in
 * the CQ is dropped, and it is marked draining until the CQ was read, so
 * that a new connection of the same peer gets none of it. */
void ofi_lane_cut(struct ofi_conn *c)
{
	struct ofi_lane *l = c->lane;

	/* Nothing goes to it any more, not even the first write. */
	if (c->kicking) {
		c->kicking = 0;
		c->ctx->nkick--;
	}
	/* -FI_ENOENT for a slot that completed meanwhile: nothing to do. */
	if (c->slots_posted)
		for (uint32_t i = 0; i < c->rx_depth; i++)
			fi_cancel(&l->ep->fid, ofi_cookie(c, 1, i));
	c->slots_posted = 0;
	if (c->peer != FI_ADDR_UNSPEC) {
		if (c->peer < OFI_LANE_NAMES && l->peer[c->peer] == c) {
			l->peer[c->peer] = NULL;
			if (!l->draining[c->peer])
				l->ndraining++;
			l->draining[c->peer] = 1;
		}
		c->peer = FI_ADDR_UNSPEC;
	}
}

/* Has c an operation outstanding that completes only with the peer's answer
 * (see the top)? Inline and injected writes complete as they are posted. */
static int ofi_lane_awaits_answer(const struct ofi_conn *c)
{
	const struct wimm_send_ring *r = &c->sq;
	size_t inject = c->ctx->inject_size;

	for (uint64_t pos = wimm_send_ring_tail(r); pos < wimm_send_ring_head(r); pos++) {
		const struct wimm_send_slot *s = wimm_send_ring_slot(r, pos);

		if (!s->done && (s->op == WIMM_OP_READ || s->op == WIMM_OP_FETCH_ADD ||
				 s->op == WIMM_OP_CMP_SWAP || s->len > inject))
			return 1;
	}
	return 0;
}

/* A lane whose AV is full takes no new peer: it goes with its last member. */
static int ofi_lane_spent(const struct ofi_lane *l)
{
	return l->retired || l->naddr >= OFI_LANE_NAMES;
}

void ofi_lane_leave(struct ofi_conn *c)
{
	struct ofi_lane *l = c->lane;
	struct ofi_ctx *x = c->ctx;

	if (!l)
		return;
	ofi_lane_cut(c);
	/* An answer that may never come blocks the lane's response queue: no
	 * new connections there (see the top). */
	if (ofi_lane_awaits_answer(c) ||
	    (c->down.state == WIMM_DOWN_REPORTED && wimm_send_ring_outstanding(&c->sq)))
		l->retired = 1;
	l->members--;
	if (!c->peer_name_len)
		l->unnamed--;
	l->cq_reserved -= (size_t)c->tx_max + c->rx_depth + 16;
	l->rx_reserved -= ofi_lane_slots(c);
	if (c->active)
		l->outgoing = 0;
	c->lane = NULL;
	c->ep = NULL;
	if (ofi_lane_spent(l) && !l->members) {
		struct ofi_lane **pp = &x->lanes;

		while (*pp != l)
			pp = &(*pp)->next;
		*pp = l->next;
		if (x->lane_rr == l)
			x->lane_rr = NULL;
		ofi_lane_close(l);
	}
}

/* The peer's AV entry: the one it had, once no completion of its last
 * connection can still be in the CQ, else a new one. */
static int ofi_lane_entry(struct ofi_conn *c, const uint8_t *name, size_t len, fi_addr_t *out)
{
	struct ofi_lane *l = c->lane;
	int known = ofi_lane_find(l, name, len);
	fi_addr_t a = FI_ADDR_UNSPEC;

	if (known >= 0) {
		/* Passive: the peer sends nothing before our answer, which
		 * follows this insert; what the CQ holds of it is the old one's. */
		if (l->draining[known] && !c->active)
			ofi_lane_fill(l, c->ctx);
		if (l->draining[known] && !c->active) {
			wimm_ctx_set_provider_error(c->ctx->core, -FI_EAGAIN,
						    "shm: the completions of this peer's previous "
						    "connection are not all read yet");
			return WIMM_E_AGAIN;
		}
		l->draining[known] = 0; /* active: drained when it joined */
		*out = (fi_addr_t)known;
		return 0;
	}
	if (l->naddr >= OFI_LANE_NAMES) {
		/* ofi_lane_join counts on this never happening; say so if it does. */
		wimm_ctx_set_provider_error(c->ctx->core, -FI_ENOSPC,
					    "shm: this lane's address vector is full");
		return WIMM_E_AGAIN;
	}
	int ret = fi_av_insert(l->av, name, 1, &a, 0, NULL);
	if (ret != 1)
		return ofi_err(c->ctx, ret < 0 ? ret : -FI_EADDRNOTAVAIL, "fi_av_insert");
	if (a >= OFI_LANE_NAMES || l->names[a].len) {
		/* Not the next index of a table that only grows: the lane
		 * cannot tell this peer from another, so it takes no one more. */
		l->retired = 1;
		wimm_ctx_set_provider_error(c->ctx->core, -FI_EADDRNOTAVAIL,
					    "shm: fi_av_insert gave an index already in use");
		return WIMM_E_PROVIDER;
	}
	memcpy(l->names[a].name, name, len);
	l->names[a].len = len;
	l->naddr++;
	*out = a;
	return 0;
}

int ofi_lane_insert(struct ofi_conn *c, const uint8_t *name, size_t len)
{
	struct ofi_lane *l = c->lane;
	fi_addr_t a = FI_ADDR_UNSPEC;
	int ret = ofi_lane_entry(c, name, len, &a);

	if (ret)
		return ret;
	if (l->peer[a]) {
		/* The same pair of lanes twice (see the top): refuse rather
		 * than mix up two connections' doorbells. */
		wimm_ctx_set_provider_error(c->ctx->core, -FI_EADDRINUSE,
					    "a second connection between the same two shm "
					    "endpoints");
		return WIMM_E_PROVIDER;
	}
	l->peer[a] = c;
	c->peer = a;
	if (!c->peer_name_len)
		l->unnamed--;
	memcpy(c->peer_name, name, len);
	c->peer_name_len = len;
	return 0;
}

void ofi_lane_close_all(struct ofi_ctx *x)
{
	while (x->lanes) {
		struct ofi_lane *l = x->lanes;

		x->lanes = l->next;
		ofi_lane_close(l);
	}
	x->lane_rr = NULL;
}

/* ------------------------------------------------------------ the ring */

/* The slow half of ofi_ring_reserve: grows the ring (a power of two, from
 * 64, so indexes wrap with a mask, not a division per completion) to room
 * for n more entries; 0 or WIMM_E_NOMEM, and then nothing changed. */
static int ofi_ring_grow(struct ofi_lane *l, uint32_t n)
{
	uint32_t cap = l->ring_cap ? l->ring_cap : 64;
	struct ofi_rent *r;

	while (cap - l->ring_len < n)
		cap *= 2;
	r = malloc((size_t)cap * sizeof(*r));
	if (!r)
		return WIMM_E_NOMEM;
	for (uint32_t i = 0; i < l->ring_len; i++)
		r[i] = l->ring[(l->ring_head + i) & (l->ring_cap - 1)];
	free(l->ring);
	l->ring = r;
	l->ring_cap = cap;
	l->ring_head = 0;
	return 0;
}

/* Room for n more entries; 0 or WIMM_E_NOMEM. Inline: every CQ read asks. */
static inline int ofi_ring_reserve(struct ofi_lane *l, uint32_t n)
{
	return l->ring_cap - l->ring_len >= n ? 0 : ofi_ring_grow(l, n);
}

/* The slot after the last entry: where the next one goes (room reserved). */
static struct ofi_rent *ofi_ring_tail(struct ofi_lane *l)
{
	return &l->ring[(l->ring_head + l->ring_len) & (l->ring_cap - 1)];
}

static struct ofi_rent *ofi_ring_slot(struct ofi_lane *l)
{
	if (ofi_ring_reserve(l, 1))
		return NULL;
	return ofi_ring_tail(l);
}

static void ofi_ring_push(struct ofi_lane *l, struct ofi_conn *c, struct ofi_rent *r)
{
	r->idx = c->idx;
	r->gen = c->gen;
	l->ring_len++;
}

/* Where a lane's completions go: straight into the poller's array while it
 * has room and nothing waits in the ring before them (the common case: no
 * stop in the ring, no copy out of it), else into the ring. A fill outside
 * a poll has no sink. */
struct ofi_sink {
	struct wimm_cqe *out;
	int n, got;
};

/* What the core must know of an entry before it is handed over. */
static void ofi_lane_handover(struct ofi_conn *c, const struct wimm_cqe *e)
{
	if (e->kind == WIMM_CQE_CONN_DOWN)
		c->down.state = WIMM_DOWN_REPORTED;
	else if (e->kind == WIMM_CQE_RECV_SEND_IMM)
		wimm_recv_slots_deliver(&c->rx);
}

/* The place for the next entry; the ring has room for one (reserved). */
static struct wimm_cqe *ofi_lane_place(struct ofi_lane *l, struct ofi_sink *s)
{
	if (s && s->got < s->n && !l->ring_len)
		return &s->out[s->got];
	return &ofi_ring_tail(l)->e;
}

/* The entry ofi_lane_place gave out is c's and is kept. */
static void ofi_lane_keep(struct ofi_lane *l, struct ofi_sink *s, struct ofi_conn *c,
			  struct wimm_cqe *e)
{
	if (s && s->got < s->n && e == &s->out[s->got]) {
		ofi_lane_handover(c, e);
		s->got++;
		return;
	}
	ofi_ring_push(l, c, ofi_ring_tail(l)); /* e is its entry */
}

/* Which connection an entry belongs to: the cookie of our own operation,
 * else (the peer's remote CQ data) its source. */
static struct ofi_conn *ofi_lane_owner(struct ofi_lane *l, struct ofi_ctx *x, uint64_t flags,
				       void *op_context, fi_addr_t src)
{
	if ((flags & FI_REMOTE_CQ_DATA) && !(flags & FI_RECV))
		return src < OFI_LANE_NAMES ? l->peer[src] : NULL;
	return ofi_cookie_conn(x, op_context);
}

/* Completions of c that one just let go, in post order (see ofi_convert),
 * with room kept for `keep` more entries. */
static void ofi_lane_take(struct ofi_lane *l, struct ofi_sink *s, struct ofi_conn *c, uint32_t keep)
{
	while (wimm_send_ring_ready(&c->sq) && !ofi_ring_reserve(l, keep + 1)) {
		struct wimm_cqe *e = ofi_lane_place(l, s);

		if (!wimm_send_ring_take(&c->sq, c->core, e))
			break;
		ofi_lane_keep(l, s, c, e);
	}
}

static void ofi_lane_readerr(struct ofi_lane *l, struct ofi_sink *s, struct ofi_ctx *x)
{
	struct fi_cq_err_entry err = {0};
	struct ofi_conn *c;
	struct wimm_cqe *e;

	if (fi_cq_readerr(l->cq, &err, 0) < 0)
		return;
	c = ofi_cookie_conn(x, err.op_context);
	if (!c || ofi_ring_reserve(l, 1))
		return;
	/* A failed receive takes c down, which queues its CONN_DOWN in the
	 * ring, and then keeps nothing here. */
	e = ofi_lane_place(l, s);
	if (ofi_convert_err(c, &err, l->cq, e))
		ofi_lane_keep(l, s, c, e);
	ofi_lane_take(l, s, c, 0);
}

/* The CQ holds nothing of the cut connections any more. */
static void ofi_lane_drained(struct ofi_lane *l)
{
	if (!l->ndraining)
		return;
	memset(l->draining, 0, sizeof(l->draining));
	l->ndraining = 0;
}

/* The r entries of one CQ read: to their connections' places in s or the
 * ring (reserved for r + 1 already). Out of line: an empty poll, which
 * finds none, keeps a small frame without it. */
static __attribute__((noinline)) void ofi_lane_sort(struct ofi_lane *l, struct ofi_ctx *x,
						    struct ofi_sink *s,
						    const struct fi_cq_data_entry *d,
						    const fi_addr_t *src, ssize_t r)
{
	for (ssize_t i = 0; i < r; i++) {
		struct ofi_conn *c = ofi_lane_owner(l, x, d[i].flags, d[i].op_context, src[i]);
		struct wimm_cqe *e;

		/* A source no connection owns (cut, or not inserted yet): dropped. */
		if (!c)
			continue;
		e = ofi_lane_place(l, s);
		if (ofi_convert(c, &d[i], e))
			ofi_lane_keep(l, s, c, e);
		ofi_lane_take(l, s, c, (uint32_t)(r - i));
	}
}

/* Reads l's CQ: everything (no sink), or as many entries as s has room
 * for. Whatever does not fit s (a completion may let go several) goes to
 * the ring. 1 if the ring holds entries afterwards. Inlined into the poll:
 * an empty poll is mostly this call's frame. */
static inline __attribute__((always_inline)) int
ofi_lane_read(struct ofi_lane *l, struct ofi_ctx *x, struct ofi_sink *s)
{
	struct fi_cq_data_entry d[16];
	fi_addr_t src[16];
	uint32_t max = s ? (uint32_t)(s->n - s->got) : UINT32_MAX, read = 0;

	while (read < max) {
		size_t want = max - read > 16 ? 16 : max - read;
		ssize_t r;

		/* Room first: what is read must not be dropped. */
		if (ofi_ring_reserve(l, (uint32_t)want + 1))
			break;
		r = fi_cq_readfrom(l->cq, d, want, src);
		if (r == -FI_EAGAIN) {
			ofi_lane_drained(l);
			break;
		}
		if (r == -FI_EAVAIL) {
			ofi_lane_readerr(l, s, x);
			read++;
			continue;
		}
		if (r < 0) {
			ofi_err(x, (int)r, "fi_cq_readfrom");
			break;
		}
		ofi_lane_sort(l, x, s, d, src, r);
		read += (uint32_t)r;
		if ((size_t)r < want) {
			ofi_lane_drained(l);
			break;
		}
	}
	return l->ring_len > 0;
}

int ofi_lane_fill(struct ofi_lane *l, struct ofi_ctx *x)
{
	return ofi_lane_read(l, x, NULL);
}

/* The ring's entries into out[0..n), oldest first. */
static int ofi_lane_emit(struct ofi_lane *l, struct ofi_ctx *x, struct wimm_cqe *out, int n)
{
	int got = 0;

	while (got < n && l->ring_len) {
		struct ofi_rent *r = &l->ring[l->ring_head];
		struct ofi_conn *c = ofi_conn_lookup(x, r->idx, r->gen);

		l->ring_head = (l->ring_head + 1) & (l->ring_cap - 1);
		l->ring_len--;
		if (!c)
			continue; /* deleted meanwhile */
		ofi_lane_handover(c, &r->e);
		out[got++] = r->e;
	}
	return got;
}

/* One lane's turn in a poll: what its ring holds, then its CQ. */
static inline __attribute__((always_inline)) void
ofi_lane_serve(struct ofi_lane *l, struct ofi_ctx *x, struct ofi_sink *s)
{
	if (l->ring_len)
		s->got += ofi_lane_emit(l, x, s->out + s->got, s->n - s->got);
	if (s->got < s->n && ofi_lane_read(l, x, s) && s->got < s->n)
		s->got += ofi_lane_emit(l, x, s->out + s->got, s->n - s->got);
}

int ofi_lane_poll(struct ofi_ctx *x, struct wimm_cqe *out, int n)
{
	struct ofi_lane *start = x->lane_rr ? x->lane_rr : x->lanes;
	struct ofi_lane *l = start;
	struct ofi_sink s = {.out = out, .n = n, .got = 0};

	if (!l || n <= 0)
		return 0;
	/* The context's only lane (up to 256 peers): no round robin to keep.
	 * (The only one, not merely the last: start may be any lane.) */
	if (l == x->lanes && !l->next) {
		ofi_lane_serve(l, x, &s);
		return s.got;
	}
	do {
		ofi_lane_serve(l, x, &s);
		l = l->next ? l->next : x->lanes;
	} while (s.got < n && l != start);
	x->lane_rr = l;
	return s.got;
}

/* Up before anything that arrives on it (conn_ready, before any progress). */
void ofi_lane_push_up(struct ofi_conn *c)
{
	struct ofi_rent *r = ofi_ring_slot(c->lane);

	if (!r)
		return; /* the first doorbell says it is up instead */
	r->e = (struct wimm_cqe){.kind = WIMM_CQE_CONN_UP, .conn = c->core};
	ofi_ring_push(c->lane, c, r);
	c->up_pending = 0;
}

/* The connection's last word goes behind everything its lane's CQ already
 * holds for it. */
void ofi_lane_push_down(struct ofi_conn *c)
{
	struct ofi_lane *l = c->lane;
	struct ofi_rent *r;

	ofi_lane_fill(l, c->ctx);
	r = ofi_ring_slot(l);
	if (!r)
		return; /* stays pending; arm/poll report nothing more */
	wimm_cqe_conn_down(&r->e, c->core, c->down.status, c->down.prov_err);
	ofi_ring_push(l, c, r);
	/* Nothing more of it can come (its socket is closed): the peer may
	 * connect again through this lane. */
	ofi_lane_cut(c);
}
