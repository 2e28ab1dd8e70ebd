/* `wimm doctor` on libfabric (ofi:tcp, ofi:shm, ofi:<provider>): what of
 * the verbs flow applies there, judged from the provider's fi_info and
 * from probes through wimm itself; the rest is marked n/a with the reason.
 * The probe receiver is one function, run in a thread for a loopback pair
 * and behind `--serve` for a remote one. */
#ifdef DOCTOR_HAVE_OFI
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>

#include <wimm.h>

#include "doctor_proto.h"

#define NPROBES 3
#define IMM_BASE 0xd0c70000u
#define WINDOW 16384
#define PROBE_MAX 3000

static const uint32_t probe_len[NPROBES] = {0, 64, PROBE_MAX};
static const size_t probe_off[NPROBES] = {0, 64, 4096};

/* The provider's attributes that matter to a write-with-imm. */
struct oinfo {
	int found;
	uint64_t caps, mode, msg_order;
	int mr_mode, ep_type;
	size_t cq_data_size, mr_key_size;
};

struct oprobe {
	int n;
	uint32_t imm[NPROBES], len[NPROBES];
	int bytes_ok[NPROBES];
	char err[256];
};

static uint8_t pattern(size_t b, int i)
{
	return (uint8_t)(b * 7 + (unsigned)i * 13) | 1;
}

/* fi_getinfo for one endpoint type; order: the tx msg_order to ask for
 * (0: none). */
static int query_one(const char *prov, enum fi_ep_type type, uint64_t order, struct oinfo *oi)
{
	struct fi_info *h = fi_allocinfo(), *list = NULL;
	int found = 0;

	if (!h)
		return 0;
	h->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
	/* Offer every mode a provider may ask for: what it keeps in
	 * info->mode is what it requires. */
	h->mode = FI_RX_CQ_DATA | FI_CONTEXT | FI_CONTEXT2 | FI_MSG_PREFIX;
	h->ep_attr->type = type;
	h->tx_attr->msg_order = order;
	h->domain_attr->mr_mode =
	    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	h->fabric_attr->prov_name = strdup(prov);
	if (!fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, h, &list))
		for (struct fi_info *i = list; i && !found; i = i->next) {
			if (strcmp(i->fabric_attr->prov_name, prov))
				continue; /* a layered "tcp;ofi_rxm" */
			found = 1;
			oi->found = 1;
			oi->caps = i->caps;
			oi->mode = i->mode;
			oi->msg_order = i->tx_attr->msg_order;
			oi->mr_mode = i->domain_attr->mr_mode;
			oi->ep_type = i->ep_attr->type;
			oi->cq_data_size = i->domain_attr->cq_data_size;
			oi->mr_key_size = i->domain_attr->mr_key_size;
		}
	fi_freeinfo(list);
	fi_freeinfo(h);
	return found;
}

static void ofi_query(const char *prov, struct oinfo *oi, char *names, size_t cap)
{
	static const enum fi_ep_type types[] = {FI_EP_MSG, FI_EP_RDM};
	struct fi_info *all = NULL;

	memset(oi, 0, sizeof(*oi));
	for (size_t t = 0; t < 2 && !oi->found; t++)
		query_one(prov, types[t], 0, oi);
	/* Providers list only the ordering asked for (shm says FI_ORDER_SAS
	 * unless asked): ask for write-after-write and keep the answer. */
	if (oi->found) {
		struct oinfo o2 = {0};

		if (query_one(prov, (enum fi_ep_type)oi->ep_type, FI_ORDER_WAW, &o2))
			oi->msg_order = o2.msg_order;
	}
	names[0] = '\0';
	if (oi->found || fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, NULL, &all))
		return;
	for (struct fi_info *i = all; i; i = i->next) {
		const char *p = i->fabric_attr->prov_name;
		size_t l = strlen(p);
		const char *hit = strstr(names, p);

		if (!strchr(p, ';') && !(hit && (hit[l] == ',' || !hit[l])))
			dr_cat(names, cap, "%s%s", names[0] ? ", " : "", p);
	}
	fi_freeinfo(all);
}

/* ------------------------------------------------------------ the probes */

typedef void (*on_listen_fn)(int port, void *arg);

