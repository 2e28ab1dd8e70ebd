/* Bad input is refused with the documented error and breaks nothing:
 * unknown fabrics and devices, malformed and unreachable addresses,
 * malformed handshakes arriving at a real listener, imm fields out of
 * range, NULL and double deletes, closing a context that is still in use. */
#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conf.h"

static void t_bad_uri(const char *uri)
{
	struct wimm_ctx *ctx = NULL;
	int rc;

	(void)uri;
	CHECK_RC(wimm_ctx_open("bogus:x", NULL, &ctx), WIMM_E_NOFABRIC);
	CHECK_RC(wimm_ctx_open("ofi:nosuchprov", NULL, &ctx), WIMM_E_NODEV);
	/* A provider libfabric has but wimm does not run on (layered rxm: it
	 * used to open and then crash at the first zero-length write) is
	 * refused at open, saying which ones wimm runs on. */
	rc = wimm_ctx_open("ofi:tcp;ofi_rxm", NULL, &ctx);
	CHECKF(rc == WIMM_E_NOTSUP || rc == WIMM_E_NODEV || rc == WIMM_E_NOFABRIC,
	       "ofi:tcp;ofi_rxm: %s", wimm_err_name(rc));
	if (rc == WIMM_E_NOTSUP) {
		const char *text = NULL;
		wimm_provider_error(NULL, &text);
		CHECKF(text && strstr(text, "tcp (FI_EP_MSG) and shm (FI_EP_RDM)"),
		       "ofi:tcp;ofi_rxm: the reason: %s", text ? text : "(none)");
	}
	rc = wimm_ctx_open("verbs:nosuchdev", NULL, &ctx);
	CHECKF(rc == WIMM_E_NODEV || rc == WIMM_E_NOFABRIC, "verbs:nosuchdev: %s",
	       wimm_err_name(rc));
	rc = wimm_ctx_open("", NULL, &ctx);
	CHECKF(rc == WIMM_E_NOFABRIC || rc == WIMM_E_INVAL, "empty URI: %s", wimm_err_name(rc));
	CHECK_RC(wimm_ctx_open(NULL, NULL, &ctx), WIMM_E_INVAL);
	CHECK_RC(wimm_ctx_open("ofi:tcp", NULL, NULL), WIMM_E_INVAL);
out:
	wimm_ctx_close(&ctx);
}

static void t_bad_addr(const char *uri)
{
	static const char *const bad[] = {
	    "nohostport", "127.0.0.1:notaport", "[::1",	       "127.0.0.1:99999",
	    "127.0.0.1:", "[::1]7471",		"1.2.3.4:5:6", ":7471"};
	struct wimm_listener *l = NULL;
	struct wimm_conn *c = NULL;
	struct wimm_ctx *ctx = NULL;
	int rc;

	if (srv_ctx_open(uri, NULL, &ctx))
		goto out;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECKF((rc = wimm_connect(ctx, bad[i], NULL, 2000, &c)) == WIMM_E_ADDR,
		       "connect(\"%s\"): %s, expected WIMM_E_ADDR", bad[i], wimm_err_name(rc));
		CHECK(c == NULL);
		/* ":7471" is a valid listen address (any host). */
		if (strcmp(bad[i], ":7471") == 0)
			continue;
		CHECKF((rc = wimm_listen(ctx, bad[i], NULL, &l)) == WIMM_E_ADDR,
		       "listen(\"%s\"): %s, expected WIMM_E_ADDR", bad[i], wimm_err_name(rc));
		CHECK(l == NULL);
	}
	CHECK_RC(wimm_connect(ctx, NULL, NULL, 2000, &c), WIMM_E_INVAL);
	CHECK_RC(wimm_listen(ctx, NULL, NULL, &l), WIMM_E_INVAL);

	/* A name that cannot resolve: ADDR, and promptly. */
	int64_t t0 = conf_now_ms();

	rc = wimm_connect(ctx, "no-such-host.invalid:7471", NULL, 3000, &c);
	CHECKF(rc == WIMM_E_ADDR, "connect to an unresolvable name: %s, expected WIMM_E_ADDR",
	       wimm_err_name(rc));
	CHECK(conf_now_ms() - t0 < 6000);
out:
	wimm_conn_delete(&c);
	wimm_listener_delete(&l);
	if (ctx)
		wimm_ctx_close(&ctx);
}

/* A port nobody listens on: bind one, note it, close it. */
static int free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd < 0)
		return -1;
	inet_pton(AF_INET, conf_host(), &sa.sin_addr);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

