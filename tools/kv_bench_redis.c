/* `wimm kv bench`: the store a user would pick instead. redis-server on
 * this host (no persistence), driven two ways: by redis-benchmark (Debian's
 * tool, uniform keys only, p99.9 not printed) and by a RESP client in each
 * bench client process, with exactly the key sequence and timing the wimm
 * clients use (uniform and zipfian). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "kv_bench.h"

int kvb_free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static int tcp_connect(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
		return fd;
	if (fd >= 0)
		close(fd);
	return -1;
}

pid_t kvb_start_redis(int port)
{
	char p[16];
	snprintf(p, sizeof(p), "%d", port);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		if (!freopen("/dev/null", "w", stdout))
			_exit(127);
		execlp("redis-server", "redis-server", "--port", p, "--bind", "127.0.0.1", "--save",
		       "", "--appendonly", "no", "--daemonize", "no", "--maxclients", "1000",
		       (char *)NULL);
		_exit(127);
	}
	for (int i = 0; pid > 0 && i < 500; i++) {
		int fd = tcp_connect(port);
		if (fd >= 0) {
			close(fd);
			return pid;
		}
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return -1;
		usleep(10000);
	}
	if (pid > 0) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
	}
	return -1;
}

/* "SET","rps","avg","min","p50","p95","p99","max" lines of --csv. */
int kvb_redis_benchmark(int port, const struct kvb_workload *w, struct kvb_phase_stats out[2])
{
	char cmd[256], line[512];
	int seen = 0;
	snprintf(cmd, sizeof(cmd),
		 "redis-benchmark -h 127.0.0.1 -p %d -t set,get -d %zu -c %d -n %llu -r %u --csv "
		 "2>/dev/null",
		 port, w->size, w->clients, (unsigned long long)w->ops * (unsigned)w->clients,
		 w->keys);
	fflush(stdout);
	FILE *f = popen(cmd, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		double rps, avg, mn, p50, p95, p99;
		char name[16];
		if (sscanf(line, "\"%15[A-Z]\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\"",
			   name, &rps, &avg, &mn, &p50, &p95, &p99) != 7)
			continue;
		int phase = strcmp(name, "SET") == 0 ? 0 : strcmp(name, "GET") == 0 ? 1 : -1;
		if (phase < 0)
			continue;
		out[phase] = (struct kvb_phase_stats){
		    .p50 = p50 * 1e3, .p99 = p99 * 1e3, .p999 = NAN, .rate = rps, .srv_cpu = NAN};
		seen++;
	}
	return pclose(f) == 0 && seen == 2 ? 0 : -1;
}

/* ------------------------------------------------- a RESP client process */

struct resp {
	int fd;
	char *buf; /* replies */
	size_t cap, have, used;
};

static int resp_open(void **h, const char *addr, const struct kvb_workload *w)
{
	const char *colon = strrchr(addr, ':');
	struct resp *r = calloc(1, sizeof(*r));
	if (!r || !colon)
		goto fail_alloc;
	r->cap = w->size + 64;
	r->buf = malloc(r->cap);
	r->fd = tcp_connect(atoi(colon + 1));
	if (!r->buf || r->fd < 0)
		goto fail_connect;
	int one = 1;
	setsockopt(r->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	*h = r;
	return 0;
fail_connect:
	if (r->fd >= 0)
		close(r->fd);
	free(r->buf);
fail_alloc:
	free(r);
	return -ECONNREFUSED;
}

static void resp_close(void *h)
{
	struct resp *r = h;
	close(r->fd);
	free(r->buf);
	free(r);
}

static int send_all(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		ssize_t s = writev(fd, iov, n);
		if (s < 0 && errno == EINTR)
			continue;
		if (s <= 0)
			return -EIO;
		while (n > 0 && (size_t)s >= iov->iov_len) {
			s -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + s;
			iov->iov_len -= (size_t)s;
		}
	}
	return 0;
}

/* One command: *N, then $len + bytes per argument. */
static int resp_command(struct resp *r, int argc, const void *const *argv, const size_t *lens)
{
	char head[16], sizes[3][24];
	struct iovec iov[10];
	int n = 0;
	iov[n++] = (struct iovec){head, (size_t)snprintf(head, sizeof(head), "*%d\r\n", argc)};
	for (int i = 0; i < argc; i++) {
		iov[n++] = (struct iovec){
		    sizes[i], (size_t)snprintf(sizes[i], sizeof(sizes[i]), "$%zu\r\n", lens[i])};
		iov[n++] = (struct iovec){(void *)argv[i], lens[i]};
		iov[n++] = (struct iovec){"\r\n", 2};
	}
	return send_all(r->fd, iov, n);
}

/* Read until `want` bytes are buffered past `used`. */
static int fill(struct resp *r, size_t want)
{
	if (r->used + want > r->cap)
		return -EPROTO;
	while (r->have < r->used + want) {
		ssize_t g = read(r->fd, r->buf + r->have, r->cap - r->have);
		if (g < 0 && errno == EINTR)
			continue;
		if (g <= 0)
			return -EIO;
		r->have += (size_t)g;
	}
	return 0;
}

/* The first reply line (without CRLF); *end is where it stops. */
static int reply_line(struct resp *r, size_t *end)
{
	r->have = r->used = 0;
	for (;;) {
		char *nl = r->have ? memchr(r->buf, '\n', r->have) : NULL;
		if (nl) {
			*end = (size_t)(nl - r->buf) + 1;
			return nl > r->buf && nl[-1] == '\r' ? 0 : -EPROTO;
		}
		int rc = fill(r, r->have + 1 - r->used);
		if (rc < 0)
			return rc;
	}
}

static int resp_put(void *h, const char *key, size_t klen, const void *v, size_t len)
{
	struct resp *r = h;
	size_t end;
	int rc = resp_command(r, 3, (const void *const[]){"SET", key, v}, (size_t[]){3, klen, len});
	if (rc == 0)
		rc = reply_line(r, &end);
	return rc < 0 ? rc : r->buf[0] == '+' ? 0 : -EPROTO;
}

static int resp_get(void *h, const char *key, size_t klen, void *buf, size_t cap)
{
	struct resp *r = h;
	size_t end;
	int rc = resp_command(r, 2, (const void *const[]){"GET", key}, (size_t[]){3, klen});
	if (rc == 0)
		rc = reply_line(r, &end);
	if (rc < 0)
		return rc;
	if (r->buf[0] != '$')
		return -EPROTO;
	long len = strtol(r->buf + 1, NULL, 10);
	if (len < 0)
		return 1; /* a miss */
	if ((size_t)len > cap)
		return -EPROTO;
	r->used = end;
	rc = fill(r, (size_t)len + 2);
	if (rc < 0)
		return rc;
	memcpy(buf, r->buf + end, (size_t)len);
	return 0;
}

static const char *resp_error(int rc)
{
	return strerror(-rc);
}

const struct kvb_store kvb_redis_store = {
    .name = "redis",
    .open = resp_open,
    .put = resp_put,
    .get = resp_get,
    .idle = NULL,
    .close = resp_close,
    .error = resp_error,
};