/* Receive the probes through wimm: listen, accept one connection, wait
 * for NPROBES write-with-imm events, check their bytes. */
static void receive_probes(const char *uri, const char *bind, int timeout_ms,
			   on_listen_fn on_listen, void *arg, struct oprobe *res)
{
	struct wimm_ctx *ctx = NULL;
	struct wimm_mr *mr = NULL;
	struct wimm_listener *l = NULL;
	struct wimm_conn *c = NULL;
	uint8_t *win = calloc(1, WINDOW);
	int64_t deadline;
	int rc;

	memset(res, 0, sizeof(*res));
	if (!win) {
		snprintf(res->err, sizeof(res->err), "out of memory");
		goto out;
	}
	if ((rc = wimm_ctx_open(uri, NULL, &ctx)) ||
	    (rc = wimm_mr_reg(ctx, win, WINDOW, WIMM_REMOTE_WRITE, &mr)) ||
	    (rc = wimm_listen(ctx, bind, &(struct wimm_conn_attr){.window = mr, .rx_depth = 8},
			      &l))) {
		snprintf(res->err, sizeof(res->err), "receiver: %s", wimm_strerror(rc));
		on_listen(-1, arg);
		goto out;
	}
	on_listen(wimm_listener_port(l), arg);
	if ((rc = wimm_accept(l, timeout_ms, &c))) {
		snprintf(res->err, sizeof(res->err), "receiver: accept: %s", wimm_strerror(rc));
		goto out;
	}
	deadline = dr_now_ms() + timeout_ms;
	while (res->n < NPROBES && dr_now_ms() < deadline) {
		struct wimm_event ev;
		int i;

		if (wimm_wait(ctx, &ev, 1, WIMM_WAIT_BLOCK, 100) != 1)
			continue;
		if (ev.type == WIMM_EV_DISCONNECT || ev.type == WIMM_EV_ERROR) {
			snprintf(res->err, sizeof(res->err), "receiver: %s event (%s)",
				 ev.type == WIMM_EV_ERROR ? "ERROR" : "DISCONNECT",
				 wimm_strerror(ev.status));
			break;
		}
		if (ev.type != WIMM_EV_WRITE_IMM)
			continue;
		i = res->n++;
		res->imm[i] = ev.imm;
		res->len[i] = ev.len;
		res->bytes_ok[i] = 1;
		/* Probe k wrote at probe_off[k]; the imm says which it is. */
		if (ev.imm - IMM_BASE < NPROBES)
			for (uint32_t b = 0; b < ev.len && b < WINDOW; b++)
				if (win[probe_off[ev.imm - IMM_BASE] + b] !=
				    pattern(b, (int)(ev.imm - IMM_BASE)))
					res->bytes_ok[i] = 0;
	}
	if (res->n < NPROBES && !res->err[0])
		snprintf(res->err, sizeof(res->err), "receiver: %d of %d events within %d ms",
			 res->n, NPROBES, timeout_ms);
out:
	wimm_conn_delete(&c);
	wimm_listener_delete(&l);
	wimm_mr_dereg(&mr);
	wimm_ctx_close(&ctx);
	free(win);
}

/* The sending end; closed only after the receiver has its events: on shm
 * a receiver that hands credits back to a peer whose region is gone
 * crashes inside the provider. */
struct osender {
	struct wimm_ctx *ctx;
	struct wimm_mr *mr;
	struct wimm_conn *c;
	uint8_t *src;
};