static void t_unreachable(const char *uri)
{
	struct wimm_conn *c = NULL;
	struct wimm_ctx *ctx = NULL;
	char addr[300];
	int rc;

	if (srv_ctx_open(uri, NULL, &ctx))
		goto out;
	int port = free_port();

	CHECK(port > 0);
	snprintf(addr, sizeof(addr), "%s:%d", conf_host(), port);
	int64_t t0 = conf_now_ms();

	rc = wimm_connect(ctx, addr, NULL, 3000, &c);
	int64_t ms = conf_now_ms() - t0;

	conf_diag("connect to a closed port: %s after %lld ms", wimm_err_name(rc), (long long)ms);
	CHECKF(rc == WIMM_E_UNREACHABLE || rc == WIMM_E_TIMEDOUT,
	       "connect to a closed port: %s, expected UNREACHABLE or TIMEDOUT", wimm_err_name(rc));
	CHECK(c == NULL);
	CHECKF(ms < 4000, "connect with timeout 3000 ms took %lld ms", (long long)ms);
	/* The failed attempt left nothing behind that would keep the
	 * context busy. */
	CHECK_OK(wimm_ctx_close(&ctx));
out:
	wimm_conn_delete(&c);
	if (ctx)
		wimm_ctx_close(&ctx);
}

/* ------------------------------------------------- raw handshakes (RDM) */

/* Fabrics whose listener is a plain TCP socket carrying the handshake as a
 * 4-byte big-endian length and the bytes (src/ofi/ofi_cm.c); MSG fabrics
 * (ofi:tcp, verbs) carry it in CM data, which bad_handshake_cm covers. */
static int raw_framing(const char *uri)
{
	return strncmp(uri, "ofi:", 4) == 0 && strcmp(uri, "ofi:tcp") != 0 &&
	       strcmp(uri, "ofi:verbs") != 0;
}

static void put_be(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * (n - 1 - i)));
}

/* A well-formed version-2 handshake body (no window, no address). */
static size_t good_hs(uint8_t *b)
{
	memset(b, 0, 56);
	put_be(b, 0x5749, 2);
	b[2] = 2;
	put_be(b + 4, 16, 4);	    /* rx_depth */
	put_be(b + 36, 0x10000, 8); /* credit_addr */
	return 56;
}

/* ipc: the frame as one message with three fds where the backend wants
 * its ring, wake page and eventfd: the core's decoder sees the bytes. */
static int raw_send_ipc(const char *addr, const uint8_t *buf, size_t len)
{
	const int fds[3] = {STDERR_FILENO, STDERR_FILENO, STDERR_FILENO};
	int fd = conf_ipc_dial(addr);

	if (fd < 0 || len == 0)
		return fd;
	if (conf_ipc_send(fd, buf, len, fds)) {
		close(fd);
		return -1;
	}
	return fd;
}

int conf_raw_send(const char *uri, const char *addr, const uint8_t *buf, size_t len)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	int fd = -1, ret = -1;

	if (!strcmp(uri, "ipc"))
		return raw_send_ipc(addr, buf, len);

	snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
	if (getaddrinfo(host, colon + 1, &hints, &res))
		return -1;
	fd = socket(res->ai_family, SOCK_STREAM, 0);
	if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
	    (len == 0 || send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len))
		ret = fd;
	else if (fd >= 0)
		close(fd);
	freeaddrinfo(res);
	return ret;
}

struct frame_case {
	const char *what;
	int want; /* expected accept result; 1 = any error */
};

static size_t make_frame(int i, uint8_t *f)
{
	uint8_t *b = f + 4;
	size_t n = good_hs(b);
	uint32_t flen = (uint32_t)n;

	switch (i) {
	case 0: /* garbage */
		for (size_t k = 0; k < n; k++)
			b[k] = (uint8_t)(k * 37 + 11);
		break;
	case 1: /* a truncated handshake in a complete frame */
		n = flen = 30;
		break;
	case 2: /* another version */
		b[2] = 3;
		break;
	case 3: /* oversized frame length, the bytes never come */
		flen = 100000;
		break;
	case 4: /* the largest length there is */
		flen = 0xFFFFFFFFu;
		break;
	case 5: /* empty frame */
		n = flen = 0;
		break;
	case 6: /* trailing byte */
		b[n] = 0;
		n = flen = 57;
		break;
	case 7: /* unknown flag bit */
		b[3] = 0x80;
		break;
	}
	put_be(f, flen, 4);
	return 4 + n;
}

