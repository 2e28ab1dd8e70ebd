/* The server tests' client peers as processes (issue 6): the test's side
 * (spawn this program again with --server-child, read its lines, send it
 * commands, reap it) and the child's side (report, take commands, open a
 * context), with the "stream" role of conf_server.c. The roles of the load
 * tests are in conf_server_scale.c, conf_server_event_loop.c and
 * conf_server_cycles.c. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf.h"

/* In a child: where it reports ("connected 12", "parked", "fail ...") and
 * where the test's commands come from. */
#define CHILD_STATUS_FD 3
#define CHILD_CMD_FD 4

/* -------------------------------------------------------- child peers */

void srv_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* fd onto target with close-on-exec cleared, whatever fd was. */
static void move_fd(int fd, int target)
{
	if (fd == target)
		fcntl(fd, F_SETFD, 0);
	else
		dup2(fd, target);
}

int srv_peer_spawn(struct srv_peer *p, const char *netns, const char *const *argv)
{
	int st[2] = {-1, -1}, cmd[2] = {-1, -1};
	const char *full[24];
	int n = 0;

	memset(p, 0, sizeof(*p));
	p->pid = -1;
	p->st = p->cmd = -1;
	if (pipe2(st, O_CLOEXEC) || pipe2(cmd, O_CLOEXEC)) {
		conf_fail(__FILE__, __LINE__, "pipe2: %s", strerror(errno));
		goto fail;
	}
	if (netns) {
		full[n++] = "ip";
		full[n++] = "netns";
		full[n++] = "exec";
		full[n++] = netns;
	}
	full[n++] = conf_self;
	full[n++] = "--server-child";
	for (int i = 0; argv[i] && n < 23; i++)
		full[n++] = argv[i];
	full[n] = NULL;
	fflush(stdout);
	fflush(stderr);
	p->pid = fork();
	if (p->pid < 0) {
		conf_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
		goto fail;
	}
	if (p->pid == 0) {
		char ppid[24];
		/* Out of the way of 3 and 4 first, then onto them. */
		int s = fcntl(st[1], F_DUPFD_CLOEXEC, 64), c = fcntl(cmd[0], F_DUPFD_CLOEXEC, 64);

		if (s < 0 || c < 0)
			_exit(126);
		move_fd(s, CHILD_STATUS_FD);
		move_fd(c, CHILD_CMD_FD);
		snprintf(ppid, sizeof(ppid), "%d", (int)getppid());
		setenv("WIMM_CONF_PARENT", ppid, 1);
		execvp(full[0], (char *const *)full);
		_exit(127);
	}
	close(st[1]);
	close(cmd[0]);
	p->st = st[0];
	p->cmd = cmd[1];
	fcntl(p->st, F_SETFL, O_NONBLOCK);
	return 0;
fail:
	for (int i = 0; i < 2; i++) {
		if (st[i] >= 0)
			close(st[i]);
		if (cmd[i] >= 0)
			close(cmd[i]);
	}
	return -1;
}

int srv_peer_line(struct srv_peer *p, char *line, size_t len)
{
	for (;;) {
		char *nl = memchr(p->buf, '\n', p->len);

		if (nl) {
			size_t k = (size_t)(nl - p->buf);

			snprintf(line, len, "%.*s", (int)k, p->buf);
			memmove(p->buf, nl + 1, p->len - k - 1);
			p->len -= k + 1;
			if (strncmp(line, "fail ", 5) == 0)
				snprintf(p->why, sizeof(p->why), "%s", line + 5);
			if (strncmp(line, "log ", 4) == 0) {
				conf_diag("client %d: %s", (int)p->pid, line + 4);
				continue;
			}
			return 1;
		}
		if (p->st < 0 || p->eof)
			return p->eof ? -1 : 0;
		if (p->len == sizeof(p->buf))
			p->len = 0; /* a runaway line: drop it */
		ssize_t k = read(p->st, p->buf + p->len, sizeof(p->buf) - p->len);

		if (k > 0) {
			p->len += (size_t)k;
			continue;
		}
		if (k == 0)
			p->eof = 1;
		return k == 0 ? -1 : 0;
	}
}

int srv_peer_cmd(struct srv_peer *p, char c)
{
	return p->cmd >= 0 && write(p->cmd, &c, 1) == 1 ? 0 : -1;
}

int srv_peer_exit(struct srv_peer *p, int timeout_ms)
{
	int64_t deadline = conf_now_ms() + timeout_ms;
	int ws = 0;

	if (p->pid <= 0)
		return -1;
	for (;;) {
		pid_t w = waitpid(p->pid, &ws, WNOHANG);

		if (w == p->pid)
			break;
		if (w < 0 || conf_now_ms() >= deadline)
			return -1;
		conf_sleep_us(2000);
	}
	remove_shm_regions(p->pid);
	p->pid = -1;
	if (WIFEXITED(ws))
		return WEXITSTATUS(ws);
	return 128 + WTERMSIG(ws);
}

void srv_peer_kill(struct srv_peer *p)
{
	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
		remove_shm_regions(p->pid);
		p->pid = -1;
	}
}