static int send_probes(struct osender *s, const char *uri, const char *addr, int timeout_ms,
		       char *err, size_t errlen)
{
	int rc = WIMM_E_NOMEM, done = 0;
	int64_t deadline = dr_now_ms() + timeout_ms;

	memset(s, 0, sizeof(*s));
	s->src = calloc(1, WINDOW);
	if (!s->src)
		goto out;
	for (int i = 0; i < NPROBES; i++)
		for (uint32_t b = 0; b < probe_len[i]; b++)
			s->src[probe_off[i] + b] = pattern(b, i);
	if ((rc = wimm_ctx_open(uri, NULL, &s->ctx)) ||
	    (rc = wimm_mr_reg(s->ctx, s->src, WINDOW, WIMM_LOCAL, &s->mr)) ||
	    (rc = wimm_connect(s->ctx, addr, NULL, timeout_ms, &s->c)))
		goto out;
	for (int i = 0; i < NPROBES; i++) {
		rc = wimm_write_imm(s->c, s->mr, probe_off[i], probe_off[i], probe_len[i],
				    IMM_BASE + (uint32_t)i, WIMM_F_SIGNAL | WIMM_F_WAIT);
		if (rc)
			goto out;
	}
	/* Signaled: each completion says the write reached the peer. */
	while (done < NPROBES && dr_now_ms() < deadline) {
		struct wimm_event ev;

		if (wimm_wait(s->ctx, &ev, 1, WIMM_WAIT_BLOCK, 100) != 1)
			continue;
		if (ev.type == WIMM_EV_SEND_DONE)
			done++;
		else if (ev.type == WIMM_EV_ERROR || ev.type == WIMM_EV_DISCONNECT) {
			rc = ev.status ? ev.status : WIMM_E_PROVIDER;
			goto out;
		}
	}
	rc = done == NPROBES ? 0 : WIMM_E_TIMEDOUT;
out:
	if (rc)
		snprintf(err, errlen, "sender: %s", wimm_strerror(rc));
	return rc ? -1 : 0;
}

static void sender_close(struct osender *s)
{
	wimm_conn_delete(&s->c);
	wimm_mr_dereg(&s->mr);
	wimm_ctx_close(&s->ctx);
	free(s->src);
	s->src = NULL;
}

struct loop_rx {
	const char *uri;
	int timeout_ms;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int port; /* 0: not yet, -1: failed */
	struct oprobe res;
};

static void loop_listening(int port, void *arg)
{
	struct loop_rx *x = arg;

	pthread_mutex_lock(&x->lock);
	x->port = port;
	pthread_cond_signal(&x->cond);
	pthread_mutex_unlock(&x->lock);
}

static void *loop_main(void *arg)
{
	struct loop_rx *x = arg;

	receive_probes(x->uri, "127.0.0.1:0", x->timeout_ms, loop_listening, x, &x->res);
	return NULL;
}

/* Loopback: a receiver thread with its own context (contexts are
 * single-threaded) and the sender here. */
static void probe_loopback(const char *uri, int timeout_ms, struct oprobe *res, char *serr,
			   size_t serrlen)
{
	struct loop_rx x = {.uri = uri, .timeout_ms = timeout_ms};
	struct osender snd = {0};
	pthread_t th;
	char addr[32];

	pthread_mutex_init(&x.lock, NULL);
	pthread_cond_init(&x.cond, NULL);
	serr[0] = '\0';
	if (pthread_create(&th, NULL, loop_main, &x)) {
		snprintf(res->err, sizeof(res->err), "cannot start the receiver thread");
		return;
	}
	pthread_mutex_lock(&x.lock);
	while (!x.port)
		pthread_cond_wait(&x.cond, &x.lock);
	pthread_mutex_unlock(&x.lock);
	if (x.port > 0) {
		snprintf(addr, sizeof(addr), "127.0.0.1:%d", x.port);
		send_probes(&snd, uri, addr, timeout_ms, serr, serrlen);
	}
	pthread_join(th, NULL);
	sender_close(&snd);
	*res = x.res;
	pthread_cond_destroy(&x.cond);
	pthread_mutex_destroy(&x.lock);
}

/* ------------------------------------------------------------ the server */

static void serve_listening(int port, void *arg)
{
	FILE *out = arg;

	if (port > 0) {
		fprintf(out, "listen %d\n", port);
		fflush(out);
	}
}

static void info_line(const struct oinfo *oi, FILE *out)
{
	fprintf(out, "info %d %" PRIx64 " %" PRIx64 " %x %zu %" PRIx64 " %d %zu\n", oi->found,
		oi->caps, oi->mode, (unsigned)oi->mr_mode, oi->cq_data_size, oi->msg_order,
		oi->ep_type, oi->mr_key_size);
}