static const struct frame_case frame_cases[] = {
    {"garbage", WIMM_E_PROTO},	     {"truncated", WIMM_E_PROTO},
    {"version 3", WIMM_E_VERSION},   {"oversized length", WIMM_E_PROTO},
    {"length 2^32-1", WIMM_E_PROTO}, {"empty", WIMM_E_PROTO},
    {"trailing byte", WIMM_E_PROTO}, {"unknown flag", WIMM_E_PROTO},
};

/* Malformed handshakes at a real listener: each refused with its error,
 * and the listener then still accepts a good connection. On MSG fabrics
 * the same raw bytes hit the provider's CM port: nothing may be accepted
 * and the listener must survive. */
static void t_bad_handshake(const char *uri)
{
	struct wimm_conn_attr sattr = {0};
	uint8_t frame[4 + 300];
	struct wimm_conn *bogus = NULL;
	int strict = raw_framing(uri);
	char addr[300];
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	/* rdma_cm listens on no TCP port and carries the handshake in private
	 * data: bad_handshake_cm sends hostile private data there. */
	if (strncmp(uri, "verbs", 5) == 0) {
		conf_skip("no TCP listener on %s (bad_handshake_cm covers its CM)", uri);
		goto out;
	}
	if (conf_listen(p.sctx, &sattr, &p.l, addr, sizeof(addr)))
		goto out;
	for (size_t i = 0; i < sizeof(frame_cases) / sizeof(frame_cases[0]); i++) {
		size_t n = make_frame((int)i, frame);
		int fd = conf_raw_send(uri, addr, frame, n);

		CHECKF(fd >= 0, "%s: cannot reach the listener over TCP", frame_cases[i].what);
		int64_t t0 = conf_now_ms();
		int rc = wimm_accept(p.l, strict ? 5000 : 300, &bogus);

		close(fd);
		CHECKF(rc != 0, "%s: wimm_accept accepted it", frame_cases[i].what);
		CHECK(bogus == NULL);
		if (strict)
			CHECKF(rc == frame_cases[i].want, "%s: wimm_accept gave %s, expected %s",
			       frame_cases[i].what, wimm_err_name(rc),
			       wimm_err_name(frame_cases[i].want));
		CHECK(conf_now_ms() - t0 < 6000);
	}
	/* A peer that connects and says nothing at all, then leaves. */
	int fd = conf_raw_send(uri, addr, NULL, 0);

	CHECK(fd >= 0);
	close(fd);
	int rc = wimm_accept(p.l, 500, &bogus);

	CHECKF(rc != 0, "silent peer: accepted");
	CHECK(bogus == NULL);
	if (!strict)
		conf_diag("raw bytes at the %s CM port: listener refused them all", uri);

	/* The listener still works. */
	pair_still_accepts(&p, addr, 77);
out:
	wimm_conn_delete(&bogus);
	pair_close(&p);
}

/* ---------------------------------------------------- objects and misuse */

static void t_imm_range(const char *uri)
{
	static const struct wimm_imm_field log[] = {{"len", 16}, {"seq", 12}, {"flag", 4}};
	struct wimm_imm_layout l;
	uint32_t imm = 0xCAFEF00Du;

	(void)uri;
	CHECK_OK(wimm_imm_layout_init(&l, log, 3));
	CHECK_RC(wimm_imm_pack(&l, (uint32_t[]){70000, 1, 1}, &imm), WIMM_E_RANGE);
	CHECK(imm == 0xCAFEF00Du);
	CHECK_RC(wimm_imm_pack(&l, (uint32_t[]){1, 4096, 1}, &imm), WIMM_E_RANGE);
	CHECK_RC(wimm_imm_pack(&l, (uint32_t[]){1, 1, 16}, &imm), WIMM_E_RANGE);
	CHECK(imm == 0xCAFEF00Du);
	CHECK_OK(wimm_imm_pack(&l, (uint32_t[]){65535, 4095, 15}, &imm));
	CHECK(imm == 0xFFFFFFFFu);
out:;
}

