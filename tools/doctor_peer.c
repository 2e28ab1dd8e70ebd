/* The receiving end as the sender sees it: local calls in a loopback run,
 * requests of the side protocol against `wimm doctor --serve`, and that
 * server's side of the same requests. One encoding per reply, written and
 * parsed here only. */
#ifdef DOCTOR_HAVE_VERBS
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "doctor_peer.h"

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), -1)

static void gid_hex(const union ibv_gid *g, char out[33])
{
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", g->raw[i]);
}

static int gid_parse(const char *s, union ibv_gid *g)
{
	if (strlen(s) != 32)
		return -1;
	for (int i = 0; i < 16; i++) {
		unsigned v;

		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		g->raw[i] = (uint8_t)v;
	}
	return 0;
}

int pe_setup(struct dv_peer *p, enum dr_fault fault, const struct dv_id *tx, struct dv_id *id,
	     struct dv_target *t, char *err, size_t errlen)
{
	char line[DP_LINE], gid[33], g2[40], dev[64], nd[32];

	if (p->local) {
		if (dv_rx_setup(p->local, fault, tx, id, t, err, errlen))
			return -1;
		snprintf(p->dev, sizeof(p->dev), "%s", p->local->dev);
		snprintf(p->netdev, sizeof(p->netdev), "%s", p->local->netdev);
		return 0;
	}
	gid_hex(&tx->gid, gid);
	if (dp_call(p->remote, line, sizeof(line), err, errlen, "rx %u %u %s %d", tx->qpn, tx->psn,
		    gid, tx->mtu))
		return -1;
	if (sscanf(line, "rx %u %u %39s %d %" SCNu64 " %u %u %63s %31s", &id->qpn, &id->psn, g2,
		   &id->mtu, &t->addr, &t->rkey, &t->len, dev, nd) != 9 ||
	    gid_parse(g2, &id->gid))
		return ERR("bad reply from the doctor peer: \"%.80s\"", line);
	snprintf(p->dev, sizeof(p->dev), "%s", dev);
	snprintf(p->netdev, sizeof(p->netdev), "%s", strcmp(nd, "-") ? nd : "");
	return 0;
}

int pe_qp(struct dv_peer *p, struct dv_qp_attr *a, char *err, size_t errlen)
{
	char line[DP_LINE];

	if (p->local) {
		dv_query(p->local, a);
		return 0;
	}
	if (dp_call(p->remote, line, sizeof(line), err, errlen, "qp"))
		return -1;
	if (sscanf(line, "qp %d %d %d %d %d %d %d %u", &a->ok, &a->state, &a->mtu, &a->retry,
		   &a->rnr_retry, &a->timeout, &a->min_rnr, &a->access) != 8)
		return ERR("bad reply from the doctor peer: \"%.80s\"", line);
	return 0;
}

int pe_key(struct dv_peer *p, const struct dv_target *t, struct dv_key *k, char *err, size_t errlen)
{
	char line[DP_LINE];

	if (p->local) {
		dv_rx_key(p->local, t, k);
		return 0;
	}
	if (dp_call(p->remote, line, sizeof(line), err, errlen, "key %" PRIu64 " %u %u", t->addr,
		    t->rkey, t->len))
		return -1;
	if (sscanf(line, "key %d %d %u %" SCNu64 " %" SCNu64 " %d", &k->live, &k->in_bounds,
		   &k->access, &k->mr_addr, &k->mr_len, &k->nlive) != 6)
		return ERR("bad reply from the doctor peer: \"%.80s\"", line);
	return 0;
}

int pe_cq(struct dv_peer *p, struct dv_cq *c, char *err, size_t errlen)
{
	char line[DP_LINE];
	int n = 0;

	if (p->local) {
		dv_cq_info(p->local, c);
		return 0;
	}
	if (dp_call(p->remote, line, sizeof(line), err, errlen, "cq"))
		return -1;
	memset(c, 0, sizeof(*c));
	if (sscanf(line, "cq %d %d %d %d %n", &c->cqe, &c->recv_posted, &c->outstanding, &c->cq_err,
		   &n) != 4 ||
	    !n)
		return ERR("bad reply from the doctor peer: \"%.80s\"", line);
	snprintf(c->async, sizeof(c->async), "%s", strcmp(line + n, "-") ? line + n : "");
	return 0;
}

int pe_poll(struct dv_peer *p, int timeout_ms, int want, struct dv_wc *wc, int max, char *err,
	    size_t errlen)
{
	char line[DP_LINE];
	int n, off = 0, used;

	if (p->local)
		return dv_poll(p->local, timeout_ms, want, wc, max);
	if (dp_call(p->remote, line, sizeof(line), err, errlen, "poll %d %d", timeout_ms, want))
		return -1;
	if (sscanf(line, "wc %d%n", &n, &off) != 1 || n < 0 || n > max)
		return ERR("bad reply from the doctor peer: \"%.80s\"", line);
	for (int i = 0; i < n; i++, off += used)
		if (sscanf(line + off, " %d %d %d %u %u%n", &wc[i].status, &wc[i].opcode,
			   &wc[i].with_imm, &wc[i].imm, &wc[i].len, &used) != 5)
			return ERR("bad reply from the doctor peer: \"%.80s\"", line);
	return n;
}