int do_serve_line(const char *prov, const struct dr_opts *o, char *line, FILE *out)
{
	char uri[80], names[256];
	struct oinfo oi;
	struct oprobe res;

	snprintf(uri, sizeof(uri), "ofi:%s", prov);
	if (!strcmp(line, "info")) {
		ofi_query(prov, &oi, names, sizeof(names));
		info_line(&oi, out);
		return 1;
	}
	if (strcmp(line, "probe"))
		return 0;
	receive_probes(uri, "0.0.0.0:0", o->timeout_ms, serve_listening, out, &res);
	if (res.err[0] && !res.n) {
		fprintf(out, "error %s\n", res.err);
		return 1;
	}
	fprintf(out, "events %d", res.n);
	for (int i = 0; i < res.n; i++)
		fprintf(out, " %u %u %d", res.imm[i], res.len[i], res.bytes_ok[i]);
	fputc('\n', out);
	return 1;
}

static int probe_remote(const struct dr_opts *o, const char *uri, struct dp_conn *c,
			struct oprobe *res, char *serr, size_t serrlen, char *err, size_t errlen)
{
	char line[DP_LINE], addr[300];
	struct osender snd;
	int port, off = 0, used, rc = -1;

	memset(res, 0, sizeof(*res));
	serr[0] = '\0';
	if (dp_call(c, line, sizeof(line), err, errlen, "probe"))
		return -1;
	if (sscanf(line, "listen %d", &port) != 1) {
		snprintf(err, errlen, "bad reply from the doctor peer: \"%.80s\"", line);
		return -1;
	}
	snprintf(addr, sizeof(addr), strchr(o->host, ':') ? "[%s]:%d" : "%s:%d", o->host, port);
	send_probes(&snd, uri, addr, o->timeout_ms, serr, serrlen);
	if (dp_read(c, line, sizeof(line), o->timeout_ms + 5000, err, errlen))
		goto out;
	rc = 0;
	if (!strncmp(line, "error ", 6)) {
		snprintf(res->err, sizeof(res->err), "receiver: %.200s", line + 6);
		goto out;
	}
	if (sscanf(line, "events %d%n", &res->n, &off) != 1 || res->n < 0 || res->n > NPROBES)
		rc = -1;
	for (int i = 0; !rc && i < res->n; i++, off += used)
		if (sscanf(line + off, " %u %u %d%n", &res->imm[i], &res->len[i], &res->bytes_ok[i],
			   &used) != 3)
			rc = -1;
	if (rc)
		snprintf(err, errlen, "bad reply from the doctor peer: \"%.80s\"", line);
out:
	sender_close(&snd);
	return rc;
}

/* ------------------------------------------------------------- the steps */

static void tostr(char *buf, size_t cap, const void *v, enum fi_type t)
{
	/* fi_tostr's buffer is static: copy at once. */
	snprintf(buf, cap, "%s", fi_tostr(v, t));
	if (!buf[0])
		snprintf(buf, cap, "none");
}

static void steps(const struct dr_opts *o, const struct dr_fabric *f, const struct oinfo *oi,
		  const struct oinfo *peer, const struct oprobe *res, const char *serr,
		  struct dr_report *r)
{
	char caps[512], mode[128], mr[256], order[512], ev[DR_TEXT];
	int all_in = res->n == NPROBES, bytes = 0, imms = 0;
	int need_caps = (oi->caps & (FI_RMA | FI_WRITE | FI_REMOTE_WRITE)) ==
			(FI_RMA | FI_WRITE | FI_REMOTE_WRITE);

	tostr(caps, sizeof(caps), &oi->caps, FI_TYPE_CAPS);
	tostr(mode, sizeof(mode), &oi->mode, FI_TYPE_MODE);
	tostr(mr, sizeof(mr), &oi->mr_mode, FI_TYPE_MR_MODE);
	tostr(order, sizeof(order), &oi->msg_order, FI_TYPE_MSG_ORDER);
	for (int i = 0; i < res->n; i++) {
		bytes += res->bytes_ok[i];
		imms += res->imm[i] == IMM_BASE + (uint32_t)i && res->len[i] == probe_len[i];
	}
	snprintf(r->sender_saw, sizeof(r->sender_saw), "%s",
		 serr[0] ? serr : "3 signaled write-with-imm completed");
	r->receiver_saw[0] = '\0';
	for (int i = 0; i < res->n; i++)
		dr_cat(r->receiver_saw, sizeof(r->receiver_saw),
		       "%sWIMM_EV_WRITE_IMM imm 0x%08x len %u%s", i ? "; " : "", res->imm[i],
		       res->len[i], res->bytes_ok[i] ? "" : " (bytes differ)");
	if (res->err[0])
		dr_cat(r->receiver_saw, sizeof(r->receiver_saw), "%s%s", res->n ? "; " : "",
		       res->err);
	snprintf(r->counters, sizeof(r->counters), "n/a (libfabric has no device counters)");

