/* The side protocol (doctor_proto.h): client calls and `--serve`. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "doctor_proto.h"

#define GREETING "wimm-doctor"

static void set_timeout(int fd, int timeout_ms)
{
	struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = timeout_ms % 1000 * 1000};

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* Connect with a deadline: a host that does not answer is an error within
 * timeout_ms, not the kernel's two minutes of SYN retries. */
static int tcp_connect(const char *host, int port, int timeout_ms, char *err, size_t errlen)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	char ports[16];
	int rc, last = 0, one = 1;

	snprintf(ports, sizeof(ports), "%d", port);
	rc = getaddrinfo(host, ports, &hints, &res);
	if (rc) {
		snprintf(err, errlen, "cannot resolve '%s': %s", host, gai_strerror(rc));
		return -1;
	}
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		socklen_t len = sizeof(last);

		if (fd < 0)
			continue;
		if (connect(fd, a->ai_addr, a->ai_addrlen) && errno != EINPROGRESS)
			last = errno;
		else if (poll(&p, 1, timeout_ms) != 1)
			last = ETIMEDOUT;
		else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &last, &len))
			last = errno;
		if (last) {
			close(fd);
			continue;
		}
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		freeaddrinfo(res);
		return fd;
	}
	freeaddrinfo(res);
	snprintf(err, errlen,
		 "no doctor answers at %s:%d: %s (start `wimm doctor --serve` there, "
		 "or check -p)",
		 host, port, last == ETIMEDOUT ? "no answer in time" : strerror(last));
	return -1;
}

static int open_streams(int fd, struct dp_conn *c)
{
	int fd2 = dup(fd);

	c->in = fdopen(fd, "r");
	c->out = fd2 >= 0 ? fdopen(fd2, "w") : NULL;
	if (!c->in || !c->out) {
		if (c->in)
			fclose(c->in);
		else
			close(fd);
		if (c->out)
			fclose(c->out);
		else if (fd2 >= 0)
			close(fd2);
		c->in = c->out = NULL;
		return -1;
	}
	return 0;
}

int dp_read(struct dp_conn *c, char *line, size_t cap, int timeout_ms, char *err, size_t errlen)
{
	set_timeout(fileno(c->in), timeout_ms);
	if (!fgets(line, (int)cap, c->in)) {
		snprintf(err, errlen, "the doctor peer %s",
			 errno == EAGAIN || errno == EWOULDBLOCK
			     ? "did not answer in time"
			     : "closed the connection (see its output)");
		return -1;
	}
	line[strcspn(line, "\r\n")] = '\0';
	return 0;
}

/* "wimm-doctor <version> ..." of either side: 0 if the version is ours,
 * else -1 with a message naming both. */
static int check_greeting(const char *line, const char *who, char *err, size_t errlen)
{
	int v, n = 0;

	if (sscanf(line, GREETING " %d %n", &v, &n) != 1 || !n) {
		snprintf(err, errlen, "%s is not a wimm doctor (it said: \"%.60s\")", who, line);
		return -1;
	}
	if (v != DOCTOR_PROTO_VERSION) {
		snprintf(err, errlen,
			 "%s speaks doctor protocol version %d, this wimm speaks version %d: run "
			 "the same wimm release on both ends",
			 who, v, DOCTOR_PROTO_VERSION);
		return -1;
	}
	return n;
}

int dp_connect(const char *host, int port, const char *fabric, int timeout_ms, struct dp_conn *c,
	       char *err, size_t errlen)
{
	char line[DP_LINE];
	int fd, n;

	memset(c, 0, sizeof(*c));
	fd = tcp_connect(host, port, timeout_ms, err, errlen);
	if (fd < 0)
		return -1;
	if (open_streams(fd, c)) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	fprintf(c->out, GREETING " %d %s\n", DOCTOR_PROTO_VERSION, fabric);
	fflush(c->out);
	if (dp_read(c, line, sizeof(line), timeout_ms, err, errlen))
		goto fail;
	n = check_greeting(line, "the doctor peer", err, errlen);
	if (n < 0)
		goto fail;
	if (!strncmp(line + n, "error ", 6)) {
		snprintf(err, errlen, "the doctor peer refused: %s", line + n + 6);
		goto fail;
	}
	if (sscanf(line + n, "ok %63s", c->peer) != 1) {
		snprintf(err, errlen, "bad greeting from the doctor peer: \"%.60s\"", line);
		goto fail;
	}
	return 0;
fail:
	dp_close(c);
	return -1;
}