static void t_delete_twice(const char *uri)
{
	struct wimm_conn_attr sattr = {0}, cattr = {0};
	struct wimm_conn *nc = NULL;
	struct wimm_listener *nl = NULL;
	struct wimm_mr *nm = NULL;
	struct wimm_ctx *nx = NULL;
	struct pair p;

	memset(&p, 0, sizeof(p));
	CHECK_OK(wimm_conn_delete(NULL));
	CHECK_OK(wimm_conn_delete(&nc));
	CHECK_OK(wimm_listener_delete(NULL));
	CHECK_OK(wimm_listener_delete(&nl));
	CHECK_OK(wimm_mr_dereg(NULL));
	CHECK_OK(wimm_mr_dereg(&nm));
	CHECK_OK(wimm_ctx_close(NULL));
	CHECK_OK(wimm_ctx_close(&nx));

	if (pair_open(&p, uri))
		goto out;
	struct region *r = pair_region(&p, p.cctx, 4096, WIMM_LOCAL);

	CHECK(r);
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	CHECK_OK(wimm_conn_delete(&p.c));
	CHECK(p.c == NULL);
	CHECK_OK(wimm_conn_delete(&p.c));
	CHECK_OK(wimm_listener_delete(&p.l));
	CHECK(p.l == NULL);
	CHECK_OK(wimm_listener_delete(&p.l));
	CHECK_OK(wimm_mr_dereg(&r->mr));
	CHECK(r->mr == NULL);
	CHECK_OK(wimm_mr_dereg(&r->mr));
out:
	pair_close(&p);
}

/* Closing a context with live objects is refused and changes nothing. */
static void t_ctx_close_busy(const char *uri)
{
	struct wimm_conn_attr sattr = {0}, cattr = {0};
	struct wimm_ctx *keep;
	struct region *win;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	win = pair_region(&p, p.sctx, 4096, WIMM_REMOTE_WRITE);
	CHECK(win);
	keep = p.sctx;
	CHECK_RC(wimm_ctx_close(&p.sctx), WIMM_E_BUSY);
	CHECK(p.sctx == keep);
	sattr.window = win->mr;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	/* A window a live connection exposes cannot go. */
	CHECK_RC(wimm_mr_dereg(&win->mr), WIMM_E_BUSY);
	CHECK(win->mr != NULL);
	keep = p.cctx;
	CHECK_RC(wimm_ctx_close(&p.cctx), WIMM_E_BUSY);
	CHECK(p.cctx == keep);
	/* The listener (which hands the window to future connections) and
	 * the region each still keep the server side busy. */
	CHECK_OK(wimm_conn_delete(&p.s));
	keep = p.sctx;
	CHECK_RC(wimm_ctx_close(&p.sctx), WIMM_E_BUSY);
	CHECK(p.sctx == keep);
	CHECK_OK(wimm_listener_delete(&p.l));
	CHECK_RC(wimm_ctx_close(&p.sctx), WIMM_E_BUSY);
	CHECK(p.sctx == keep);
	/* Everything still works after the refusals. */
	CHECK_OK(wimm_mr_dereg(&win->mr));
	CHECK_OK(wimm_ctx_close(&p.sctx));
	CHECK(p.sctx == NULL);
out:
	pair_close(&p);
}

/* accept with nothing pending: AGAIN for timeout 0, TIMEDOUT on time. */
static void t_accept_timeout(const char *uri)
{
	struct wimm_conn *c = NULL;
	char addr[300];
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	if (conf_listen(p.sctx, NULL, &p.l, addr, sizeof(addr)))
		goto out;
	CHECK_RC(wimm_accept(p.l, 0, &c), WIMM_E_AGAIN);
	int64_t t0 = conf_now_ms();

	CHECK_RC(wimm_accept(p.l, 200, &c), WIMM_E_TIMEDOUT);
	int64_t ms = conf_now_ms() - t0;

	CHECKF(ms >= 150 && ms < 2000, "accept(200 ms) returned after %lld ms", (long long)ms);
	CHECK(c == NULL);
	CHECK(wimm_listener_fd(p.l) >= 0);
	CHECK_RC(wimm_accept(NULL, 0, &c), WIMM_E_INVAL);
	CHECK_RC(wimm_accept(p.l, 0, NULL), WIMM_E_INVAL);
out:
	pair_close(&p);
}

const struct conf_test conf_tests_input[] = {
    {"bad_uri", t_bad_uri, 0},
    {"bad_addr", t_bad_addr, 0},
    {"unreachable", t_unreachable, 0},
    {"bad_handshake", t_bad_handshake, 0},
    {"imm_range", t_imm_range, 0},
    {"delete_twice", t_delete_twice, 0},
    {"ctx_close_busy", t_ctx_close_busy, 0},
    {"accept_timeout", t_accept_timeout, 0},
    {NULL, NULL, 0},
};