	snprintf(ev, sizeof(ev), "mode %s: remote CQ data %s a posted receive", mode,
		 oi->mode & FI_RX_CQ_DATA ? "consumes" : "does not consume");
	if (peer)
		dr_cat(ev, sizeof(ev), " (the peer's provider: %s)",
		       peer->mode & FI_RX_CQ_DATA ? "consumes one" : "does not");
	dr_cat(ev, sizeof(ev), "; %d of %d probe events arrived, %d with the imm and length sent",
	       res->n, NPROBES, imms);
	if ((oi->mode | (peer ? peer->mode : 0)) & FI_RX_CQ_DATA || !all_in || imms != NPROBES)
		dr_set(
		    r, DR_RECV, DR_FAIL,
		    "with FI_RX_CQ_DATA every write-with-imm needs a posted receive, which wimm's "
		    "ofi backend does not post: use verbs:<device>; missing events: see the "
		    "receiver's line",
		    "%s. Cause: %s", ev,
		    (oi->mode | (peer ? peer->mode : 0)) & FI_RX_CQ_DATA
			? "the provider consumes a receive per remote CQ data"
			: "the probes' events did not arrive as sent");
	else
		dr_set(r, DR_RECV, DR_PASS, "", "%s", ev);

	/* Doorbells announce data in post order (contract 1) only if the
	 * provider keeps writes in order: FI_ORDER_WAW. */
	snprintf(ev, sizeof(ev),
		 "libfabric shows no QP state; what stands for it: a %s endpoint with caps %s; "
		 "ordering (tx msg_order, FI_ORDER_WAW asked for) %s: writes %s in post order; "
		 "the probe pair %s%s%s",
		 fi_tostr(&oi->ep_type, FI_TYPE_EP_TYPE), caps, order,
		 oi->msg_order & FI_ORDER_WAW ? "land" : "may not land",
		 serr[0] ? "failed: " : "connected and completed", serr,
		 peer && !(peer->msg_order & FI_ORDER_WAW)
		     ? "; the peer's provider lacks FI_ORDER_WAW"
		     : "");
	if (need_caps && !serr[0] && oi->msg_order & FI_ORDER_WAW &&
	    (!peer || peer->msg_order & FI_ORDER_WAW))
		dr_set(r, DR_QP, DR_PASS, "", "%s", ev);
	else
		dr_set(r, DR_QP, DR_FAIL,
		       "pick a provider with FI_RMA, FI_WRITE, FI_REMOTE_WRITE and FI_ORDER_WAW "
		       "(fi_info -p NAME -v), and check the peer's address",
		       "%s. Cause: %s", ev,
		       serr[0]	   ? "the probe pair did not connect and complete"
		       : need_caps ? "writes may land out of post order"
				   : "the provider lacks RMA writes");

	snprintf(ev, sizeof(ev),
		 "mr_mode %s; %zu-byte keys chosen by %s: %s; %s; %d of %d probes' bytes landed "
		 "where the sender aimed",
		 mr, oi->mr_key_size, oi->mr_mode & FI_MR_PROV_KEY ? "the provider" : "the user",
		 oi->mr_mode & FI_MR_PROV_KEY
		     ? "the key must travel to the sender (wimm's handshake)"
		     : "wimm chooses the keys",
		 oi->mr_mode & FI_MR_VIRT_ADDR ? "targets are virtual addresses"
					       : "targets are offsets into the region",
		 bytes, res->n);
	if (all_in && bytes == NPROBES)
		dr_set(r, DR_KEY, DR_PASS, "", "%s", ev);
	else
		dr_set(
		    r, DR_KEY, DR_FAIL,
		    "the key and address the sender uses must be the ones the receiver's "
		    "fi_mr_reg gave (fi_mr_key), as offset or virtual address per FI_MR_VIRT_ADDR",
		    "%s. Cause: the probes' bytes did not land where the sender aimed", ev);