void srv_peer_reap(struct srv_peer *p)
{
	srv_peer_kill(p);
	if (p->st >= 0)
		close(p->st);
	if (p->cmd >= 0)
		close(p->cmd);
	p->st = p->cmd = -1;
}

/* libfabric 1.17's shm provider takes a spinlock inside the shared region
 * on every post and progress call; a process killed or stopped while
 * holding it leaves its peer spinning inside the provider for ever (see
 * conf_failure.c). There the child is parked between two wimm calls first. */
int srv_needs_park(const char *uri)
{
	return strncmp(uri, "ofi:shm", 7) == 0;
}

/* ---------------------------------------------------- the child's side */

static volatile sig_atomic_t park_requested;

static void on_park(int sig)
{
	(void)sig;
	park_requested = 1;
}

void child_say(const char *fmt, ...)
{
	char buf[400];
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	if (write(CHILD_STATUS_FD, buf, (size_t)n) != n)
		_exit(9);
}

int child_fail(struct wimm_ctx *ctx, const char *what, int rc)
{
	const char *text = "";

	if (ctx)
		wimm_provider_error(ctx, &text);
	child_say("fail %s: %s (%s)", what, wimm_err_name(rc), text ? text : "");
	return 1;
}

int child_cmd(int block)
{
	char c;

	if (!block) {
		struct pollfd pfd = {.fd = CHILD_CMD_FD, .events = POLLIN};

		if (poll(&pfd, 1, 0) != 1)
			return 0;
	}
	ssize_t n = read(CHILD_CMD_FD, &c, 1);

	if (n == 0)
		_exit(0); /* the test is gone */
	return n == 1 ? c : 0;
}

/* What the library says about dropped and refused connections, passed on
 * to the test (the first few lines). */
static void child_log(void *arg, enum wimm_log_level level, const char *msg)
{
	static int lines;

	(void)arg;
	if (level <= WIMM_LOG_WARN && lines++ < 5)
		child_say("log %s", msg);
}

void srv_log(void *arg, enum wimm_log_level level, const char *msg)
{
	static int lines;

	(void)arg;
	if (level <= WIMM_LOG_WARN && lines++ < 5)
		conf_diag("server log: %s", msg);
}

int child_open(const char *uri, uint32_t liveness_ms, struct wimm_ctx **ctx)
{
	struct wimm_ctx_attr attr = {.liveness_ms = liveness_ms, .log = child_log};

	int rc = wimm_ctx_open(uri, &attr, ctx);
	if (rc)
		return child_fail(NULL, "wimm_ctx_open", rc);
	return 0;
}

/* Connect, say how long it took, then ring doorbells 0, 1, 2 ... every
 * pace_us (0: as fast as credits allow), handling our events. A failure
 * (the server dropping us among them) closes what we opened before we
 * return: the sanitizer build checks the child's exit for leaks. */
static int child_stream(const char *uri, const char *addr, unsigned pace_us, uint32_t liveness)
{
	struct wimm_ctx *ctx = NULL;
	struct wimm_conn *c = NULL;
	struct wimm_event ev[16];
	uint32_t seq = 0;
	int ret = 1;

	if (child_open(uri, liveness, &ctx))
		return 1;
	uint64_t t0 = conf_now_us();
	int rc = wimm_connect(ctx, addr, NULL, CONNECT_TIMEOUT_MS, &c);
	if (rc) {
		ret = child_fail(ctx, "wimm_connect", rc);
		goto close_ctx;
	}
	child_say("connected %llu", (unsigned long long)(conf_now_us() - t0));
	for (;;) {
		if (park_requested) {
			child_say("parked");
			for (;;)
				pause();
		}
		rc = wimm_write_imm(c, NULL, 0, 0, 0, seq, 0);
		if (rc == 0)
			seq++;
		else if (rc != WIMM_E_AGAIN) {
			ret = child_fail(ctx, "wimm_write_imm", rc);
			goto delete_conn;
		}
		int n = wimm_poll(ctx, ev, 16);
		if (n < 0) {
			ret = child_fail(ctx, "wimm_poll", n);
			goto delete_conn;
		}
		for (int i = 0; i < n; i++)
			if (ev[i].type == WIMM_EV_DISCONNECT) {
				ret = child_fail(ctx, "stream", ev[i].status);
				goto delete_conn;
			}
		if (pace_us && rc == 0)
			conf_sleep_us(pace_us);
	}
delete_conn:
	wimm_conn_delete(&c);
close_ctx:
	wimm_ctx_close(&ctx);
	return ret;
}

/* --server-child ROLE URI ARGS... */
int conf_server_child_main(int argc, char **argv)
{
	const char *parent = getenv("WIMM_CONF_PARENT");

	/* Never outlive the test, whatever happens to it. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (parent && atoi(parent) != (int)getppid())
		return 8;
	alarm((unsigned)(300 * conf_scale()));
	signal(SIGPIPE, SIG_IGN);
	signal(SIGUSR1, on_park);
	srv_raise_nofile();
	if (argc < 2)
		return 2;
	const char *role = argv[0], *uri = argv[1];

	if (strcmp(role, "stream") == 0 && argc == 5)
		return child_stream(uri, argv[2], (unsigned)atoi(argv[3]), (uint32_t)atol(argv[4]));
	return conf_server_scale_child(argc, argv);
}