int dp_call(struct dp_conn *c, char *line, size_t cap, char *err, size_t errlen, const char *fmt,
	    ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(c->out, fmt, ap);
	va_end(ap);
	fputc('\n', c->out);
	if (fflush(c->out)) {
		snprintf(err, errlen, "the doctor peer closed the connection");
		return -1;
	}
	/* A poll may wait for retries on the sender's side: generous. */
	if (dp_read(c, line, cap, 60000, err, errlen))
		return -1;
	if (!strncmp(line, "error ", 6)) {
		snprintf(err, errlen, "the doctor peer: %s", line + 6);
		return -1;
	}
	return 0;
}

void dp_close(struct dp_conn *c)
{
	if (c->out) {
		fputs("bye\n", c->out);
		fclose(c->out);
	}
	if (c->in)
		fclose(c->in);
	c->in = c->out = NULL;
}

/* One client: greeting, then requests until "bye" or EOF. */
static void serve_client(int fd, const struct dr_opts *o, const struct dr_fabric *f)
{
	struct dp_conn c;
	struct dv_serve *vs = NULL;
	char line[DP_LINE], err[256];
	int n;

	if (open_streams(fd, &c))
		return;
	if (dp_read(&c, line, sizeof(line), 10000, err, sizeof(err)))
		goto out;
	n = check_greeting(line, "the client", err, sizeof(err));
	if (n < 0) {
		fprintf(stderr, "wimm: doctor --serve: %s\n", err);
		fprintf(c.out, GREETING " %d error %s\n", DOCTOR_PROTO_VERSION, err);
		goto out;
	}
	{
		struct dr_fabric cf;

		if (dr_parse_fabric(line + n, &cf, err, sizeof(err)) || cf.kind != f->kind) {
			fprintf(c.out, GREETING " %d error this peer serves %s:%s, not '%s'\n",
				DOCTOR_PROTO_VERSION, f->kind == DR_VERBS ? "verbs" : "ofi",
				f->name, line + n);
			goto out;
		}
	}
	fprintf(c.out, GREETING " %d ok %s\n", DOCTOR_PROTO_VERSION, f->name);
	fflush(c.out);
	/* Requests wait for as long as the client's probes take. */
	while (!dp_read(&c, line, sizeof(line), 120000, err, sizeof(err)) && strcmp(line, "bye")) {
		int handled = 0;

#ifdef DOCTOR_HAVE_VERBS
		if (f->kind == DR_VERBS)
			handled = dv_serve_line(&vs, f->name, o, line, c.out);
#endif
#ifdef DOCTOR_HAVE_OFI
		if (f->kind == DR_OFI)
			handled = do_serve_line(f->name, o, line, c.out);
#endif

		if (!handled)
			fprintf(c.out, "error unknown request '%.40s'\n", line);
		if (fflush(c.out))
			break;
	}
out:
#ifdef DOCTOR_HAVE_VERBS
	dv_serve_end(&vs);
#endif
	fclose(c.out);
	fclose(c.in);
}

int dp_serve(const struct dr_opts *o, const struct dr_fabric *f)
{
	struct sockaddr_in6 sa = {.sin6_family = AF_INET6,
				  .sin6_port = htons((uint16_t)o->port),
				  .sin6_addr = IN6ADDR_ANY_INIT};
	int one = 1, zero = 0;
	int lfd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);

	signal(SIGPIPE, SIG_IGN);
	if (lfd < 0) {
		perror("wimm: doctor --serve: socket");
		return 1;
	}
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 4)) {
		fprintf(stderr, "wimm: doctor --serve: port %d: %s\n", o->port, strerror(errno));
		close(lfd);
		return 1;
	}
	{
		socklen_t len = sizeof(sa);

		getsockname(lfd, (struct sockaddr *)&sa, &len);
	}
	/* Scripts read the port from this line when they asked for -p 0. */
	fprintf(stderr, "wimm: doctor --serve: %s:%s on TCP port %d, protocol version %d\n",
		f->kind == DR_VERBS ? "verbs" : "ofi", f->name, ntohs(sa.sin6_port),
		DOCTOR_PROTO_VERSION);
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR)
				continue;
			perror("wimm: doctor --serve: accept");
			break;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		serve_client(fd, o, f);
		if (o->once)
			break;
	}
	close(lfd);
	return 0;
}