	snprintf(ev, sizeof(ev),
		 "provider caps %s FI_REMOTE_WRITE; the window was registered "
		 "with FI_REMOTE_WRITE (WIMM_REMOTE_WRITE)",
		 oi->caps & FI_REMOTE_WRITE ? "include" : "lack");
	if (oi->caps & FI_REMOTE_WRITE && all_in)
		dr_set(r, DR_ACCESS, DR_PASS, "", "%s", ev);
	else
		dr_set(r, DR_ACCESS, DR_FAIL,
		       "register the target with FI_REMOTE_WRITE on a provider that has it",
		       "%s. Cause: the target cannot be written remotely", ev);

	snprintf(ev, sizeof(ev),
		 "cq_data_size %zu bytes (the imm needs 4)%s; CQ depth and overrun are the "
		 "provider's (no CQ error event in libfabric; wimm sizes its CQ from cq_budget)",
		 oi->cq_data_size, peer && peer->cq_data_size < 4 ? ", the peer's is smaller" : "");
	if (oi->cq_data_size >= 4 && (!peer || peer->cq_data_size >= 4))
		dr_set(r, DR_CQ, DR_PASS, "", "%s", ev);
	else
		dr_set(r, DR_CQ, DR_FAIL, "use a provider whose cq_data_size is at least 4",
		       "%s. Cause: the 32-bit imm does not fit the CQ data", ev);

	dr_set(r, DR_WIRE, DR_NA, "", "%s: no RoCE packet to capture (%s)", f->name,
	       !strcmp(f->name, "shm")	 ? "shm moves the bytes through shared memory"
	       : !strcmp(f->name, "tcp") ? "tcp carries RMA in its own protocol over a TCP stream"
					 : "not a RoCE transport");
	(void)o;
}

int do_run(const struct dr_opts *o, const struct dr_fabric *f, struct dr_report *r, char *err,
	   size_t errlen)
{
	struct oinfo oi, peer;
	struct oprobe res;
	struct dp_conn c;
	char uri[80], names[256], serr[256], line[DP_LINE];
	int remote = o->host != NULL;

	snprintf(uri, sizeof(uri), "ofi:%s", f->name);
	ofi_query(f->name, &oi, names, sizeof(names));
	if (!oi.found) {
		snprintf(
		    err, errlen,
		    "no libfabric provider '%s' with RMA and remote writes here (providers: %s)",
		    f->name, names[0] ? names : "none");
		return -1;
	}
	if (remote) {
		if (dp_connect(o->host, o->port, uri, o->timeout_ms, &c, err, errlen))
			return -1;
		if (dp_call(&c, line, sizeof(line), err, errlen, "info") ||
		    sscanf(line, "info %d %" SCNx64 " %" SCNx64 " %x %zu %" SCNx64 " %d %zu",
			   &peer.found, &peer.caps, &peer.mode, (unsigned *)&peer.mr_mode,
			   &peer.cq_data_size, &peer.msg_order, &peer.ep_type,
			   &peer.mr_key_size) != 8 ||
		    probe_remote(o, uri, &c, &res, serr, sizeof(serr), err, errlen)) {
			if (!err[0])
				snprintf(err, errlen, "bad info from the doctor peer");
			dp_close(&c);
			return -1;
		}
		dp_close(&c);
	} else {
		probe_loopback(uri, o->timeout_ms, &res, serr, sizeof(serr));
	}
	snprintf(r->setup, sizeof(r->setup), "%s pair through wimm on %s (%s endpoints)",
		 remote ? "remote" : "loopback", uri, fi_tostr(&oi.ep_type, FI_TYPE_EP_TYPE));
	snprintf(r->probe, sizeof(r->probe),
		 "%d signaled write-with-imm of %u, %u and %u bytes, imm 0x%08x..%x", NPROBES,
		 probe_len[0], probe_len[1], probe_len[2], IMM_BASE, IMM_BASE + NPROBES - 1);
	steps(o, f, &oi, remote ? &peer : NULL, &res, serr, r);
	return 0;
}
#endif /* DOCTOR_HAVE_OFI */
