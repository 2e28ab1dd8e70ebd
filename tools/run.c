/* Server, client and --self: who opens what, and in which thread.
 *
 * --self runs the server in a second thread. Each thread owns its endpoint
 * and so its own wimm context: contexts are single-threaded by contract.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void serve(struct endpoint *ep)
{
	if (ep->opts->mode == BENCH_PINGPONG)
		pingpong_server(ep);
	else if (ep->opts->mode == BENCH_BULK)
		bulk_server(ep);
	else
		rate_server(ep);
	msg_finish_server(ep);
}

static void run_client(struct endpoint *ep, const char *host, int port, struct bench_result *res)
{
	ep_open(ep, ep->opts, "client");
	ep_connect(ep, host, port);
	if (ep->opts->mode == BENCH_PINGPONG)
		pingpong_client(ep, res);
	else if (ep->opts->mode == BENCH_BULK)
		bulk_client(ep, res);
	else
		rate_client(ep, res);
	msg_finish_client(ep);
	snprintf(res->fabric, sizeof(res->fabric), "%s", wimm_ctx_fabric(ep->ctx));
	res->depth = ep->depth;
	ep_close(ep);
}

struct self_server {
	const struct bench_opts *opts;
	const char *host; /* NULL: found once the fabric is open */
	char host_buf[64];
	pthread_mutex_t lock;
	pthread_cond_t listening;
	int port; /* 0 until the server listens */
	struct endpoint ep;
};

static void *self_server_main(void *arg)
{
	struct self_server *server = arg;
	const struct bench_opts *opts = server->opts;

	ep_open(&server->ep, opts, "server");
	if (server->host == NULL)
		server->host = cli_self_host(wimm_ctx_fabric(server->ep.ctx), server->host_buf,
					     sizeof(server->host_buf));
	int port = ep_listen(&server->ep, server->host, opts->port_given ? opts->port : 0);
	if (port <= 0)
		cli_die("server: the listener reports no port (%d): pass a port with -p", port);
	pthread_mutex_lock(&server->lock);
	server->port = port;
	pthread_cond_signal(&server->listening);
	pthread_mutex_unlock(&server->lock);

	ep_accept(&server->ep);
	serve(&server->ep);
	ep_close(&server->ep);
	return NULL;
}

static int run_self(const struct bench_opts *opts, struct bench_result *res)
{
	/* Endpoints hold their event backlog: too large for a thread stack. */
	struct self_server *server = calloc(1, sizeof(*server));
	struct endpoint *client = calloc(1, sizeof(*client));
	if (server == NULL || client == NULL)
		cli_die("out of memory: close other programs or use a smaller -s");
	server->opts = opts;
	server->host = opts->host;
	pthread_mutex_init(&server->lock, NULL);
	pthread_cond_init(&server->listening, NULL);

	pthread_t thread;
	int rc = pthread_create(&thread, NULL, self_server_main, server);
	if (rc != 0)
		cli_die("cannot start the server thread: %s (run server and client as two "
			"processes instead of --self)",
			strerror(rc));
	pthread_mutex_lock(&server->lock);
	while (server->port == 0)
		pthread_cond_wait(&server->listening, &server->lock);
	int port = server->port;
	pthread_mutex_unlock(&server->lock);

	client->opts = opts;
	run_client(client, server->host, port, res);
	pthread_join(thread, NULL);
	res->rx = server->ep.cpu;

	pthread_cond_destroy(&server->listening);
	pthread_mutex_destroy(&server->lock);
	free(server);
	free(client);
	return 0;
}

static int run_server(const struct bench_opts *opts)
{
	struct endpoint *ep = calloc(1, sizeof(*ep));
	if (ep == NULL)
		cli_die("out of memory: close other programs or use a smaller -s");
	ep_open(ep, opts, "server");
	int port = ep_listen(ep, "0.0.0.0", opts->port);
	fprintf(stderr, "listening on port %d\n", port);
	ep_accept(ep);
	fprintf(stderr, "client connected: %s %s, %zu bytes, %u + %u iterations, fabric %s\n",
		bench_mode_name(opts->mode), bench_op_name(opts->op), opts->size, opts->warmup,
		opts->iters, wimm_ctx_fabric(ep->ctx));
	serve(ep);
	rx_cpu_report(ep);
	ep_close(ep);
	free(ep);
	fprintf(stderr, "done\n");
	return 0;
}

int bench_run(const struct bench_opts *opts)
{
	if (opts->host == NULL && !opts->self)
		return run_server(opts);

	struct bench_result res;
	memset(&res, 0, sizeof(res));
	if (opts->self) {
		run_self(opts, &res);
	} else {
		struct endpoint *ep = calloc(1, sizeof(*ep));
		if (ep == NULL)
			cli_die("out of memory: close other programs or use a smaller -s");
		ep->opts = opts;
		run_client(ep, opts->host, opts->port, &res);
		free(ep);
	}
	if (opts->mode == BENCH_BULK)
		bulk_report(opts, &res);
	else
		report_result(opts, &res);
	free(res.rtt_ns);
	return 0;
}
