/* Message rate: the client streams messages as fast as credits allow, the
 * server counts them and answers the last one with a single doorbell.
 *
 * The client's clock runs from its first post to the arrival of that
 * doorbell, so every message counted has reached the server. A warm-up
 * round (same protocol, untimed) comes first.
 *
 * Per op: write_imm and send_imm use one credit per message, write_send one
 * per notification (its write needs none), so the receive window (-d) bounds
 * how far the client runs ahead. write_poll writes need no credit, only send
 * queue room; the server sees no completion for them and instead polls for
 * the flag of the round's last write (all writes land at the same offset, in
 * order on one connection), then acknowledges. write_atomic likewise needs
 * no credit; the server polls the signal word until it counts every
 * message so far.
 * The acknowledgement is always a zero-length write_imm: one doorbell per
 * round, too rare to matter for the rate.
 *
 * --rate paces the timed round: message k leaves no earlier than k/rate
 * seconds after the first, so the receiver's CPU per doorbell can be
 * compared across wait modes at the same offered load. The server measures
 * its CPU time (getrusage) over the timed round.
 */
#include <sys/resource.h>
#include <sys/time.h>

#include "cli.h"

/* Wait, driving progress, until message k of a paced round is due (the
 * caller paces only when --rate gave a rate above 0). */
static void pace(struct endpoint *ep, uint64_t start_ns, uint32_t k)
{
	double pace_per_s = ep->opts->pace_per_s;
	uint64_t due = start_ns + (uint64_t)((double)k * 1e9 / pace_per_s);
	while (cli_now_ns() < due) {
		/* libfabric's tcp provider moves bytes only inside calls. */
		int rc = wimm_progress(ep->ctx);
		if (rc < 0)
			cli_fail(ep->ctx, rc, "%s: drive progress", ep->role);
	}
}

static void client_round(struct endpoint *ep, uint32_t first_seq, uint32_t count, uint32_t round,
			 int paced)
{
	int polled = ep->opts->op == OP_WRITE_POLL;
	if (paced && ep->opts->pace_per_s > 0) {
		uint64_t start_ns = cli_now_ns();
		for (uint32_t k = 0; k < count; k++) {
			pace(ep, start_ns, k);
			if (!polled)
				msg_send(ep, first_seq + k, 0);
			else if (k + 1 < count)
				msg_send_poll_bulk(ep, 1);
			else
				msg_send_poll_last(ep, round);
		}
	} else if (polled) {
		/* The loop the peers' rate tools run: nothing but the post. */
		if (count > 0) {
			msg_send_poll_bulk(ep, count - 1);
			msg_send_poll_last(ep, round);
		}
	} else {
		for (uint32_t k = 0; k < count; k++)
			msg_send(ep, first_seq + k, 0);
	}
	msg_receive_ack(ep, first_seq + count);
}

static void server_round(struct endpoint *ep, uint32_t first_seq, uint32_t count, uint32_t round)
{
	if (ep->opts->op == OP_WRITE_POLL) {
		msg_receive_poll_round(ep, round);
	} else if (ep->opts->op == OP_WRITE_ATOMIC) {
		msg_receive_atomic_upto(ep, first_seq + count);
	} else {
		for (uint32_t k = 0; k < count; k++)
			msg_receive(ep, first_seq + k);
	}
	msg_send_ack(ep, first_seq + count, 0);
}

static double seconds_of(struct timeval tv)
{
	return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

static void cpu_now(const struct endpoint *ep, struct rx_cpu *out)
{
	struct rusage ru;
	/* --self shares the process with the client: only our thread. */
	if (getrusage(ep->opts->self ? RUSAGE_THREAD : RUSAGE_SELF, &ru) != 0)
		cli_die("%s: getrusage failed", ep->role);
	out->user_s = seconds_of(ru.ru_utime);
	out->sys_s = seconds_of(ru.ru_stime);
}

void rx_cpu_start(const struct endpoint *ep, struct rx_cpu *mark)
{
	cpu_now(ep, mark);
}

void rx_cpu_stop(struct endpoint *ep, const struct rx_cpu *mark, uint32_t doorbells)
{
	struct rx_cpu now;
	cpu_now(ep, &now);
	ep->cpu.measured = 1;
	ep->cpu.user_s = now.user_s - mark->user_s;
	ep->cpu.sys_s = now.sys_s - mark->sys_s;
	ep->cpu.doorbells = doorbells;
}

void rx_cpu_report(const struct endpoint *ep)
{
	if (!ep->opts->json || !ep->cpu.measured)
		return;
	printf("{\"role\": \"receiver\", \"wait\": \"%s\", \"rx_cpu_user_s\": %.6f, "
	       "\"rx_cpu_sys_s\": %.6f, \"rx_doorbells\": %u}\n",
	       bench_wait_name(ep->opts->wait_mode), ep->cpu.user_s, ep->cpu.sys_s,
	       ep->cpu.doorbells);
	fflush(stdout);
}

void rate_server(struct endpoint *ep)
{
	uint32_t warmup = ep->opts->warmup;
	if (warmup > 0)
		server_round(ep, 0, warmup, 0);
	struct rx_cpu mark;
	rx_cpu_start(ep, &mark);
	server_round(ep, warmup, ep->opts->iters, 1);
	/* write_poll rounds have one flag to wait for, not a doorbell each. */
	rx_cpu_stop(ep, &mark, ep->opts->op == OP_WRITE_POLL ? 1 : ep->opts->iters);
}

void rate_client(struct endpoint *ep, struct bench_result *res)
{
	uint32_t warmup = ep->opts->warmup;
	if (warmup > 0)
		client_round(ep, 0, warmup, 0, 0);
	uint64_t start = cli_now_ns();
	client_round(ep, warmup, ep->opts->iters, 1, 1);
	res->elapsed_ns = cli_now_ns() - start;
	res->count = ep->opts->iters;
}