int pe_counters(struct dv_peer *p, struct hw_counters *c, char *err, size_t errlen)
{
	char line[DP_LINE];
	int off = 0, used;

	if (p->local) {
		hw_counters_read(p->local->dev, DV_PORT, c);
		return 0;
	}
	if (dp_call(p->remote, line, sizeof(line), err, errlen, "counters"))
		return -1;
	if (sscanf(line, "counters %d%n", &c->n, &off) != 1 || c->n > HW_COUNTERS_MAX)
		return ERR("bad reply from the doctor peer: \"%.80s\"", line);
	for (int i = 0; i < c->n; i++, off += used)
		if (sscanf(line + off, " %39[^=]=%lld%n", c->name[i], &c->val[i], &used) != 2)
			return ERR("bad counters from the doctor peer: \"%.80s\"", line);
	return 0;
}

/* ------------------------------------------------------------ the server */

struct dv_serve {
	struct dv_end rx;
	int open;
};

int dv_serve_line(struct dv_serve **sp, const char *dev, const struct dr_opts *o, char *line,
		  FILE *out)
{
	struct dv_serve *s = *sp;
	char err[256], gid[40];

	if (!strncmp(line, "rx ", 3)) {
		struct dv_id tx, id;
		struct dv_target t;

		if (s) {
			fputs("error one probe pair per connection\n", out);
			return 1;
		}
		if (sscanf(line, "rx %u %u %39s %d", &tx.qpn, &tx.psn, gid, &tx.mtu) != 4 ||
		    gid_parse(gid, &tx.gid)) {
			fputs("error bad rx request\n", out);
			return 1;
		}
		s = *sp = calloc(1, sizeof(*s));
		if (!s) {
			fputs("error out of memory\n", out);
			return 1;
		}
		/* The server is a healthy receiver: faults are injected on
		 * loopback pairs only. */
		if (dv_open(&s->rx, dev, o->gid_index, err, sizeof(err)) ||
		    dv_rx_setup(&s->rx, DR_FAULT_NONE, &tx, &id, &t, err, sizeof(err))) {
			fprintf(out, "error %s\n", err);
			dv_serve_end(sp);
			return 1;
		}
		gid_hex(&id.gid, gid);
		fprintf(out, "rx %u %u %s %d %" PRIu64 " %u %u %s %s\n", id.qpn, id.psn, gid,
			id.mtu, t.addr, t.rkey, t.len, s->rx.dev,
			s->rx.netdev[0] ? s->rx.netdev : "-");
		return 1;
	}
	if (strcmp(line, "qp") && strncmp(line, "key ", 4) && strcmp(line, "cq") &&
	    strncmp(line, "poll ", 5) && strcmp(line, "counters"))
		return 0;
	if (!s) {
		fputs("error no probe pair yet (send rx first)\n", out);
		return 1;
	}
	if (!strcmp(line, "qp")) {
		struct dv_qp_attr a;

		dv_query(&s->rx, &a);
		fprintf(out, "qp %d %d %d %d %d %d %d %u\n", a.ok, a.state, a.mtu, a.retry,
			a.rnr_retry, a.timeout, a.min_rnr, a.access);
	} else if (!strncmp(line, "key ", 4)) {
		struct dv_target t;
		struct dv_key k;

		if (sscanf(line, "key %" SCNu64 " %u %u", &t.addr, &t.rkey, &t.len) != 3) {
			fputs("error bad key request\n", out);
			return 1;
		}
		dv_rx_key(&s->rx, &t, &k);
		fprintf(out, "key %d %d %u %" PRIu64 " %" PRIu64 " %d\n", k.live, k.in_bounds,
			k.access, k.mr_addr, k.mr_len, k.nlive);
	} else if (!strcmp(line, "cq")) {
		struct dv_cq c;

		dv_cq_info(&s->rx, &c);
		fprintf(out, "cq %d %d %d %d %s\n", c.cqe, c.recv_posted, c.outstanding, c.cq_err,
			c.async[0] ? c.async : "-");
	} else if (!strncmp(line, "poll ", 5)) {
		struct dv_wc wc[DV_MAX_WC];
		int ms, want, n;

		if (sscanf(line, "poll %d %d", &ms, &want) != 2 || ms < 0 || ms > 60000) {
			fputs("error bad poll request\n", out);
			return 1;
		}
		n = dv_poll(&s->rx, ms, want, wc, DV_MAX_WC);
		fprintf(out, "wc %d", n);
		for (int i = 0; i < n; i++)
			fprintf(out, " %d %d %d %u %u", wc[i].status, wc[i].opcode, wc[i].with_imm,
				wc[i].imm, wc[i].len);
		fputc('\n', out);
	} else {
		struct hw_counters c;

		hw_counters_read(s->rx.dev, DV_PORT, &c);
		fprintf(out, "counters %d", c.n);
		for (int i = 0; i < c.n; i++)
			fprintf(out, " %s=%lld", c.name[i], c.val[i]);
		fputc('\n', out);
	}
	return 1;
}

void dv_serve_end(struct dv_serve **sp)
{
	if (!*sp)
		return;
	dv_close(&(*sp)->rx);
	free(*sp);
	*sp = NULL;
}
#endif /* DOCTOR_HAVE_VERBS */
